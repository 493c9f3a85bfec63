"""``python -m fakes.apiserver --kubeconfig PATH [--node N]`` (from tests/): serve until
killed."""

from .server import main

main()
