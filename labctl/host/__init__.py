"""The edges: what labctl touches outside its own process, one folder per subject (Docker, images, Slurm, the Hub,
the sandbox, an engine's HTTP, remote hosts, the restart watcher, GPUs, files), and this machine's identity and homes."""
