"""labctl persona stand-in: `python3 -m sglang.launch_server …` runs the harness as SGLang."""

import os
import sys

os.execvp("python3", ["python3", "-m", "labctl.harness", "--persona", "sglang", "--", *sys.argv[1:]])
