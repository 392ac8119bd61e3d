"""The static readers behind `make contracts`' HTTP contracts: routes and metric names from source text,
without importing it."""

from __future__ import annotations

import sys

from helpers.support import REPO

sys.path.insert(0, str(REPO / "scripts" / "contracts"))
import fastapi_routes  # noqa: E402
import prometheus_names  # noqa: E402

SERVER = '''
import os
from fastapi import APIRouter
from starlette.routing import Mount
PING = "/ping"
router = APIRouter(prefix="/v1")
sub = APIRouter()

@app.get("/health")
@app.head("/health")
async def health(): ...

@router.post("/chat/completions")
async def chat(): ...

@app.get("/get_info")
async def old():
    """Get the info (deprecated - use /info instead).

    Args:
        x: DEPRECATED. Not the route's word.
    """

@app.get("/info")
async def info():
    """Info.

    y: deprecated parameter, not the route."""

@app.api_route(PING, methods=["GET", "POST"])
async def ping(): ...

@app.post(os.environ.get("ROUTE", "/api/chat"))
async def ollama(): ...

@app.get(some_variable)
async def unknown(): ...

app.add_api_route("/version", version, methods=["GET"])
app.routes.append(Mount("/metrics", make_asgi_app()))
'''


def test_routes_are_read_with_prefixes_methods_and_deprecations() -> None:
    found, unresolved = fastapi_routes.routes_in_source(SERVER, "server.py")
    by_path = {f.path: f for f in found}
    assert {m for f in found if f.path == "/health" for m in f.methods} == {"GET", "HEAD"}
    assert by_path["/v1/chat/completions"].methods == {"POST"}
    assert by_path["/get_info"].deprecated == "Get the info (deprecated - use /info instead)."
    assert by_path["/info"].deprecated is None
    assert by_path["/ping"].methods == {"GET", "POST"}
    assert by_path["/api/chat"].methods == {"POST"}  # the route as served when the variable is unset
    assert by_path["/version"].methods == {"GET"} and by_path["/metrics"].methods == {"MOUNT"}
    line = SERVER.splitlines().index("@app.get(some_variable)") + 1
    assert unresolved == [f"server.py:{line}"]  # never guessed


def test_metric_names_are_the_exposed_ones() -> None:
    text = """
from prometheus_client import Counter, Gauge, Histogram
a = Counter(name="eng:requests", documentation="d")
b = Counter("eng:tokens_total", "d")
c = self._gauge_cls(name="eng:running", documentation="d")
d = Histogram(name="eng:latency_seconds", documentation="d")
e = Gauge(name="other:thing", documentation="d")
f = Counter(name=prefix + "x", documentation="d")
def info(kind):
    if kind == "cache":
        name = "eng:cache_info"
    g = self._gauge_cls(name=name, documentation="d")
"""
    assert prometheus_names.names_in_source(text, "eng:") == {
        "eng:requests_total": "counter",
        "eng:tokens_total": "counter",
        "eng:running": "gauge",
        "eng:latency_seconds": "histogram",
        "eng:cache_info": "gauge",  # a variable the file assigns the literal to, as vLLM's cache_config_info
    }
