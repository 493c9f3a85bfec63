"""``python -m gfd``: the same as the ``gfd`` console script."""

from gfd.launch import gfd

if __name__ == "__main__":
    gfd()
