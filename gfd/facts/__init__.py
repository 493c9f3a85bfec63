"""Facts of the snapshot that every projection derives alike -- which GPUs count and which
are healthy, model groups, MIG profile names, the architecture family, the CUDA version
(with GFD's Tegra rule), naming rules -- so labels, NodeFeature features and DRA devices
never disagree on them. Pure; imports nothing but the snapshot."""
