"""Where a run is placed: the one interface (backend), the kinds of backend found by folder (kinds), and one
folder per kind (docker, slurm)."""
