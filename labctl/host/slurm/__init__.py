"""Slurm clusters: the hosts file's clusters, Slurm's own commands, their parsed output, and the batch job's text."""
