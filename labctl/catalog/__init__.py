"""What the lab holds: its folder, engine files, launch profiles, the CLI contracts that check them, and the hosts
file (hosts and Slurm clusters)."""
