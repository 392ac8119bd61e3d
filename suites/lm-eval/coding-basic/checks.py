from labctl.quality.lm_eval_checks import code_passes  # noqa: F401  (task.yaml names it)
