"""``python -m gfd``: the same as the ``gfd`` console script."""

from gfd.cli import main

if __name__ == "__main__":
    main()
