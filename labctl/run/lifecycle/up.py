"""labctl up and down: preflight -> image -> exclusive start -> readiness -> record.

Data flows one way: profile -> rendered compose file -> Docker -> readiness -> record. The record
is written at every step, atomically, so that a killed labctl leaves a record that says how far it got.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from labctl.catalog.hosts_file import LOCAL_HOST
from labctl.catalog.http_contracts import HttpContract
from labctl.catalog.image import digests_of
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile, with_overrides
from labctl.compose.canonical import canonical_compose, sha256_text
from labctl.compose.contract_check import Verdict
from labctl.compose.declared_settings import effective_settings
from labctl.compose.labels import RunLabels
from labctl.compose.options import render_options
from labctl.compose.render import ProxySetup, build_key, render_compose
from labctl.errors import BadInput, Conflict, LabctlError, describe_error
from labctl.host.docker import daemon as dk
from labctl.host.engine.bound import bound_problem, listeners
from labctl.host.engine.probes import check_openai_api, port_in_use, status_without_key, wait_until_ready
from labctl.host.engine.reported_settings import read_report
from labctl.host.files.atomic import write_atomically
from labctl.host.gpus.inventory import Gpu
from labctl.host.gpus.lock import host_lock
from labctl.host.homes import note_home
from labctl.host.identity import current_user, host_name, process_token
from labctl.host.remote.forward import Forward
from labctl.host.remote.key_volume import volume_name as key_volume_name
from labctl.run.images.copy import copy_tag, copy_to_host
from labctl.run.images.harness import build_for_up, dockerfile_to_build
from labctl.run.images.pull import pull_for_up
from labctl.run.lifecycle.down import project_name, save_logs, stop_run
from labctl.run.lifecycle.live import base_url
from labctl.run.lifecycle.log_cause import first_error_line
from labctl.run.lifecycle.own_time import OwnTime
from labctl.run.lifecycle.preflight import (
    Holder,
    check_cuda,
    check_device_request,
    check_gpu_host,
    check_memory_fit,
    current_holders,
    foreign_gpu_processes,
    gpu_conflicts,
    port_conflicts,
    refuse,
)
from labctl.run.lifecycle.up_plan import UpRequest, plan_up
from labctl.run.models.fetch import Fetched, fetch_before_start, snapshot_acquisition
from labctl.run.records.acquired import Acquisition, Action, Kind, Ledger
from labctl.run.records.prep import PrepPart
from labctl.run.records.record import (
    ComposeInfo,
    ContainerInfo,
    Endpoint,
    EngineBuild,
    EngineSetup,
    GpuSet,
    ImageInfo,
    Record,
    ResidentInfo,
    Timings,
    new_record,
    now,
)
from labctl.run.records.store import ENDING, RUN_FILE_MODE, RunEnded, Runs, new_run_id
from labctl.run.remote import check_port_free, close_run_forward, open_run_forward, release_claims, take_claims
from labctl.run.resident import remote_watch, watch
from labctl.run.resident.host_keys import put_keys, remove_keys
from labctl.run.resident.keys import ENGINE_KEY, KeyAccess, KeyStore, fingerprint, generate_keys
from labctl.run.resident.lockdown import PROXY_SERVICE, check_locked, engine_port_exposure, plan_proxy
from labctl.run.resident.resident_plan import RESTART_POLICY, ResidentPlan, image_user_ids

Say = Callable[[str], None]


class Starter:
    """One `labctl up`: owns the record while it starts the engine, and cleans up on any failure."""

    def __init__(self, lab: Lab, runs: Runs, request: UpRequest, say: Say, progress: Say | None) -> None:
        self.lab, self.runs, self.request, self.say = lab, runs, request, say
        self.live = progress is not None  # a person is watching a terminal: show the engine's latest log line
        self.progress: Say = progress or (lambda _text: None)
        self.run_id = new_run_id()
        self.project = project_name(self.run_id)
        self.record: Record | None = None
        self.plan: ResidentPlan | None = None
        self.owner = ""
        self.started_anything = False
        self.claimed = False  # a remote host: this run's claims exist on the host
        self.key_volume = ""  # a remote host: the volume there holding this run's keys
        self.forward: Forward | None = None
        self.t0 = time.monotonic()
        self.own = OwnTime()  # labctl's own time by part, recorded beside the engine's
        self.fetched: Fetched | None = None
        self.prep: dict[str, PrepPart] = {}
        self.http_contract: HttpContract | None = None
        self.proxied = False
        self.proxy: ProxySetup | None = None

    # --- the pipeline ------------------------------------------------------------------------------
    def run(self) -> Record:
        request = self.request
        with self.own.part("plan"):
            checked = plan_up(
                self.lab, request
            )  # every refusal of the request itself, before anything is asked or written
        profile, self.contract, self.plan, self.owner = (
            checked.profile,
            checked.contract,
            checked.resident,
            checked.owner,
        )
        self.http_contract, self.proxied = checked.http_contract, checked.proxied
        for warning in self.contract.warnings:
            self.say(f"warning: {warning}")
        if profile.legacy:
            self.say(f"warning: profile {profile.engine.name}/{profile.name} is legacy: {profile.legacy}")
        # The checks are independent Docker CLI calls: asking them at once saves their start-up costs.
        with self.own.part("docker checks"), ThreadPoolExecutor(max_workers=4) as pool:
            docker_ok = pool.submit(dk.check_docker)
            compose_ok = pool.submit(dk.check_compose)
            local_image = pool.submit(dk.image_facts, profile.image_text)
            daemon = pool.submit(dk.daemon_facts)
            docker_ok.result()
            compose_ok.result()
            self.daemon = daemon.result()
        with self.own.part("gpu checks"):
            gpu_host = check_gpu_host(profile)
        found_gpus = gpu_host.found
        self.simulated = gpu_host.simulated or request.host.simulated
        if self.simulated:
            self.say(f"simulated GPU host {request.host.name}: this run is labelled harness-check, never real-gpu")
        with self.own.part("gpu checks"):
            self.driver_cuda = check_cuda(profile)
        self.fetched = self.fetch(profile)
        with self.own.part("fit check"):
            self.memory_fit = check_memory_fit(
                profile, found_gpus, request.cache_dir, request.allow_unfit, request.host.unified_memory_gib
            )
        image, image_pull = self.ensure_image(profile, local_image.result())
        self.prep["image_pull"] = image_pull
        with self.own.part("gpu checks"):
            check_device_request(profile, gpu_host, image.runnable)
        try:
            # A remote host's claims live on the host (host/gpus/claims.py); the lock file covers this machine only.
            with contextlib.nullcontext() if request.host.is_remote else host_lock():
                with self.own.part("claims"):
                    profile, replaced = self.claim(profile, found_gpus, image.runnable)
                with self.own.part("render"):
                    compose_file = self.prepare(profile, image, image_pull, found_gpus, replaced)
                build = self.build_if_needed(profile, compose_file)
                if build is not None:
                    self.prep["engine_build"] = PrepPart(
                        seconds=build.seconds, cached=build.skipped, detail=build.engine_dir
                    )
                start = time.monotonic()
                self.started_anything = True
                services = ["serve", PROXY_SERVICE] if self.proxy else ["serve"]
                with dk.docker_errors("docker compose up"):
                    dk.compose_client(compose_file, self.project).compose.up(
                        services=services, detach=True, quiet=True, dependencies=False
                    )
                started = time.monotonic()
            if self.plan:
                with self.own.part("watcher"):
                    self.start_watcher(profile)
            self.update(
                status="starting",
                timings=dataclasses.replace(
                    self.current.timings, engine_build_s=build, compose_up_s=round(started - start, 3)
                ),
                prep=dict(self.prep),
            )
            return self.wait_ready(profile, start, started)
        except KeyboardInterrupt as exc:
            self.fail("aborted", f"interrupted ({exc.args[0] if exc.args else 'Ctrl-C'}) during up")
            raise
        except LabctlError as exc:
            if self.record or self.started_anything or self.claimed:
                self.fail("failed", str(exc))
            raise
        except Exception as exc:  # a disk error, a bug: nothing may stay up unaccounted
            self.fail("failed", f"{type(exc).__name__}: {exc}")
            raise

    def fetch(self, profile: Profile) -> Fetched | None:
        request = self.request
        remote = request.host if request.host.is_remote else None
        live = self.progress if self.live else None
        fetched = fetch_before_start(profile, request.cache_dir, request.fetch, remote, self.say, live)
        if fetched is not None:
            self.prep["model_fetch"] = fetched.part()
            self.note(snapshot_acquisition(fetched, request.host, self.run_id))
        return fetched

    def note(self, entry: Acquisition) -> None:
        """What this run put on the host (or found there), for `gc`; a failed note only means gc offers less."""
        ledger = Ledger(self.runs.home)
        try:
            ledger.append(entry)
        except PermissionError:
            raise  # a home this user cannot write: one clear line, before anything started
        except OSError as exc:
            self.say(f"warning: could not note {entry.action} {entry.name or entry.image_id} in {ledger.path}: {exc}")

    def note_image(
        self, action: Action, image_id: str, references: tuple[str, ...], host: str = "", daemon: str = ""
    ) -> None:
        self.note(
            Acquisition(
                Kind.IMAGE,
                action,
                host=host or self.request.host.name,
                docker_host_id=daemon or self.daemon.id,
                image_id=image_id,
                references=references,
                name=references[0] if references else image_id,
                run_id=self.run_id,
            )
        )

    def ensure_image(self, profile: Profile, facts: dk.ImageFacts | None) -> tuple[ImageInfo, PrepPart]:
        reference = profile.image_text
        if self.request.copy_image:
            arrived = copy_to_host(profile, self.request.host, self.say, self.progress if self.live else None)
            info = ImageInfo(
                reference=reference,
                pinned=True,
                digest=profile.image.digest,
                image_id=arrived.image_id,
                user=arrived.user,
                pulled=False,
                copied=arrived.verified,
            )
            action = Action.FOUND if arrived.part.cached else Action.COPIED
            self.note_image(action, arrived.image_id, (copy_tag(profile.image), profile.image.by_digest))
            if arrived.pulled_here:  # the pull on this controller, before the copy
                self.note_image(
                    Action.PULLED, arrived.image_id, (profile.image.by_digest,), LOCAL_HOST.name, arrived.pulled_here
                )
            return info, arrived.part
        built: str | None = None
        dockerfile = dockerfile_to_build(self.lab, profile, self.request.host) if facts is None else None
        # An image already here under another name is not this run's, even when this run adds a name to it.
        before = dk.image_ids() if facts is None else set()
        action = Action.FOUND if facts is not None else Action.PULLED if dockerfile is None else Action.BUILT
        if facts is not None:
            part = PrepPart(seconds=0.0, bytes=0, cached=True, detail="already present on the Docker host")
        elif dockerfile is not None:
            harness, part = build_for_up(dockerfile, reference, self.say, self.progress if self.live else None)
            built = part.detail
            facts = dk.image_facts(reference)
            if facts is None or facts.image_id != harness.image_id:
                raise LabctlError(f"built {reference} but Docker does not list that image under it")
        elif profile.engine.image_build and not profile.image.pinned:
            raise BadInput(
                f"{reference} is not on this Docker host, and no registry has it: it is built here. Run "
                f"`{profile.engine.image_build}` first. Nothing was started."
            )
        else:
            try:
                part = pull_for_up(
                    profile,
                    self.request.host.is_remote,
                    bool(self.request.reproduced_from),
                    self.say,
                    self.progress if self.live else None,
                )
            except LabctlError as exc:
                if not self.request.host.is_remote or not profile.image.pinned:
                    raise
                raise LabctlError(
                    f"{exc} If {self.request.host.name} cannot reach that registry, copy the image from this "
                    "controller over Docker's transport: add --copy-image."
                ) from None
            facts = dk.image_facts(reference)
            if facts is None:
                raise LabctlError(f"pulled {reference} but Docker does not list it")
        self.note_image(Action.FOUND if facts.image_id in before else action, facts.image_id, (reference,))
        image = profile.image
        found = digests_of(facts.repo_digests, image.repository)
        if image.pinned and image.digest not in found:
            raise LabctlError(f"{reference} resolved to {facts.repo_digests}, not the pinned digest {image.digest}")
        return ImageInfo(
            reference=reference,
            pinned=image.pinned,
            digest=image.digest or (found[0] if found else None),
            repo_digests=tuple(facts.repo_digests),
            image_id=facts.image_id,
            user=facts.user,
            pulled=not part.cached and built is None,
            built=built,
        ), part

    def claim(self, profile: Profile, found_gpus: list[Any], image: str) -> tuple[Profile, list[str]]:
        """Under the host lock: place a `count:` profile on free GPUs, then refuse (or replace) whoever
        holds our GPUs or port. Returns the profile with concrete GPU ids."""
        holders = current_holders()
        profile = place_on_free_gpus(profile, found_gpus, holders)
        conflicts = gpu_conflicts(profile, holders)
        port_holders = port_conflicts(profile, holders)
        foreign = foreign_gpu_processes(profile, found_gpus)
        replaced: list[str] = []
        if (conflicts or port_holders) and self.request.replace:
            me = current_user()  # who acts, from the OS; --owner only names the new run's owner
            guarded = [h for h in conflicts + port_holders if h.resident and h.owner != me]
            if guarded:
                raise Conflict(
                    f"--replace will not stop {guarded[0].describe()}: it is {guarded[0].owner}'s resident "
                    f'deployment. Stop it first: labctl down {guarded[0].run_id} --force --reason "why".'
                )
            for holder in {h.run_id: h for h in conflicts + port_holders}.values():
                self.say(f"replacing {holder.describe()}")
                for problem in stop_run(
                    self.runs,
                    holder.run_id,
                    by=self.owner,
                    reason=f"replaced by run {self.run_id}",
                    replaced_by=self.run_id,
                ):
                    self.say(f"warning: {problem}")
                replaced.append(holder.run_id)
            conflicts, port_holders = [], []
        if conflicts:
            raise refuse(f"GPU {','.join(profile.gpu_ids)}", conflicts)
        if foreign:
            raise LabctlError(
                f"GPU memory is held by processes labctl did not start: {'; '.join(foreign)}. "
                "Stop them first; labctl cannot replace them."
            )
        if port_holders:
            raise refuse(f"port {profile.port}", port_holders)
        if self.request.host.is_remote:
            self.claimed = True
            notes = take_claims(
                self.request.host,
                self.run_id,
                self.owner,
                self.runs.home,
                list(profile.gpu_ids) if profile.engine.needs_gpu else [],
                found_gpus,
                profile.port,
                profile.bind_address,
                image,
                self.request.timeout,
            )
            for note in notes:
                self.say(note)
            unchecked = check_port_free(self.request.host, profile.bind_address, profile.port)
            if unchecked:
                self.say(f"warning: {unchecked}")
            return profile, replaced
        if port_in_use(profile.bind_address, profile.port):
            raise Conflict(
                f"port {profile.port} on {profile.bind_address} is in use by a process labctl did "
                f"not start. Pick another with --port N (or stop it: ss -ltnp 'sport = :{profile.port}')."
            )
        return profile, replaced

    def prepare(
        self, profile: Profile, image: ImageInfo, image_pull: PrepPart, found_gpus: list[Gpu], replaced: list[str]
    ) -> Path:
        request = self.request
        owner = self.owner
        created = now()
        labels = RunLabels(
            home=str(self.runs.home),
            controller=host_name(),
            run_id=self.run_id,
            owner=owner,
            created_at=created,
            port=str(profile.port),
            host=profile.bind_address,
            resident=self.plan is not None,
        )
        if self.proxied:
            self.proxy = plan_proxy(profile.engine.readiness.probe, request.host)
        access = self.store_keys(image) if self.plan and self.plan.keys else None
        if self.proxy is not None:
            engine_key = generate_keys(1)
            store = KeyStore(request.home or self.runs.home)
            store.write(self.run_id, engine_key, image_user_ids(image.user), name=ENGINE_KEY)
            if self.key_volume:  # a remote host: the engine and the proxy read it from the volume there
                put_keys(self.run_id, engine_key, image, file=ENGINE_KEY)
        options = render_options(
            profile,
            request.cache_dir,
            allow_unsupported=request.allow_unsupported,
            labels=labels.run_labels(),
            restart=RESTART_POLICY if self.plan else "no",
            secrets_dir=str(access.folder) if access and not self.key_volume else None,
            secrets_volume=self.key_volume or None,
            key_group=access.group if access and not self.key_volume else None,
            environment_label="harness-check" if self.simulated else None,
            image=image.image_id if image.copied else None,
            proxy=self.proxy,
        )
        if not request.host.is_remote:  # Docker refuses a bind mount whose source folder does not exist
            for folder in (options.cache_dir, options.engine_store):
                if folder and profile.engine.model_cache:
                    Path(folder).mkdir(parents=True, exist_ok=True)
        text = render_compose(self.lab, profile, options)
        compose_file = self.runs.make_dir(self.run_id) / "compose.yaml"
        note_home(self.runs.home)
        write_atomically(compose_file, text, RUN_FILE_MODE)
        engine = profile.engine
        reach = base_url(profile.bind_address, profile.port)
        if request.host.is_remote:
            self.forward = open_run_forward(self.runs, self.run_id, request.host, profile.bind_address, profile.port)
            reach = self.forward.base
        self.record = new_record(
            self.run_id,
            engine.name,
            profile.name,
            profile.served_model_name,
            Endpoint(host=profile.bind_address, port=profile.port, base_url=reach + "/v1"),
            owner,
            "harness-check" if self.simulated else engine.environment_label,
            created_at=created,
            record_path=str(self.runs.record_path(self.run_id)),
            up_process=process_token(),
            profile_sha256=profile.sha256,
            resolved_profile=profile.spec,
            allow_unsupported=bool(request.allow_unsupported and profile.support_problem),
            support_problem=profile.support_problem,
            probe=engine.readiness.probe,
            probe_timeout_s=engine.readiness.probe_timeout_s,
            metrics_path=engine.metrics_path,
            image=image,
            compose=ComposeInfo(
                file="compose.yaml",
                project=self.project,
                command=tuple(dk.compose_argv(compose_file, self.project, "up", "--detach", "--no-deps", "serve")),
                render_options={"cache_dir": options.cache_dir, "engine_store": options.engine_store},
            ),
            env_names=profile.env_names,
            gpus=GpuSet(
                ids=tuple(profile.gpu_ids),
                count=profile.gpu_count,
                devices=tuple(g for g in found_gpus if g.index in profile.gpu_ids or not profile.gpu_ids),
                note=("simulated GPU" if self.simulated else None) if engine.needs_gpu else "no GPU",
                simulated=self.simulated,
            ),
            accelerator=accelerator_of(profile, self.simulated),
            host_entry=request.host.name,
            docker_endpoint=request.host.docker,
            docker_host_id=self.daemon.id,
            docker_host_name=self.daemon.name,
            forward=self.forward,
            timings=Timings(image_pull_s=None if image_pull.cached else image_pull.seconds),
            prep=dict(self.prep),
            replaced=tuple(replaced),
            reproduced_from=request.reproduced_from,
            run_labels=labels,
            resident=self.resident_block(profile),
            engine_setup=dataclasses.replace(
                engine_setup(profile, self.contract, request.allow_uncontracted),
                driver_cuda=self.driver_cuda,
                memory_fit=self.memory_fit,
                model_commit=self.fetched.commit if self.fetched else None,
            ),
            setup={
                "compose_sha256": sha256_text(
                    canonical_compose(
                        self.lab, engine, profile.name, profile.spec, image.digest, bool(request.allow_unsupported)
                    )
                )
            },
        )
        self.runs.save(self.record)
        self.runs.event(
            self.run_id, "up", engine=engine.name, profile=profile.name, owner=owner, resident=bool(self.plan)
        )
        for warning in self.plan.warnings if self.plan else []:
            self.say(f"warning: {warning}")
            self.runs.event(self.run_id, "warning", text=warning)
        return compose_file

    def store_keys(self, image: ImageInfo) -> KeyAccess:
        """The controller's copy (share and rotate-key read it); on a remote host, also the engine's copy in a
        volume there, written through Docker's transport (the controller's folder is not on that host)."""
        assert self.plan is not None
        store = KeyStore(self.request.home or self.runs.home)
        if not self.request.host.is_remote:
            return store.write(self.run_id, self.plan.keys, image_user_ids(image.user))
        access = store.write(self.run_id, self.plan.keys)
        self.key_volume = key_volume_name(self.run_id)  # named before it exists: a failure removes what was made
        put_keys(self.run_id, self.plan.keys, image)
        return access

    def resident_block(self, profile: Profile) -> ResidentInfo | None:
        if not self.plan:
            return None
        engine_port_open, engine_port_open_model = engine_port_exposure(self.http_contract if self.proxy else None)
        return ResidentInfo(
            restart_policy=RESTART_POLICY,
            bind=profile.bind_address,
            auth=profile.engine.auth.kind,
            keys=len(self.plan.keys),
            key_fingerprints=tuple(fingerprint(k) for k in self.plan.keys),
            allow_no_auth=self.plan.allow_no_auth,
            warnings=tuple(self.plan.warnings),
            auth_volume=self.key_volume,
            watch_interval_s=profile.engine.readiness.watch_interval_s,
            hung_after_failures=profile.engine.readiness.hung_after_failures,
            proxy=self.proxy.image if self.proxy else "",
            proxy_engine_port=self.proxy.engine_port if self.proxy else None,
            engine_port_open=engine_port_open,
            engine_port_open_model=engine_port_open_model,
        )

    def start_watcher(self, profile: Profile) -> None:
        """The resident engine's restart watcher, from the moment its container exists (see run/watch.py)."""
        serve = next((c for c in dk.labctl_containers(run_id=self.run_id) if dk.service_of(c) == "serve"), None)
        if serve is None:
            raise LabctlError("docker compose up returned but no serve container exists")
        readiness, host = profile.engine.readiness, self.request.host
        if host.is_remote:
            name, note = remote_watch.start(self.runs, self.current, readiness, str(serve.name), host, self.daemon.id)
        else:
            name, note = watch.start(self.runs, self.current, readiness, str(serve.name))
        if note:
            self.say(f"warning: {note}")
            self.runs.event(self.run_id, "warning", text=note)
        assert self.current.resident is not None
        self.update(resident=dataclasses.replace(self.current.resident, watcher=name, watcher_note=note))

    def build_if_needed(self, profile: Profile, compose_file: Path) -> EngineBuild | None:
        if profile.build is None:
            return None
        options = self.current.compose.render_options if self.current.compose else {}
        engine_dir = Path(options["engine_store"] or "") / build_key(profile)
        if (engine_dir / "config.json").is_file():
            self.say(f"engine already built: {engine_dir}")
            return EngineBuild(skipped=True, engine_dir=str(engine_dir), seconds=0.0)
        self.say(f"building the TensorRT-LLM engine into {engine_dir} (runs once per image, revision and limits)")
        self.started_anything = True
        start = time.monotonic()
        key_dir, existed = engine_dir.parent, engine_dir.parent.exists()
        try:
            with dk.docker_errors("the engine build"):
                dk.compose_client(compose_file, self.project).compose.up(
                    services=["build"], abort_on_container_exit=True, quiet=True
                )
        finally:  # a failed build's folder is this run's too
            if not existed and key_dir.is_dir():
                self.note(
                    Acquisition(
                        Kind.ENGINE,
                        Action.BUILT,
                        host=self.request.host.name,
                        folder=str(key_dir),
                        name=key_dir.name,
                        run_id=self.run_id,
                    )
                )
        return EngineBuild(skipped=False, engine_dir=str(engine_dir), seconds=round(time.monotonic() - start, 3))

    def wait_ready(self, profile: Profile, start: float, started: float) -> Record:
        engine = profile.engine
        containers = dk.labctl_containers(run_id=self.run_id)
        serve = next((c for c in containers if dk.service_of(c) == "serve"), None)
        if serve is None:
            raise LabctlError("docker compose up returned but no serve container exists")
        base = self.current.base_url.removesuffix("/v1")
        proxy = next((c for c in containers if dk.service_of(c) == PROXY_SERVICE), None) if self.proxy else None

        def watch() -> None:
            if proxy is not None:
                fronting = dk.container_state(proxy)
                if not fronting["running"] or fronting["restarts"]:
                    raise LabctlError(
                        f"labctl's authenticating proxy {fronting['status']} (exit code {fronting['exit_code']}) "
                        f"before the engine was ready. Its last log lines:\n{dk.logs_tail(proxy, 5).rstrip()}"
                    )
            state = dk.container_state(serve)
            if not state["running"] or state["restarts"]:
                ended = self.runs.try_load(self.run_id)
                if ended is not None and ended.status in ENDING:  # someone took it down: say who, not "it died"
                    raise RunEnded(ended)
                raise LabctlError(
                    f"the engine container {state['status']} (exit code {state['exit_code']}, restarts {state['restarts']}) "
                    f"before it was ready{_failure_logs(serve)}"
                )

        last_log_at, last_log = 0.0, ""

        def progress(probe_state: str) -> None:
            nonlocal last_log_at, last_log
            if not self.live:
                return
            now_ = time.monotonic()
            if now_ - last_log_at > 1.0:
                last_log_at, last_log = now_, dk.last_log_line(serve)
            self.progress(f"{now_ - started:5.1f}s  {probe_state}  | {last_log[:100]}")

        try:
            readiness = wait_until_ready(
                base,
                engine.readiness.probe,
                self.request.timeout,
                watch,
                progress,
                probe_timeout=engine.readiness.probe_timeout_s,
            )
        except LabctlError as exc:
            if "Last log lines" not in str(exc):
                raise LabctlError(f"{exc}{_failure_logs(serve)}") from None
            raise
        self.progress("")
        key = self.plan.keys[0] if self.plan and self.plan.keys else None
        api = check_openai_api(base, profile.served_model_name, key, engine.version_path)
        if key is not None:
            refused = status_without_key(base)
            if refused != 401:
                raise LabctlError(
                    f"the engine answered GET /v1/models without a key (HTTP {refused}): its keys did not take, so "
                    "it would serve everyone. It was taken down; see its logs (labctl logs RUN_ID)."
                )
            lock = check_locked(base, self.http_contract, f"run {self.run_id}")
            assert self.current.resident is not None
            self.update(
                resident=dataclasses.replace(
                    self.current.resident,
                    open_paths=lock.open_paths if lock else None,
                    open_model_paths=lock.open_model_paths if lock else (),
                )
            )
        check_bound_address(serve, profile, self.proxy)
        rules = engine.setting_rules
        reported = read_report(base, rules.route, key) if rules is not None and rules.route else None
        assert readiness.ready is not None
        container_start = started
        # Everything after the engine's first completion is labctl's: its checks (the record written below adds ms).
        self.own.add("after ready", time.monotonic() - api.completion_at)
        timings = dataclasses.replace(
            self.current.timings,
            port_open_s=round((readiness.port_open or readiness.ready) - container_start, 3),
            ready_s=round(readiness.ready - container_start, 3),
            first_completion_s=round(api.completion_at - container_start, 3),
            cold_start_s=round(api.completion_at - container_start, 3),
            total_s=round(time.monotonic() - self.t0, 3),
            labctl_s=dict(self.own.parts),
            poll_gap_s=readiness.poll_gap,
        )
        port_open = readiness.port_open or readiness.ready
        self.prep["engine_load"] = PrepPart(seconds=round(port_open - start, 3), detail="container start -> port open")
        self.prep["warmup"] = PrepPart(seconds=round(readiness.ready - port_open, 3), detail="port open -> ready")
        self.prep["first_completion"] = PrepPart(
            seconds=round(api.completion_at - readiness.ready, 3), detail="ready -> first chat completion answered"
        )
        self.update(
            status="running",
            ready_at=now(),
            timings=timings,
            prep=dict(self.prep),
            container=ContainerInfo(
                name=serve.name,
                id=serve.id,
                command_line=tuple(dk.command_line(serve)),
                env_names=profile.env_names,
            ),
            engine_version=api.version,
            models=api.models,
            settings=effective_settings(profile, reported),
        )
        self.runs.event(self.run_id, "ready", cold_start_s=timings.cold_start_s)
        return self.current

    # --- record keeping ------------------------------------------------------------------------
    @property
    def current(self) -> Record:
        assert self.record is not None, "the record is born in prepare()"
        return self.record

    def update(self, **changes: Any) -> None:
        self.record = self.runs.advance(self.run_id, **changes)

    def fail(self, status: str, reason: str) -> None:
        """Take down what was started and say why; a second Ctrl-C or SIGTERM cannot cut this short, and no
        step's failure (a full disk, a vanished container) skips the next: a failed `up` leaves nothing up."""
        blocked = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        problems: list[str] = []

        def step(what: str, action: Callable[[], object]) -> None:
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - every step runs whatever the one before met
                problems.append(f"{what}: {describe_error(exc)}")

        try:
            if self.started_anything:
                problems.extend(p for p in [save_logs(self.runs, self.run_id)] if p)
                if self.plan:
                    step("removing the restart watcher", lambda: watch.remove(self.run_id))
                step("taking the engine down", lambda: dk.compose_down(self.project))
            if self.key_volume:
                step("removing the key volume", lambda: remove_keys(self.run_id))
            if self.plan and self.request.host.is_remote:
                step("removing the watcher volume", lambda: remote_watch.remove_volume(self.run_id))
            if self.claimed:
                step("releasing the claims", lambda: release_claims(self.run_id))
            step("closing the forward", lambda: close_run_forward(self.forward))
            step("recording the failure", lambda: self.record_failure(status, reason))
            step("removing the keys", lambda: KeyStore(self.request.home or self.runs.home).remove(self.run_id))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        for problem in problems:
            self.say(f"warning: while taking run {self.run_id} down after its failure, {problem}")

    def record_failure(self, status: str, reason: str) -> None:
        on_disk = self.runs.try_load(self.run_id) if self.record else None
        if on_disk is not None and on_disk.status not in ENDING:  # never overwrite who stopped it, and why
            self.update(status=status, reason=reason, stopped_at=now())
            self.runs.event(self.run_id, status, reason=reason.splitlines()[0])


def check_bound_address(serve: Any, profile: Profile, proxy: ProxySetup | None = None) -> None:
    """The record's endpoint must be what the engine binds: an engine listening on more than the recorded
    address (0.0.0.0 where the record says 127.0.0.1) serves people the record says it does not. Behind
    labctl's proxy (which shares the host's network) the engine must bind loopback alone."""
    expected = profile.bind_address if profile.network == "host" else "0.0.0.0"  # ports: Docker publishes it
    if proxy is not None:
        expected, port = "127.0.0.1", proxy.engine_port
    else:
        port = profile.port
    problem = bound_problem(listeners(serve), expected, port)
    if problem:
        raise LabctlError(
            f"{problem}, but this run's record says {expected}:{port}: the engine does not bind what "
            f"labctl rendered (engine {profile.engine.name}, its engine.yaml or its image). It was taken down."
        )


def place_on_free_gpus(profile: Profile, found: list[Gpu], holders: list[Holder]) -> Profile:
    """A `count: N` profile gets N concrete GPUs that no labctl run holds (lowest indexes first), so that
    exclusivity, labels and the record all name real devices."""
    if profile.gpu_ids or not profile.gpu_count or not profile.engine.needs_gpu:
        return profile
    held = {gpu for holder in holders for gpu in holder.gpus}
    free = [g.index for g in found if g.index not in held]
    if len(free) < profile.gpu_count:
        busy = "; ".join(h.describe() for h in holders if h.gpus)
        raise Conflict(
            f"{profile.engine.name}/{profile.name} needs {profile.gpu_count} free GPU(s); free now: "
            f"{', '.join(free) or 'none'} (held by {busy or 'nobody labctl knows'}). Stop a run (labctl down RUN_ID)."
        )
    return with_overrides(profile, gpus=free[: profile.gpu_count])


def engine_setup(profile: Profile, contract: Verdict, allow_uncontracted: bool) -> EngineSetup:
    """What the record says about the engine's own terms: its version and contract, its memory option and
    what that option means, the thinking mode, and whether the model revision could be pinned."""
    memory = profile.engine.memory_setting
    return EngineSetup(
        version=profile.engine_version,
        contract=contract.contract,
        allow_uncontracted=bool(
            allow_uncontracted and contract.contract is None and profile.engine.contract is not None
        ),
        memory_setting=memory[0] if memory else None,
        memory_value=profile.gpu_memory_utilization,
        memory_meaning=memory[1] if memory else None,
        thinking=profile.model.thinking,
        revision_pinned=profile.engine.pins_revision,
    )


def up(lab: Lab, runs: Runs, request: UpRequest, say: Say, progress: Say | None = None) -> Record:
    return Starter(lab, runs, request, say, progress).run()


def accelerator_of(profile: Profile, simulated: bool) -> str:
    """cpu: a real engine on CPU; simulated: a simulated GPU host, or the GPU-free harness engine."""
    if profile.cpu is not None:
        return "cpu"
    return "simulated" if simulated or not profile.engine.needs_gpu else "gpu"


def _failure_logs(serve: Any) -> str:
    """`: <the log's first error line>. Last log lines: …` from one read of the engine's last 2,000 lines."""
    log = dk.logs_tail(serve, 2000)
    found = first_error_line(log)
    last = "\n".join(log.rstrip().splitlines()[-20:])
    return (f": {found}" if found else "") + f". Last log lines:\n{last}"
