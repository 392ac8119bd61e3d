"""The two programs of a code case, each run in its own sandbox container (standard library only,
Python 3.11): `answer` loads the model's code and answers calls; `tester` runs the suite's tests,
calling the answer's functions through `wire`, and alone decides the verdict."""
