"""An engine's HTTP surface at the edge: readiness probes, what an endpoint says about itself, which routes answer
without a key, the addresses it listens on, the auth proxy's port, and telemetry sampled beside a benchmark."""
