"""A Slurm cluster as a backend: `up --host CLUSTER` submits a batch job and Slurm alone chooses the node and
the GPUs; `reproduce --host CLUSTER` submits the recorded setup, pinned by its digest, the same way (the
export only says how many GPUs)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import labctl.run.backends.slurm.adopt as adopt
import labctl.run.backends.slurm.jobs as jobs
from labctl.catalog.clusters_file import ClusterEntry
from labctl.catalog.hosts_file import HostEntry
from labctl.catalog.lab import Lab
from labctl.errors import BadInput
from labctl.host.docker import daemon as dk
from labctl.run.backends.backend import Leftover, Say, StatusSection, StopRequest
from labctl.run.backends.slurm.job_record import job_of
from labctl.run.lifecycle.down import Stopped
from labctl.run.lifecycle.reproduce import ReproduceRequest, checked_source, reproduction
from labctl.run.lifecycle.status import LogView, engine_logs
from labctl.run.lifecycle.up_plan import UpRequest
from labctl.run.records.record import Record
from labctl.run.records.store import Runs, is_run_id

HEADER = ("RUN", "ENGINE/PROFILE", "JOB", "STATE", "NODE", "GPUS", "EXIT", "ENDPOINT")


@dataclass(frozen=True)
class SlurmCluster:
    cluster: ClusterEntry

    @property
    def name(self) -> str:
        return self.cluster.name

    @property
    def queues(self) -> bool:
        return True

    def parse_gpus(self, text: str | None) -> list[str] | None:
        return None if text is None else [text]  # a count, checked with the other options when the job starts

    def job_request(self, request: UpRequest) -> jobs.JobRequest:
        """The per-run options a job takes, refused before anything is submitted."""
        if request.key_file is not None or request.bind is not None:
            raise BadInput(
                "on a Slurm cluster, a resident run takes --keys N (generated); --key-file and --bind are not supported yet."
            )
        given = [
            flag
            for flag, used in (
                ("--owner", request.owner is not None),
                ("--replace", request.replace),
                ("--cache-dir", request.cache_dir is not None),
                ("--copy-image", request.copy_image),
                ("--allow-unsupported", request.allow_unsupported),
                ("--allow-no-auth", request.allow_no_auth),
                ("--allow-uncontracted", request.allow_uncontracted),
                ("--allow-unfit", request.allow_unfit),
            )
            if used
        ]
        if given:  # never silently dropped: the job would run as if they had not been given
            raise BadInput(
                f"on a Slurm cluster, {', '.join(given)} {'is' if len(given) == 1 else 'are'} not supported yet "
                "(the job runs as you, on the nodes' own caches and images, with every check on): leave "
                f"{'it' if len(given) == 1 else 'them'} out, or run on a host (--host NAME)."
            )
        gpus = ",".join(request.gpus) if request.gpus is not None else None
        if gpus is not None and not gpus.isdigit():
            raise BadInput(
                f"--gpus {gpus!r}: on a Slurm cluster give a GPU count (Slurm chooses which GPUs), e.g. --gpus 2."
            )
        if request.minutes is not None and not 1 <= request.minutes <= 10080:
            raise BadInput(f"--time {request.minutes}: give whole minutes from 1 to 10080.")
        return jobs.JobRequest(
            engine=request.engine,
            profile_name=request.profile,
            gpus=int(gpus) if gpus else None,
            port=request.port,
            minutes=request.minutes,
            allow_unpinned=request.allow_unpinned,
            timeout=request.timeout,
            keys=(request.keys or 1) if request.resident else 0,
            profile=request.profile_override,
        )

    def start(self, lab: Lab, runs: Runs, request: UpRequest, say: Say, progress: Say | None = None) -> Record:
        job = self.job_request(request)
        if request.fetch:  # the default, and nothing it could do here: said, not silently dropped
            say(
                f"note: on cluster {self.name} labctl fetches nothing: the job's engine reads the model from the nodes' own cache"
            )
        return jobs.up_on_cluster(lab, runs.home, self.cluster, job, say)

    def ready_lines(self, record: Record) -> list[str]:
        job = job_of(record)
        gpus = ", ".join(f"{i} {u}" for i, u in zip(job.gpu_indexes, job.gpu_uuids, strict=True))
        lines = [
            f"ready: {record.engine}/{record.profile} run {record.run_id} on cluster {job.cluster}",
            f"  OpenAI base URL  {record.base_url}",
            f"  Slurm job        {job.job_id} on node {job.node}, time limit {job.time_limit_min} min",
            f"  GPUs             {gpus}" + ("  (simulated GPU: harness-check)" if record.gpus.simulated else ""),
            f"  queue wait       {job.queue_wait_s} s (prep, not cold start)",
            f"  ready            {record.timings.ready_s} s after the job started",
        ]
        if job.resident_keys:
            lines.append(
                f"  resident         {job.resident_keys} API key(s) in this home's key store; share access with: "
                f"labctl share {record.run_id}"
            )
        return [*lines, f"  stop it with     labctl down {record.run_id}"]

    def summary(self, record: Record) -> dict[str, Any]:
        return {**record.summary(), "slurm": record.to_json()["slurm"]}

    def reproduce(
        self, lab: Lab, runs: Runs, request: ReproduceRequest, say: Say, progress: Say | None = None
    ) -> Record:
        export, profile, check, placed = checked_source(lab, runs, request, say)
        resident = (export.record or {}).get("resident")
        keys = int(resident.get("keys") or 1) if isinstance(resident, dict) else 0
        gpus = placed.gpu_count or len(export.host.get("gpu_ids") or []) or None
        job = jobs.JobRequest(
            engine=profile.engine.name,
            profile_name=profile.name,
            gpus=gpus,
            port=request.port,
            timeout=request.timeout,
            keys=keys,
            profile=placed,
        )
        run = jobs.up_on_cluster(lab, runs.home, self.cluster, job, say)
        return runs.update(
            run.run_id,
            reproduced_from=export.run_id,
            reproduction=reproduction(export, runs.load(run.run_id), bool(check.problems)),
        )

    def stop(self, runs: Runs, request: StopRequest) -> list[Stopped]:
        """One run of this cluster, named by its id: the job cancelled, its containers gone."""
        target = request.target
        if target is None or not is_run_id(target):
            raise BadInput(f"on cluster {self.name}, name the run to stop: labctl down RUN_ID.")
        record = jobs.down_on_cluster(runs.home, self.cluster, jobs.load(runs.home, target))
        job = job_of(record)
        return [
            Stopped(
                target, record.engine, record.profile, detail=f": job {job.job_id} {job.state}, exit {job.exit_code}"
            )
        ]

    def status(self, runs: Runs) -> list[StatusSection]:
        unreachable: list[str] = []
        found = jobs.cluster_runs(runs.home, self.cluster, unreachable)
        problem = unreachable[0] if unreachable else ""
        notes: list[str] = []
        if not problem and any(adopt.abandoned(r) for r in found):  # ups gone while queued or starting
            notes = [adopt.settle(runs.home, self.cluster, r) for r in found if adopt.abandoned(r)]
            found = [jobs.load(runs.home, r.run_id) for r in found]
        section = self.section(found, empty=f"no run of this home on cluster {self.name}", problem=problem)
        return [dataclasses.replace(section, notes=tuple(notes))]

    def section(self, found: list[Record], empty: str = "", problem: str = "") -> StatusSection:
        """`problem`: Slurm did not answer. The runs are listed as last recorded, the command exits 1."""
        said = f"unreachable, every job shown as last recorded: {problem}" if problem else ""
        return StatusSection(
            title=f"cluster {self.name} (Slurm)",
            header=HEADER,
            rows=tuple(status_row(r) for r in found),
            json_rows=tuple(self.summary(r) for r in found),
            empty=empty,
            skips=(f"cluster {self.name}: {said}",) if problem else (),
            unreachable=(self.name, problem) if problem else None,
        )

    def logs(self, runs: Runs, run_id: str, view: LogView, service: str) -> Iterator[str]:
        host = self.run_host(jobs.load(runs.home, run_id))
        if host is None:
            yield from engine_logs(runs, run_id, view, service)
            return
        with dk.on_endpoint(host.docker):
            yield from engine_logs(runs, run_id, view, service)

    def run_host(self, record: Record) -> HostEntry | None:
        node = record.slurm.node if record.slurm is not None else ""
        return self.cluster.node(node) if node in self.cluster.nodes else None

    def on_run_host(self, record: Record) -> AbstractContextManager[None]:
        host = self.run_host(record)
        return dk.on_endpoint(host.docker) if host is not None else nullcontext()

    def placed_facts(self, record: Record) -> dict[str, Any]:
        job = job_of(record)
        return {"node": job.node, "gpus": job.gpus_requested}  # the job holds what Slurm granted, used or not

    def leftovers(self, remove: bool) -> list[Leftover]:
        found = jobs.remove_leftovers(self.cluster) if remove else jobs.leftovers(self.cluster)
        kept = f"kept: Slurm did not answer ({found.why}), so its job is not known to have ended"
        return [Leftover(node, container, job, remove) for node, container, job in found.ended] + [
            Leftover(node, container, job, kept=kept) for node, container, job in found.unknown
        ]


def status_row(record: Record) -> tuple[str, ...]:
    job = job_of(record)
    return (
        record.run_id,
        f"{record.engine}/{record.profile}",
        job.job_id,
        job.state.lower() + (f": {job.reason}" if job.reason else ""),
        job.node or "-",
        ",".join(map(str, job.gpu_indexes)) or "-",
        job.exit_code or "-",
        record.base_url or "-",
    )
