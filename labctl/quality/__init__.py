"""Quality suites: loading, judging answers, and evaluating a run against a suite."""
