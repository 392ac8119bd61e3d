"""python3 -m labctl.harness --model NAME --port N [latency and fault options]"""

import asyncio

from labctl.harness.model import parse_settings
from labctl.harness.server import run

asyncio.run(run(parse_settings()))
