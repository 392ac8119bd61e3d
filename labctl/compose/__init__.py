"""Profile -> compose text, pure: rendering, the canonical form and its hash, the `docker run` equivalent."""
