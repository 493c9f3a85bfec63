"""Inside a private mount namespace (``unshare -m``): build a container's root and exec its
command there. Run by ``fakes.pods``; standard library only, as root.

The root is a tmpfs holding every top-level directory of the host (bound, so the Python
that runs gfd is there), with overlays on /etc, /usr and /var (the container's own
writable copy: an image file such as /usr/bin/gpu-feature-discovery can be added, and
mount points such as /etc/kubernetes/node-feature-discovery/features.d created, without
touching the host), a fresh /run, the host's /proc, /dev and /tmp, and the pod's volumes
bound where its spec mounts them (after chroot, so paths resolve inside). Then execve the
command with ``argv[0]`` exactly as the pod spec gives it (as the container runtime does).

    python pod_init.py PLAN.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SPECIAL = {"proc", "sys", "dev", "etc", "usr", "var", "run", "tmp"}
OVERLAID = ("etc", "usr", "var")


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def build_root(plan: dict) -> str:
    root = plan["root"]
    os.makedirs(root, exist_ok=True)
    mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", root)
    for name in sorted(os.listdir("/")):
        host, inside = "/" + name, os.path.join(root, name)
        if name in SPECIAL:
            continue
        if os.path.islink(host):
            os.symlink(os.readlink(host), inside)
        elif os.path.isdir(host):
            os.mkdir(inside)
            mount("--rbind", host, inside)
    for name in OVERLAID:
        upper, work = (os.path.join(root, ".overlay", name, d) for d in ("upper", "work"))
        os.makedirs(upper)
        os.makedirs(work)
        os.mkdir(os.path.join(root, name))
        mount("-t", "overlay", "overlay", "-o",
              f"lowerdir=/{name},upperdir={upper},workdir={work}", os.path.join(root, name))
    for name in ("proc", "dev", "tmp"):
        os.mkdir(os.path.join(root, name))
        mount("--rbind", "/" + name, os.path.join(root, name))
    for name in ("run", "sys"):
        os.mkdir(os.path.join(root, name))
    mount("-t", "tmpfs", "tmpfs", os.path.join(root, "run"))
    return root


def furnish(plan: dict) -> None:
    """After chroot (so paths, symlinks included, resolve inside the container): the image's
    extra files and the pod's volumes. Volume sources must be visible inside (under /tmp)."""
    for link in plan.get("links", []):
        path = link["path"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(link["target"], path)
    for volume in plan.get("mounts", []):
        target = volume["target"]
        if os.path.isdir(volume["source"]):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()
        mount("--bind", volume["source"], target)
        if volume.get("read_only"):
            mount("-o", "remount,bind,ro", target)


def resolve(command: str, env: dict[str, str]) -> str:
    if "/" in command:
        return command
    for directory in env.get("PATH", "").split(":"):
        candidate = os.path.join(directory, command)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    raise SystemExit(f"pod_init: {command}: not found on the container's PATH")


def main() -> None:
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    root = build_root(plan)
    os.chroot(root)
    os.chdir("/")
    furnish(plan)
    os.chdir(plan.get("workdir", "/"))
    argv, env = plan["argv"], plan["env"]
    os.execve(resolve(argv[0], env), argv, env)


if __name__ == "__main__":
    main()
