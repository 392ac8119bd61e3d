"""Slurm clusters (the hosts file's `clusters:`): a run is a batch job, and Slurm chooses its node and GPUs."""

from __future__ import annotations

from labctl.run.backends.backend import BackendKind
from labctl.run.backends.slurm.slurm_kind import SlurmKind

KIND: BackendKind = SlurmKind()
