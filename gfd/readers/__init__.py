"""Readers: each turns one source (NVML, nvidia-smi, host files, simulations) into snapshot data."""
