"""Benchmarks: workloads, the lean HTTP/SSE client, metrics and intervals, sweeps and capacity search, a session, the on-host client."""
