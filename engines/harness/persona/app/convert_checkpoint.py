"""labctl persona stand-in for TensorRT-LLM's examples/models/core/<family>/convert_checkpoint.py."""

import sys

from labctl.harness.trtllm_build import main

sys.exit(main(["convert", "--", *sys.argv[1:]]))
