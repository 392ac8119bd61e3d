"""The edges: Docker (the only python-on-whales caller), HTTP probes, GPU inventory, locks, files, processes."""
