"""The image tier: the built image run with podman and runc, as each pod spec runs it."""
