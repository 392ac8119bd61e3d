"""labctl: run LLM inference engines in a GPU lab so that every number can be trusted."""

__version__ = "0.1.0"
