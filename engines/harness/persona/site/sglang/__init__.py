"""labctl persona stand-in for the `sglang` package: only `python3 -m sglang.launch_server` exists."""
