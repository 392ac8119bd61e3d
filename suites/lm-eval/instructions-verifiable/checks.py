from labctl.quality.lm_eval_checks import instructions_followed  # noqa: F401  (task.yaml names it)
