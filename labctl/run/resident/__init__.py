"""Resident deployments: keys, host keys, ownership, share and rotate-key, restart watchers."""
