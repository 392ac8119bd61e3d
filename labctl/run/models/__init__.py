"""Models and disk: model fetches into the cache, garbage collection of what no run needs."""
