"""Container images: registries asked for manifests, Docker's pull stream, builds, and copies between daemons."""
