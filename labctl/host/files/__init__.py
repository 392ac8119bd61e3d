"""Files at the edge: written whole or not at all, outputs where the user points, and disk space checked first."""
