"""A host's GPUs: what they are (nvidia-smi), who claims them (on-host claims), and the host-wide lock around taking them."""
