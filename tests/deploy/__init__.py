"""Deployment artefacts: manifests and the Dockerfile."""
