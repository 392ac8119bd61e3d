"""The Docker Engine: python-on-whales for every ordinary call (daemon.py), the Engine API's socket for the two answers
the docker CLI does not give (engine_api.py)."""
