"""python3 -m labctl.harness --model NAME --port N [latency and fault options]
python3 -m labctl.harness --persona ENGINE [--persona-version V] -- ENGINE_ARGV…  (see personas.py)"""

import asyncio
import sys

from labctl.harness.model import parse_settings
from labctl.harness.server import run

if sys.argv[1:2] and sys.argv[1].split("=", 1)[0] == "--persona":
    from labctl.harness.engine_cli import EngineExit
    from labctl.harness.personas import persona_from_command_line

    try:
        persona, settings = persona_from_command_line(sys.argv[1:])
    except EngineExit as refused:
        sys.stderr.write(refused.stderr)
        sys.exit(refused.code)
    asyncio.run(run(settings, persona))
else:
    asyncio.run(run(parse_settings()))
