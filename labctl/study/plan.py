"""`labctl study plan`: the study file expanded into cells and checked before any GPU time — the same-rules
gate, each cell's memory fit on its target GPU, the levels whose KV cache cannot hold every stream (KV-bound:
run and marked, or left out when the study says drop_kv_bound), the levels above each engine's batch cap, the
effective settings that differ between cells, the disk the models and images need (and what is cached), what
the hosts can give, and a duration estimated from past records."""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from labctl.bench.client import CLIENT_VERSION
from labctl.bench.workloads import Workload, load_workload, with_overrides
from labctl.catalog.batch_cap import BatchCap
from labctl.catalog.clusters_file import get_cluster
from labctl.catalog.engine_settings import SAME_RULES, TITLES, Effective, differing
from labctl.catalog.fit import Target, architecture_for, default_target, fit
from labctl.catalog.hosts_file import load_hosts
from labctl.catalog.lab import Lab
from labctl.catalog.limits import MAX_CONCURRENCY
from labctl.catalog.memory import Estimate
from labctl.catalog.profiles import with_overrides as with_port
from labctl.compose.declared_settings import effective_settings
from labctl.compose.render import serve_command
from labctl.errors import BadInput
from labctl.quality.suites import Suite, load_suite
from labctl.quality.tasks import load_task
from labctl.run.records.store import Runs
from labctl.study.cells import Cell, expand_cells
from labctl.study.facts import HostFacts, cluster_facts, host_facts, image_identity, model_cached, revision_commit
from labctl.study.fingerprint import Fingerprint, argv_hash, make_fingerprint
from labctl.study.gate import check_same_rules
from labctl.study.prompt_budget import PromptBudget, plan_prompts
from labctl.study.spec import LM_EVAL, TARGET_GPUS, Study


@dataclass
class CellPlan:
    cell: Cell
    accelerator: str
    fingerprints: list[Fingerprint]  # one per repeat
    levels: dict[str, list[int]]  # per workload: the levels this cell runs
    kv_bound: dict[str, list[int]]  # per workload: levels whose KV cache cannot hold every stream at once
    kv_streams: dict[str, int]  # per workload with KV-bound levels: how many of its streams the KV cache holds
    kv_dropped: dict[str, list[int]]  # per workload: KV-bound levels left out (the study's drop_kv_bound)
    fit: Estimate | None
    fit_target: str
    image: str
    image_cached: bool
    model_gib: float | None
    model_cached: bool
    estimate_s: float | None
    batch_cap: BatchCap = BatchCap(None)
    settings: dict[str, Effective] | None = None  # as the command and the engine's folder say (nothing runs)
    findings: list[str] = field(default_factory=list)

    @property
    def over_cap(self) -> dict[str, list[int]]:
        """Per workload: the levels this cell runs with more streams than its engine's batch cap."""
        return {name: over for name, levels in self.levels.items() if (over := self.batch_cap.above(levels))}

    @property
    def fits(self) -> bool:
        return self.fit is None or self.fit.fits


@dataclass
class StudyPlan:
    study: Study
    hosts: dict[str, HostFacts]
    workloads: dict[str, Workload]
    suites: dict[str, Suite | TaskSuite]
    cells: list[CellPlan]
    findings: list[str]  # said by plan; those in `refusals` also stop run
    refusals: list[str]
    prompts: list[PromptBudget] = field(default_factory=list)  # per workload: distinct prompts needed and held

    def order(self) -> list[tuple[CellPlan, int]]:
        """Repeats interleaved across cells (A1 B1 C1 A2 …), so that a host's drift touches every engine alike."""
        return [(cell, r) for r in range(1, self.study.repeats + 1) for cell in self.cells]


def study_workloads(lab: Lab, study: Study) -> dict[str, Workload]:
    chosen: dict[str, Workload] = {}
    for entry in study.workloads:
        base = load_workload(lab, entry.name)
        ladder = list(entry.concurrency or base.concurrency)
        if entry.unlimited:  # every request of the top level in flight at once: no concurrency limit
            sized = with_overrides(base, ladder, entry.requests)
            ladder.append(min(sized.requests_for(max(ladder)), MAX_CONCURRENCY))
        chosen[entry.name] = with_overrides(base, sorted(set(ladder)), entry.requests, slo=study.slo)
    return chosen


@dataclass(frozen=True)
class TaskSuite:
    """An lm-evaluation-harness task set as a study's suite: its version and the hash of its files."""

    name: str  # lm-eval:TASK
    version: str
    full_version: str


def task_suite(lab: Lab, name: str) -> TaskSuite:
    task = load_task(lab, name.removeprefix(LM_EVAL))
    digest = hashlib.sha256()
    for path in sorted(p for p in task.folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(task.folder)).encode() + b"\0" + path.read_bytes())
    return TaskSuite(name, task.version, f"{task.version} +{digest.hexdigest()[:12]} ({task.source})")


def study_suites(lab: Lab, study: Study) -> dict[str, Suite | TaskSuite]:
    chosen: dict[str, Suite | TaskSuite] = {}
    for name, version in study.suites:
        suite = task_suite(lab, name) if name.startswith(LM_EVAL) else load_suite(lab, name)
        if version is not None and suite.version != version:
            raise BadInput(
                f"{study.path}: suite {name} is version {suite.version} in this lab and the study fixes {version}: "
                "update the study or the suite."
            )
        chosen[name] = suite
    return chosen


def cell_accelerator(cell: Cell, facts: HostFacts) -> str:
    engine = cell.profile.engine
    gpu_free_simulation = not engine.needs_gpu and engine.cpu_backend is None  # labctl's harness, or one like it
    if facts.entry.simulated or (facts.cluster and facts.cluster.simulated) or gpu_free_simulation:
        return "simulated"
    if not cell.profile.engine.needs_gpu:
        return "cpu"
    return facts.accelerator


def fit_target(cell: Cell, facts: HostFacts) -> Target:
    if cell.entry.target_gpu:
        memory, unified = TARGET_GPUS[cell.entry.target_gpu]
        return Target(f"{cell.entry.target_gpu} (named by the study)", memory, unified)
    if facts.gpus:
        gpu = facts.gpus[0]
        if gpu.unified_memory:
            return Target(f"{gpu.name} (unified memory)", facts.entry.unified_memory_gib or 119.6, True)
        total = gpu.memory_total_mib.replace("MiB", "").strip()
        if total.isdigit():
            return Target(gpu.name, int(total) / 1024)
    return default_target(cell.profile)


def kv_streams(workload: Workload, estimate: Estimate | None) -> int | None:
    """How many of the workload's sequences (prompt plus output tokens each) the KV cache holds at once; None
    when unknown (no fit estimate, or lengths the workload does not fix)."""
    dataset = workload.spec["dataset"]
    per_request = int(dataset.get("input_len") or 0) + int(dataset.get("output_len") or 0)
    if estimate is None or per_request <= 0 or estimate.max_tokens_fit <= 0:
        return None
    return max(1, estimate.max_tokens_fit // per_request)


def kv_bound_levels(levels: list[int], streams: int | None) -> list[int]:
    """The levels with more streams than the KV cache holds: the engine queues and preempts there."""
    return [] if streams is None else [c for c in levels if c > streams]


@dataclass(frozen=True)
class Ladders:
    """Per workload: the levels a cell runs, those KV-bound among them, how many streams its KV cache holds, and
    the KV-bound levels left out (drop_kv_bound)."""

    levels: dict[str, list[int]]
    bound: dict[str, list[int]]
    streams: dict[str, int]
    dropped: dict[str, list[int]]


def plan_ladders(workloads: dict[str, Workload], estimate: Estimate | None, drop_kv_bound: bool) -> Ladders:
    """Every level the study asks for, the KV-bound ones marked (and left out only when the study says so)."""
    ladders = Ladders({}, {}, {}, {})
    for name, workload in workloads.items():
        held = kv_streams(workload, estimate)
        asked = list(workload.concurrency)
        ladders.bound[name] = kv_bound_levels(asked, held)
        if ladders.bound[name] and held is not None:
            ladders.streams[name] = held
        ladders.dropped[name] = ladders.bound[name] if drop_kv_bound else []
        ladders.levels[name] = [c for c in asked if c not in ladders.dropped[name]]
    return ladders


def estimate_seconds(
    runs: Runs, cell: Cell, workloads: dict[str, Workload], levels: dict[str, list[int]]
) -> float | None:
    """Cold start, then level by level, from this home's past records of the same setup on the same host."""
    from labctl.bench.results import list_results

    cold: list[float] = []
    per_level: dict[tuple[str, int], list[float]] = {}
    for run_id in runs.all_ids()[-200:]:
        record = runs.try_load(run_id)
        if record is None or record.engine != cell.profile.engine.name or record.profile != cell.profile.name:
            continue
        if record.host_entry != cell.host:
            continue
        if record.timings.cold_start_s:
            cold.append(record.timings.cold_start_s)
        for result in list_results(runs, run_id):
            for level in result.levels:
                if level.duration_s is not None:
                    per_level.setdefault((result.workload.name, level.concurrency), []).append(level.duration_s)
    if not cold:
        return None
    total = statistics.median(cold)
    for name, chosen in levels.items():
        for c in chosen:
            seen = per_level.get((name, c))
            if not seen:
                return None
            total += statistics.median(seen)
    return total


def plan_cell(
    study: Study,
    cell: Cell,
    facts: HostFacts,
    workloads: dict[str, Workload],
    suites: dict[str, Suite | TaskSuite],
    runs: Runs,
) -> CellPlan:
    from labctl.host.remote.hosts import activate

    activate(facts.entry)
    profile = cell.profile
    image, cached = image_identity(profile)
    command = serve_command(with_port(profile, port=1), None)  # where it listens is placement, not setup
    target = fit_target(cell, facts)
    estimate = fit(profile, target)
    ladders = plan_ladders(workloads, estimate, study.drop_kv_bound)
    levels, bound, streams, dropped = ladders.levels, ladders.bound, ladders.streams, ladders.dropped
    arch = architecture_for(profile, None)
    fingerprints = [
        make_fingerprint(
            cell.key,
            repeat,
            image,
            argv_hash(command.entrypoint, command.words),
            revision_commit(profile),
            {name: w.sha256 for name, w in workloads.items()},
            {name: s.full_version for name, s in suites.items()},
            CLIENT_VERSION,
            facts.gpu_text,
        )
        for repeat in range(1, study.repeats + 1)
    ]
    plan = CellPlan(
        cell=cell,
        accelerator=cell_accelerator(cell, facts),
        fingerprints=fingerprints,
        levels=levels,
        kv_bound=bound,
        kv_streams=streams,
        kv_dropped=dropped,
        fit=estimate,
        fit_target=target.name,
        image=image,
        image_cached=cached,
        model_gib=round(arch.parameters_b * arch.weight_bytes, 1) if arch else None,
        model_cached=model_cached(profile),
        estimate_s=estimate_seconds(runs, cell, workloads, levels),
        batch_cap=cell_batch_cap(command.words, cell),
        settings=effective_settings(profile),
    )
    if estimate is not None and not estimate.fits:
        plan.findings.append(f"{cell.key}: does not fit {target.name}: up would refuse it")
    if profile.legacy:
        plan.findings.append(f"{cell.key}: profile {profile.engine.name}/{profile.name} is legacy: {profile.legacy}")
    for name, over in bound.items():
        if not over:
            continue
        holds = f"its KV cache holds about {streams[name]} streams"
        shown = ",".join(map(str, over))
        if dropped[name]:
            plan.findings.append(f"{cell.key}: {name} drops c={shown}: KV-bound, {holds} (drop_kv_bound)")
        else:
            plan.findings.append(
                f"{cell.key}: {name} c={shown} KV-bound ({holds}): they run, with the engine's preemption and "
                "queue counters beside them"
            )
    plan.findings += cap_findings(plan)
    return plan


def cell_batch_cap(words: list[str], cell: Cell) -> BatchCap:
    """The cap the cell's engine will run with: its rendered command line, else the engine folder's defaults."""
    return cell.profile.engine.batch_cap_rule.read(words, "the cell's command line")


def cap_findings(plan: CellPlan) -> list[str]:
    """The levels above the cell's batch cap, each workload in one line: how many requests wait at the top."""
    cap = plan.batch_cap
    return [
        f"{plan.cell.key}: {name} c={','.join(map(str, over))} above the batch cap of {cap.value} "
        f"({cap.setting}, {cap.source}): up to {max(over) - (cap.value or 0)} requests queue"
        for name, over in plan.over_cap.items()
    ]


def settings_findings(cells: dict[str, dict[str, Effective] | None]) -> list[str]:
    """The effective settings that differ between cells, each value with how it is known (no engine runs yet)."""
    found = differing({key: settings for key, settings in cells.items() if settings is not None})
    return [
        f"setting {TITLES[name]} differs: "
        + "; ".join(
            f"{key} {e.value if e else 'unknown'} ({e.source if e else 'not stated'})" for key, e in cells.items()
        )
        + (" — a same-rules field: compare refuses these cells unless --allow-mismatch" if name in SAME_RULES else "")
        for name, cells in found.items()
    ]


def plan_study(
    lab: Lab, study: Study, runs: Runs, default_host: str | None = None, port: int | None = None
) -> StudyPlan:
    """Everything `run` would do, checked; refusals of the file itself raise BadInput before a host is asked."""
    workloads = study_workloads(lab, study)
    suites = study_suites(lab, study)
    configured = load_hosts(lab.root)
    names = study.hosts or [configured.get(default_host).name]
    clusters = {name: c for name in names if (c := get_cluster(lab.root, name)) is not None}
    entries = {name: configured.get(name) for name in names if name not in clusters}
    cells = expand_cells(lab, study, names, port, set(clusters))
    check_same_rules(study, cells)
    facts = {name: host_facts(entry) for name, entry in entries.items()}
    facts.update({name: cluster_facts(cluster) for name, cluster in clusters.items()})
    plans = [plan_cell(study, c, facts[c.host], workloads, suites, runs) for c in cells]
    findings: list[str] = []
    refusals: list[str] = []
    for name, fact in facts.items():
        if fact.problem:
            refusals.append(f"host {name} did not answer: {fact.problem}")
    for plan in plans:
        if plan.accelerator != study.environment:
            refusals.append(
                f"environment: the study expects {study.environment} and cell {plan.cell.key} runs on "
                f"{plan.accelerator} (host {plan.cell.host}{', simulated' if facts[plan.cell.host].entry.simulated else ''})"
            )
        findings.extend(plan.findings)
    budgets = [
        plan_prompts(
            name,
            workload,
            [p.levels.get(name) or [] for p in plans],
            study.repeats,
            str(study.model["id"]),
            bool(study.spec["allow_unpinned"]),
        )
        for name, workload in workloads.items()
    ]
    for budget in budgets:
        if budget.too_few:
            raise BadInput(f"{study.path}: {budget.too_few}")
        findings.extend(budget.findings)
        refusals.extend(budget.refusals)
    findings.extend(settings_findings({p.cell.key: p.settings for p in plans}))
    gpu_models = {facts[p.cell.host].gpu_model for p in plans if p.cell.profile.engine.needs_gpu}
    if len(gpu_models) > 1:
        findings.append(
            f"GPU model differs across cells ({'; '.join(sorted(gpu_models))}): the report compares them only marked"
        )
    return StudyPlan(study, facts, workloads, suites, plans, findings + refusals, refusals, budgets)


def describe(plan: StudyPlan) -> dict[str, Any]:
    """The plan as data (`--json`)."""
    return {
        "study": plan.study.name,
        "file": str(plan.study.path),
        "repeats": plan.study.repeats,
        "cells": [
            {
                "cell": p.cell.key,
                "placement": {"kind": p.cell.placement.kind, "name": p.cell.host},
                "port": p.cell.profile.port,
                "accelerator": p.accelerator,
                "levels": p.levels,
                "kv_bound": p.kv_bound,
                "kv_streams": p.kv_streams,
                "kv_dropped": p.kv_dropped,
                "settings": None if p.settings is None else {k: asdict(v) for k, v in p.settings.items()},
                "fit": None if p.fit is None else {"target": p.fit_target, "fits": p.fit.fits},
                "image": p.image,
                "image_cached": p.image_cached,
                "model_gib": p.model_gib,
                "model_cached": p.model_cached,
                "estimate_s": p.estimate_s,
                "batch_cap": p.batch_cap.to_json(),
                "over_batch_cap": p.over_cap,
            }
            for p in plan.cells
        ],
        "batch_caps_note": plan.study.batch_caps_note,
        "prompts": [b.to_json() for b in plan.prompts],
        "findings": plan.findings,
        "refusals": plan.refusals,
    }
