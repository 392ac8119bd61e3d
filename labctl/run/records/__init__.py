"""Records and their store: the typed Record, the store of runs, prep parts, exports and diffs."""
