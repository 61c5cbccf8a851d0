"""The step driver (wheelci.steps): every step timed and recorded, a step that does not apply recorded
as skipped, a clean stop at the first failure with the step named, outputs read from what each step
declares it writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from wheelci.errors import Finding
from wheelci.steps import Step, run_steps


@dataclass
class State:
    ran: list[str] = field(default_factory=list)
    wheels: list[Path] = field(default_factory=list)
    final: list[tuple[Path, str]] = field(default_factory=list)
    label: str | None = None


def _make(s: State) -> None:
    s.ran.append("make")
    s.wheels = [Path("/w/a-1.0-py3-none-any.whl")]


def _split(s: State) -> None:
    s.ran.append("split")
    s.final = [(s.wheels[0], "main"), (Path("/w/a_libs-1.0-py3-none-any.whl"), "companion")]


def _fail(s: State) -> None:
    s.ran.append("fail")
    raise Finding("the check says no\nsecond line")


STEPS = (
    Step("make", _make, writes=("wheels",)),
    Step("label", lambda s: s.ran.append("label"), writes=("label",), when=lambda s: False),
    Step("split", _split, reads=("wheels",), writes=("final",)),
)


def test_each_step_is_recorded_with_what_it_wrote():
    state, seen = State(), []
    run_steps(STEPS, state, seen.append)
    assert state.ran == ["make", "split"]
    assert [(o.name, o.status) for o in seen] == [("make", "ok"), ("label", "skipped"), ("split", "ok")]
    assert seen[0].outputs == ["a-1.0-py3-none-any.whl"]
    assert seen[2].outputs == ["a-1.0-py3-none-any.whl", "a_libs-1.0-py3-none-any.whl"]
    assert all(o.seconds >= 0 and o.error is None for o in seen)


def test_the_driver_stops_at_the_first_failure_and_names_it(capsys):
    state, seen = State(), []
    with pytest.raises(Finding):
        run_steps((STEPS[0], Step("check", _fail), STEPS[2]), state, seen.append)
    assert state.ran == ["make", "fail"]  # split never ran
    assert [(o.name, o.status) for o in seen] == [("make", "ok"), ("check", "failed")]
    assert seen[1].error == "the check says no\\nsecond line"  # one escaped line, as the CLI prints it


def test_an_interrupt_is_recorded_then_passes_through():
    def interrupted(s: State) -> None:
        raise KeyboardInterrupt

    seen = []
    with pytest.raises(KeyboardInterrupt):
        run_steps((Step("compile", interrupted),), State(), seen.append)
    assert [(o.name, o.status) for o in seen] == [("compile", "interrupted")]
