"""Runs INSIDE an engine's cached venv (never imported by labctl).

Two jobs, both with the engine's own parser code:
  dump  ENGINE            print the command's argparse parser as a contract dict (JSON)
  run   ENGINE CASES.json run the engine's own CLI parse path on each argv and print verdicts (JSON)

ENGINE is vllm or sglang. Only the environment around the parser is stubbed: vLLM's
platform detection is pinned to its CPU platform, the serve dispatch is replaced so nothing
starts, and SGLang's parse stops before ServerArgs is built (its __post_init__ sizes GPUs).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import re
import sys
import traceback

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("captured")
        self.parser = parser


class _Dispatched(Exception):
    """The engine accepted the command line and was about to start serving."""


class _LogTap(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _tap_logs() -> _LogTap:
    tap = _LogTap()
    logging.getLogger().addHandler(tap)
    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in ("vllm", "sglang"):
            lg = logging.getLogger(name)
            lg.addHandler(tap)
    return tap


# ---------------------------------------------------------------- vLLM


def _vllm_prepare() -> None:
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()  # no GPU here; only the parser is wanted
    import vllm.entrypoints.cli.serve as serve_mod

    def _no_serve(args: argparse.Namespace) -> None:
        raise _Dispatched()

    serve_mod.ServeSubcommand.cmd = staticmethod(_no_serve)


def _vllm_main(argv: list[str]) -> None:
    """vLLM's own `main()`, exactly as the `vllm` console script runs it."""
    from vllm.entrypoints.cli.main import main

    old = sys.argv
    sys.argv = ["vllm", *argv]
    try:
        main()
    finally:
        sys.argv = old


def _vllm_serve_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """Let vLLM's main() build its parser tree, and stop it at parse_args."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser as cls
    except ImportError:  # before 0.12 it lived in vllm.utils
        from vllm.utils import FlexibleArgumentParser as cls
    orig = cls.parse_args

    def grab(self, *a, **k):  # type: ignore[no-untyped-def]
        raise _Captured(self)

    cls.parse_args = grab
    try:
        _vllm_main(["serve"])
    except _Captured as c:
        top = c.parser
    finally:
        cls.parse_args = orig
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return top, sub.choices["serve"]


def _vllm_model_rule(top: argparse.ArgumentParser) -> dict[str, str]:
    """What vLLM's own parse_args does with `vllm serve --model M` (reject or warn)."""
    tap = _tap_logs()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            top.parse_args(["serve", "--model", "some/model"])
    except ValueError as e:
        return {"rejected": str(e)}
    except SystemExit:
        return {}
    for msg in tap.messages:
        if "--model" in msg:
            return {"deprecated": msg}
    return {}


# ---------------------------------------------------------------- SGLang


def _sglang_parser() -> argparse.ArgumentParser:
    """Let SGLang's prepare_server_args build its parser, and stop it at parse_args."""
    import sglang.srt.server_args as sa

    orig = argparse.ArgumentParser.parse_args

    def grab(self, *a, **k):  # type: ignore[no-untyped-def]
        raise _Captured(self)

    argparse.ArgumentParser.parse_args = grab  # type: ignore[method-assign]
    try:
        if hasattr(sa, "prepare_server_args"):
            sa.prepare_server_args([])
        else:  # older lines: the parser prepare_server_args used to build
            p = argparse.ArgumentParser()
            sa.ServerArgs.add_cli_args(p)
            raise _Captured(p)
    except _Captured as c:
        return c.parser
    finally:
        argparse.ArgumentParser.parse_args = orig  # type: ignore[method-assign]
    raise RuntimeError("SGLang's prepare_server_args never parsed")


def _sglang_parse(argv: list[str]) -> None:
    """SGLang's prepare_server_args up to and including parse_args (ServerArgs not built)."""
    import sglang.srt.server_args as sa

    sa.ServerArgs.from_cli_args = classmethod(lambda cls, args: (_ for _ in ()).throw(_Dispatched()))  # type: ignore[assignment]
    sa.prepare_server_args(argv)


# ---------------------------------------------------------------- walking argparse


def _type_name(fn: object) -> str:
    """Classify a type callable by what it does, not by its name."""
    if fn is None:
        return "str"

    def ok(v: str) -> object:
        try:
            return fn(v)  # type: ignore[operator]
        except Exception:
            return _FAIL

    bad = ok("not-a-number")
    if bad is not _FAIL:
        return "str"
    seven, half, onek, js = ok("7"), ok("0.5"), ok("1k"), ok('{"a": 1}')
    if isinstance(js, (dict, list)):
        return "json"
    if type(seven) is int and half is _FAIL and onek is _FAIL:
        return "int"
    if isinstance(half, float) and onek is _FAIL:
        return "float"
    return "str"


_FAIL = object()


def _warn_text(action: argparse.Action, opt: str, parser: argparse.ArgumentParser) -> dict[str, str]:
    """Run one deprecated-looking custom action the way argparse would and record what it says."""
    ns = argparse.Namespace()
    out = io.StringIO()
    tap = _tap_logs()
    values: object = None if action.nargs == 0 else "x"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            action(parser, ns, values, opt)
    except SystemExit:
        text = out.getvalue().strip().splitlines()
        return {"rejected": (getattr(action, "error_message", None) or (text[-1] if text else "refused"))}
    except Exception as e:  # a value it could not take: still deprecated, text unknown
        return {"deprecated": f"'{opt}' is deprecated ({type(e).__name__} while probing)"}
    msgs = [m for m in out.getvalue().splitlines() + tap.messages if "deprecat" in m.lower()]
    if msgs:  # a warnings.warn line carries "path:line: UserWarning: " in front
        text = re.sub(r"\x1b\[[0-9;]*m", "", msgs[0].strip())  # SGLang colours its warning
        return {"deprecated": re.sub(r"^.*?:\d+: \w*Warning: ", "", text)}
    return {}


def _choices(choices: object) -> list[str]:
    """The engine's choices as strings; a set (unordered: hash order changes per run) is sorted."""
    items = [str(c) for c in choices]  # type: ignore[attr-defined]
    return sorted(items) if isinstance(choices, (set, frozenset)) else items


def walk(parser: argparse.ArgumentParser, deprecated_actions: set | None = None) -> dict:
    positionals, options, rejected = [], [], []
    dep = deprecated_actions or set()
    for a in parser._actions:
        if isinstance(a, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            continue
        if not a.option_strings:
            positionals.append({"name": a.dest, "required": bool(a.required)})
            continue
        takes = a.nargs != 0
        nargs = a.nargs if takes and a.nargs is not None else None
        spec = {
            "names": list(a.option_strings),
            "takes_value": bool(takes),
            "nargs": nargs,
            "type": _type_name(a.type) if takes else "bool",
            "choices": _choices(a.choices) if takes and a.choices is not None else None,
            "deprecated": None,
        }
        if a in dep:
            spec["deprecated"] = f"argument '{a.dest}' is deprecated"  # vLLM's own wording
        elif "Deprecat" in type(a).__name__:
            verdict = _warn_text(a, a.option_strings[0], parser)
            if "rejected" in verdict:
                for name in a.option_strings:
                    rejected.append({"option": name, "reason": verdict["rejected"]})
            elif "deprecated" in verdict:
                spec["deprecated"] = verdict["deprecated"]
        options.append(spec)
    exclusive = [
        [g_a.option_strings[0] for g_a in g._group_actions if g_a.option_strings]
        for g in parser._mutually_exclusive_groups
    ]
    return {
        "parser": "argparse",
        "allow_abbrev": bool(parser.allow_abbrev),
        "positionals": positionals,
        "options": options,
        "exclusive": [g for g in exclusive if len(g) > 1],
        "requires": {},
        "rejected": rejected,
    }


def dump(engine: str) -> dict:
    logging.disable(logging.NOTSET)
    if engine == "vllm":
        _vllm_prepare()
        top, serve = _vllm_serve_parser()
        cmd = walk(serve, getattr(serve, "_deprecated", set()))
        rule = _vllm_model_rule(top)
        if "rejected" in rule:
            cmd["rejected"].append({"option": "--model", "reason": rule["rejected"]})
        elif "deprecated" in rule:
            for o in cmd["options"]:
                if "--model" in o["names"]:
                    o["deprecated"] = rule["deprecated"]
        return {"serve": {"argv0": ["vllm", "serve"], **cmd}}
    if engine == "sglang":
        p = _sglang_parser()
        return {"launch_server": {"argv0": ["python3", "-m", "sglang.launch_server"], **walk(p)}}
    raise SystemExit(f"unknown engine {engine}")


def run(engine: str, cases: list[dict]) -> list[dict]:
    if engine == "vllm":
        _vllm_prepare()
    out = []
    for case in cases:
        argv = list(case["argv"])
        err = io.StringIO()
        tap = _tap_logs()
        verdict, detail = "error", ""
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                if engine == "vllm":
                    _vllm_main(["serve", *argv])
                else:
                    _sglang_parse(argv)
            verdict, detail = "error", "returned without reaching the server start"
        except _Dispatched:
            verdict = "ok"
            detail = "; ".join(m for m in tap.messages if "deprecat" in m.lower() or "--model" in m)[:300]
        except SystemExit as e:
            lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
            verdict, detail = ("ok" if e.code in (0, None) else "error"), (lines[-1] if lines else f"exit {e.code}")
        except Exception as e:  # the engine's own validation refused it
            verdict, detail = "error", f"{type(e).__name__}: {e}"[:300]
        finally:
            logging.getLogger().removeHandler(tap)
        out.append({"label": case.get("label", ""), "verdict": verdict, "detail": detail})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("job", choices=["dump", "run"])
    ap.add_argument("engine", choices=["vllm", "sglang"])
    ap.add_argument("cases", nargs="?")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    try:
        if a.job == "dump":
            result: object = dump(a.engine)
        else:
            with open(a.cases) as f:
                result = run(a.engine, json.load(f))
    except Exception:
        traceback.print_exc()
        raise SystemExit(1) from None
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
