"""Images: pulls with progress, copies to a host, pinning a tag to a digest."""
