"""A code verdict the answer cannot forge: the answer runs alone in its container, the tests in
another, calling it over a pipe. Each hostile answer here fails with its own named reason; the ones
marked `forged` passed every test on the one-process sandbox (exit code 0 meant "passed")."""

from __future__ import annotations

import pytest

from labctl.host.sandbox.launch import run_code

pytestmark = [pytest.mark.docker, pytest.mark.own_containers]

TESTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0"
READS_THE_TESTS = """import re
def add(a, b):
    for line in open('/case/tests.py'):
        if f'add({a}, {b})' in line:
            return int(re.search(r'== (-?\\d+)', line).group(1))
"""

# (id, answer, the reason it fails[, the tests]): every one of these is refused, whatever it printed or returned.
HOSTILE = [
    (
        "forged-os-exit",
        "import os\nprint('all tests passed')\nos._exit(0)\n",
        "the answer exited (code 0) before the tests ran",
    ),
    (
        "forged-os-exit-in-call",
        "import os\ndef add(a, b):\n    os._exit(0)\n",
        "the answer exited (code 0) during call 1 (add)",
    ),
    (
        "sys-exit-while-loading",
        "import sys\nsys.exit(0)\n",
        "the answer exited (0) while loading, before the tests ran",
    ),
    (
        "raise-systemexit-in-call",
        "def add(a, b):\n    raise SystemExit(0)\n",
        "the answer exited (0) during call 1 (add)",
    ),
    (
        "forged-fork-then-exit",
        "import os, time\nif os.fork():\n    os._exit(0)\ntime.sleep(30)\n",
        "the answer forked while loading, before the tests ran",
    ),
    ("hangs-while-loading", "while True:\n    pass\n", "the answer was still loading after 2 s"),
    (
        "hangs-in-a-call",
        "import time\ndef add(a, b):\n    time.sleep(60)\n",
        "the answer did not answer call 1 (add) within the case's 2 s",
    ),
    (
        "floods-its-output",
        "import sys\ndef add(a, b):\n    while True:\n        sys.stdout.write('x' * 65536)\n",
        "the answer flooded its output (more than 1024 KiB)",
    ),
    (
        "kills-its-process-group",
        "import os, signal\ndef add(a, b):\n    os.killpg(0, signal.SIGKILL)\n",
        "the answer was killed (code 137: signal 9, as the memory limit does) during call 1 (add)",
    ),
    (
        "fork-bomb",
        "import os\nfor _ in range(100):\n    try:\n        os.fork()\n    except OSError:\n        pass\ndef add(a, b):\n    return a + b\n",
        "the answer forked while loading, before the tests ran",  # at its first fork, whatever the load
    ),
    (
        "forks-while-loading",
        "import os\nos.fork()\ndef add(a, b):\n    return a + b\n",
        "the answer forked while loading, before the tests ran: an answer runs alone",
    ),
    (
        "forks-in-a-call",
        "import os\ndef add(a, b):\n    os.fork()\n    return a + b\n",
        "the answer forked during call 1 (add): an answer runs alone",
    ),
    (
        "prints-a-forged-marker-and-reply",
        "print('all tests passed')\ndef add(a, b):\n    print('{\"id\": 1, \"value\": 5}')\n    return 0\n",
        "test line 1 failed: assert add(2, 3) == 5",
    ),
    (
        "closes-the-pipe",
        "import os\nfor fd in range(3, 20):\n    try:\n        os.close(fd)\n    except OSError:\n        pass\ndef add(a, b):\n    return a + b\n",
        "the answer exited (code 1) before the tests ran",
    ),
    (
        "writes-garbage-into-the-pipe",
        "import os\ndef add(a, b):\n    for fd in range(3, 10):\n        try:\n            os.write(fd, b'garbage\\n')\n        except OSError:\n            pass\n    return a + b\n",
        "the pipe carried something that is not the protocol during call 1 (add): not JSON",
    ),
    (
        "writes-a-forged-reply-into-the-pipe",
        'import os\ndef add(a, b):\n    for fd in range(3, 10):\n        try:\n            os.write(fd, b\'{"id": 2, "value": 0}\\n\')\n        except OSError:\n            pass\n    return a + b\n',
        "the answer's reply to call 1 (add) is not the protocol: it names call 2",
    ),
    (
        "forged-equal-to-everything",
        "class Any:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Any()\n",
        "call 1 (add) returned a value of type Any, which is not data that can cross the pipe",
    ),
    (
        "forged-int-subclass",
        "class Int(int):\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Int(0)\n",
        "call 1 (add) returned a value of type Int, which is not data that can cross the pipe",
    ),
    ("returns-a-generator", "def add(a, b):\n    yield a + b\n", "call 1 (add) returned a value of type generator"),
    (
        "forged-monkeypatched-builtins",
        "import builtins, sys\nbuiltins.exec = lambda *a, **k: None\nbuiltins.compile = lambda *a, **k: None\nsys.exit = lambda *a: None\ndef add(a, b):\n    return 0\n",
        "test line 1 failed: assert add(2, 3) == 5",
    ),
    ("forged-reads-the-tests", READS_THE_TESTS, "test line 1 raised FileNotFoundError"),
    (
        "forged-shadows-a-builtin",
        "def len(x):\n    return 3\ndef add(a, b):\n    return []\n",
        "test line 1 failed: assert len(add(1, 2)) == 3",
        "assert len(add(1, 2)) == 3",
    ),
    ("defines-nothing", "# nothing to see\n", "the answer does not define add (test line 1)"),
    ("does-not-parse", "def add(a, b) return a + b\n", "the code does not run: SyntaxError: expected ':'"),
    (
        "returns-3-MiB",
        "def add(a, b):\n    return 'x' * (3 * 1024 * 1024)\n",
        "the pipe carried something that is not the protocol during call 1 (add): a message longer than 1024 KiB",
    ),
    (
        "eats-memory",
        "x = bytearray(1 << 30)\ndef add(a, b):\n    return a + b\n",
        "the answer was killed (code 137: signal 9, as the memory limit does)",
    ),
]


@pytest.mark.parametrize(
    "answer, reason, tests", [pytest.param(h[1], h[2], h[3] if len(h) > 3 else TESTS, id=h[0]) for h in HOSTILE]
)
def test_a_hostile_answer_fails_with_a_named_reason(answer: str, reason: str, tests: str) -> None:
    # Filling 1 GiB up to the memory limit takes over 2 s on a loaded 2-core machine; the kill, not the time
    # limit, is what that case checks.
    result = run_code(answer, tests, 20 if answer.startswith("x = bytearray") else 2)
    assert not result.passed and result.reason.startswith(reason), result.reason


@pytest.mark.parametrize(
    "answer, tests",
    [
        pytest.param("def add(a, b):\n    return a + b\n", TESTS, id="plain"),
        pytest.param(
            "print('thinking out loud')\ndef add(a, b):\n    print(a, b)\n    return a + b\n", TESTS, id="prints"
        ),
        pytest.param(
            "import os\nos.close(1)\nos.close(2)\ndef add(a, b):\n    return a + b\n", TESTS, id="closes-stdout"
        ),
        pytest.param(
            "def split(xs):\n    return (xs[:1], set(xs), {1: b'x', (1, 2): None}, float('inf'))\n",
            "assert split([3, 3]) == ([3], {3}, {1: b'x', (1, 2): None}, float('inf'))\nassert type(split([1])[0]) is list",
            id="data-keeps-its-types",
        ),
        pytest.param(
            "def half(n):\n    if n % 2:\n        raise ValueError('odd')\n    return n // 2\n",
            "assert half(4) == 2\nr = [half(n) for n in (2, 6)]\nassert r == [1, 3]\nassert isinstance(half.__call__, object)",
            id="several-calls-per-line",
        ),
    ],
)
def test_an_honest_answer_still_passes(answer: str, tests: str) -> None:
    result = run_code(answer, tests, 5)
    assert result.passed and result.reason == "all tests passed", result.reason


@pytest.mark.parametrize(
    "answer, tests, reason",
    [
        ("def add(a, b):\n    return a - b\n", TESTS, "test line 1 failed: assert add(2, 3) == 5"),
        ("def t(m):\n    return list(zip(*m))\n", "assert t([[1, 2]]) == [[1], [2]]", "test line 1 failed"),
        ("def add(a, b):\n    raise ValueError('no')\n", TESTS, "test line 1 raised ValueError: no"),
        (
            "def add(a, b):\n    return a + b\n",
            "assert add(lambda: 1, 2)",
            "the test passes a value of type function to add",
        ),
    ],
)
def test_a_wrong_answer_still_fails(answer: str, tests: str, reason: str) -> None:
    result = run_code(answer, tests, 5)
    assert not result.passed and result.reason.startswith(reason), result.reason
