"""Ids people can type: a run, bench or evaluation id by any unique prefix or suffix of it (`20261207-0412`,
`a1b2c3`), or `latest`: the newest of this user's. A full id is taken as given, so a missing one is still
refused by whoever looks it up, with their own words."""

from __future__ import annotations

import re

from labctl.errors import BadInput
from labctl.host.identity import current_user
from labctl.run.records.store import Runs, is_result_id, is_run_id

LATEST = "latest"
MIN_PART = 4  # a shorter part matches too many ids to be what anyone meant
_PART = re.compile(rf"[0-9a-f-]{{{MIN_PART},24}}")  # what a part of an id can hold (its digits, its hex suffix)
KINDS = {"run": "", "bench": "b", "eval": "e"}
LISTED_BY = {"run": "labctl runs", "bench": "labctl bench list RUN_ID", "eval": "labctl eval list RUN_ID"}


def resolve(runs: Runs, text: str, kind: str) -> str:
    """The one id of `kind` (run, bench, eval) that `text` names; refused in one line when none or several do."""
    prefix = KINDS[kind]
    if (is_run_id(text) if kind == "run" else is_result_id(text, prefix)) or not text:
        return text
    ids = _ids(runs, kind)
    if text == LATEST:
        me = current_user()
        mine = [i for i, run_id in ids if _owner(runs, run_id) == me]
        if not mine:
            raise BadInput(f"`latest`: you have no {kind} in {runs.root} yet ({LISTED_BY[kind]} lists them).")
        return max(mine, key=lambda i: i.removeprefix(prefix))
    part = text.removeprefix(prefix) if kind != "run" else text
    if not _PART.fullmatch(part):
        return text  # not an id at all: the command refuses it with its own words
    found = sorted({i for i, _ in ids if i.removeprefix(prefix).startswith(part) or i.endswith(part)})
    if len(found) == 1:
        return found[0]
    if not found:
        raise BadInput(f"no {kind} id in {runs.root} begins or ends with {text!r}: {LISTED_BY[kind]} lists them.")
    shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    raise BadInput(f"{text!r} names {len(found)} {kind} ids ({shown}): give more of the one you mean.")


def resolve_bench_or_run(runs: Runs, text: str) -> str:
    """A bench id, else a run id (compare takes either: a run stands for its newest complete result)."""
    if text.startswith("b") and text != LATEST:
        return resolve(runs, text, "bench")
    try:
        return resolve(runs, text, "run")
    except BadInput as not_a_run:
        try:
            return resolve(runs, text, "bench")
        except BadInput:
            raise not_a_run from None


def _ids(runs: Runs, kind: str) -> list[tuple[str, str]]:
    """(id, the run it belongs to) of every run, bench result or evaluation in the home."""
    if kind == "run":
        return [(run_id, run_id) for run_id in runs.all_ids()]
    found = []
    for run_id in runs.all_ids():
        folder = runs.root / run_id / kind  # runs/<id>/bench, runs/<id>/eval
        for path in sorted(folder.glob(f"{KINDS[kind]}*.json")) if folder.is_dir() else []:
            if is_result_id(path.stem, KINDS[kind]):
                found.append((path.stem, run_id))
    return found


def _owner(runs: Runs, run_id: str) -> str:
    record = runs.try_load(run_id)
    return record.owner if record is not None else ""
