"""Helpers shared by the tests: the CLI as a subprocess, local harness processes, hostile servers, a
loopback Hub, registry images, and the rule for tests that need Docker."""
