"""Slurm clusters at the edge: Slurm's own commands, their parsed output, and the batch job's text (the clusters
themselves are read from the hosts file in catalog/clusters_file.py)."""
