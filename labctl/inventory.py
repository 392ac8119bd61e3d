"""What labctl runs on this host right now, from the containers' own labels (plus records when the
run was started from this home)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from labctl import docker as dk
from labctl.deployments import engine_counters
from labctl.health import probe_now
from labctl.lifecycle import base_url
from labctl.records import Runs


def live_runs(runs: Runs, probe: bool = True) -> list[dict[str, Any]]:
    by_run: dict[str, list[Any]] = {}
    for container in dk.labctl_containers(all_states=True):
        by_run.setdefault(dk.labels_of(container).get(dk.RUN_LABEL, "?"), []).append(container)
    out = []
    for run_id, containers in sorted(by_run.items()):
        serve = next((c for c in containers if dk.service_of(c) == "serve"), containers[0])
        labels = dk.labels_of(serve)
        state = serve.state
        record = runs.load(run_id) if runs.exists(run_id) else None
        host, port = labels.get("labctl.host", "127.0.0.1"), labels.get("labctl.port", "")
        url = base_url(host, port)
        probe_path = (record or {}).get("probe", "/health")
        health = probe_now(url, probe_path) if probe and state.running else str(state.status)
        started = state.started_at
        uptime = (dt.datetime.now(dt.timezone.utc) - started).total_seconds() if started and state.running else None
        gpus = labels.get("labctl.gpus", "none")
        counters = engine_counters(url, (record or {}).get("metrics_path")) if probe and state.running else {}
        out.append({
            "run_id": run_id,
            "engine": labels.get("labctl.engine", "?"),
            "profile": labels.get("labctl.profile", "?"),
            "status": (record or {}).get("status", str(state.status)),
            "base_url": url + "/v1",
            "model": (record or {}).get("served_model_name", ""),
            "gpus": [] if gpus == "none" else gpus.split(","),
            "health": health,
            "owner": labels.get("labctl.owner", "?"),
            "record": str(runs.record_path(run_id)) if record else "",
            "container_state": str(state.status),
            "uptime_s": round(uptime, 1) if uptime is not None else None,
            "since": labels.get("labctl.created_at", ""),
            "restarts": int(serve.restart_count or 0),
            "resident": labels.get("labctl.resident") == "true",
            "environment_label": labels.get("labctl.environment_label", ""),
            "requests_served": counters.get("requests"),
            "tokens_served": counters.get("tokens"),
        })
    return out
