"""labctl's GPU-free OpenAI-compatible engine (standard library only)."""
