"""Profile values are data, never template code: whatever a value holds lands verbatim in the
container command and never adds or changes a key of the compose file."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from helpers.support import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labctl.catalog.lab import Lab
from labctl.catalog.profiles import Profile, check_profile_spec, load_profile
from labctl.catalog.sourcefile import SourceFile
from labctl.compose.render import RenderOptions, render_compose

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers

LAB = Lab(REPO)
BASE = load_profile(LAB, "vllm", "qwen3-32b")
NASTY = [
    '"',
    "'",
    "\n",
    "${HF_TOKEN}",
    "$HOME",
    "{{ x }}",
    "{% if %}",
    "#",
    ": ",
    "- ",
    "[",
    "]",
    "{",
    "}",
    "&a",
    "*a",
    "!!python/object",
    "|",
    ">",
    "\\",
    "\t",
    "%",
    "@",
    "`",
    "null",
    "~",
    "\u2028",
    "é",
]
texts = st.lists(st.one_of(st.sampled_from(NASTY), st.text(min_size=1, max_size=8)), min_size=1, max_size=6).map(
    "".join
)
# Compose and YAML cannot carry some code points at all (NUL, lone surrogates); the profile loader refuses
# them too because YAML cannot hold them.
printable = texts.filter(
    lambda s: all(c >= " " or c in "\n\t" for c in s) and not any(0xD800 <= ord(c) <= 0xDFFF for c in s)
)


def _profile_with(**changes: object) -> Profile:
    """The shipped profile with values set after loading: the loader refuses most of these (a model id that is
    no Hub name, extra_args that reach the model positional); rendering must keep them data all the same."""
    data = yaml.safe_load(BASE.source.path.read_text())  # type: ignore[union-attr]
    src = SourceFile(path=Path("p.yaml"), data=data)
    spec = check_profile_spec(BASE.engine, src, data)
    for key, value in changes.items():
        target = spec
        *parents, last = key.split(".")
        for part in parents:
            target = target[part]
        target[last] = value
    return Profile(engine=BASE.engine, name="p", spec=spec, source=src)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arg=printable, model_id=printable, served=printable.filter(lambda s: s.strip() != ""))
def test_values_land_verbatim(arg: str, model_id: str, served: str) -> None:
    if not model_id.strip():
        model_id = "m" + model_id
    profile = _profile_with(extra_args=[arg, "--after"], **{"model.id": model_id, "served_model_name": served})
    text = render_compose(LAB, profile, RenderOptions(cache_dir="/c"))
    doc = yaml.safe_load(text)
    assert list(doc) == ["services"]
    service = doc["services"]["serve"]
    reference = yaml.safe_load(render_compose(LAB, BASE, RenderOptions(cache_dir="/c")))["services"]["serve"]
    assert list(service) == list(reference)
    assert set(service["labels"]) == set(reference["labels"])
    unescape = lambda s: s.replace("$$", "$")  # noqa: E731 - Compose turns $$ back into $
    command = [unescape(w) for w in service["command"]]
    assert command[-2:] == [arg, "--after"]
    assert command[0] == model_id  # vllm serve MODEL: the model is positional
    assert command[command.index("--served-model-name") + 1] == served
    assert unescape(service["labels"]["labctl.model"]) == model_id


@pytest.mark.compose
def test_compose_does_not_interpolate(tmp_path: Path, compose_binary: None) -> None:
    value = 'a ${LABCTL_PROBE} $HOME "q" {{ x }} # c: d'
    profile = _profile_with(extra_args=[value])
    path = tmp_path / "c.yaml"
    path.write_text(render_compose(LAB, profile, RenderOptions(cache_dir="/c")))
    proc = subprocess.run(
        ["docker", "compose", "-f", str(path), "config", "--format", "json"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", "LABCTL_PROBE": "SECRET", "HOME": "/root"},
    )
    assert proc.returncode == 0, proc.stderr
    import json

    command = json.loads(proc.stdout)["services"]["serve"]["command"]
    # `config` prints the model re-escaped ($ as $$); the container gets the value itself (see the
    # docker test that echoes it from a real container).
    assert command[-1].replace("$$", "$") == value
    assert "SECRET" not in proc.stdout
