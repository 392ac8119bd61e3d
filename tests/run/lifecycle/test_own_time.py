"""labctl's own time in an up, by part: parts add up when entered twice, and `show` reads them."""

from __future__ import annotations

from labctl.run.lifecycle.own_time import OwnTime
from labctl.run.records.prep_view import own_time_text


def test_parts_add_up_and_are_never_negative() -> None:
    own = OwnTime()
    own.add("gpu checks", 0.25)
    own.add("gpu checks", 0.125)
    own.add("after ready", -0.5)  # a clock read in the wrong order is no negative cost
    assert own.parts == {"gpu checks": 0.375, "after ready": 0.0} and own.total() == 0.375


def test_show_names_every_part_and_the_poll_gap() -> None:
    said = own_time_text({"plan": 0.05, "render": 0.1}, 0.2)
    assert said == "0.15 s (plan 0.05, render 0.1); the engine's readiness noticed within 0.2 s"
    assert own_time_text({"plan": 0.05}, None) == "0.05 s (plan 0.05)"
