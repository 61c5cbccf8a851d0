"""A build is a list of steps, and one driver runs them.

A step is data: its name, the fields of the shared state it reads and writes, and the function that
does the work. The driver gives every step the same treatment: a log group and its time, an outcome
(status, seconds, what it wrote) handed to the caller's record, and a clean stop at the first failure
with the step named. Adding a step (an SBOM, a signature) is one entry in a list.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Protocol, Sequence, TypeVar

from wheelci.util import log
from wheelci.util.interrupt import Terminated
from wheelci.util.output import shown

S = TypeVar("S")

STATUSES = ("ok", "reused", "skipped", "failed", "interrupted")


def _always(state: Any) -> bool:
    return True


@dataclass(frozen=True)
class Step(Generic[S]):
    name: str
    run: Callable[[S], None]
    reads: tuple[str, ...] = ()  # fields of the state it uses
    writes: tuple[str, ...] = ()  # fields it fills in: its outputs, as the report lists them
    when: Callable[[S], bool] = _always  # a step that does not apply to this build is recorded as skipped
    title: Callable[[S], str] | None = None  # the log group's title (default: the name)
    reuse: bool = False  # unchanged reads give back the recorded writes (wheelci.reuse); reads must be complete
    quiet: bool = False  # bookkeeping: no log group and no timing line (a refusal after it stays one line)


class Memory(Protocol):
    """Where step outcomes are remembered between runs (wheelci.reuse.Records)."""

    def inputs(self, step: Step[Any], state: Any) -> str: ...
    def recall(self, step: Step[Any], state: Any, inputs: str) -> str | None: ...
    def snapshot(self, state: Any) -> dict[str, Any]: ...
    def keep(self, step: Step[Any], state: Any, inputs: str, before: dict[str, Any]) -> None: ...


@dataclass
class Outcome:
    name: str
    status: str
    seconds: float = 0.0
    outputs: list[str] = field(default_factory=list)
    error: str | None = None


def _shown(value: Any) -> Any:
    """A written field as the report shows it: files by name, lists item by item."""
    if isinstance(value, Path):
        return value.name
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], Path):
        return value[0].name  # (wheel, role)
    if isinstance(value, (list, tuple)):
        return [_shown(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    # an object without a text of its own would show its repr (every field, paths as PosixPath(...)): its kind
    return str(value) if getattr(type(value), "__str__") is not object.__str__ else type(value).__name__


def outputs(step: Step[Any], state: Any) -> list[str]:
    shown: list[str] = []
    for name in step.writes:
        value = _shown(getattr(state, name))
        shown += [str(v) for v in value] if isinstance(value, list) else ([] if value is None else [str(value)])
    return shown


def run_steps(steps: Sequence[Step[S]], state: S, record: Callable[[Outcome], None],
              memory: Memory | None = None) -> None:
    """Run each step in order; record its outcome; re-raise the first failure after recording it.

    With a memory, a reusable step whose inputs are unchanged is not run: its recorded outputs are
    taken, said on a line and marked "reused"."""
    for step in steps:
        if not step.when(state):
            record(Outcome(step.name, "skipped"))
            continue
        start = time.monotonic()
        inputs = memory.inputs(step, state) if memory is not None and step.reuse else None
        if memory is not None and inputs is not None and (made := memory.recall(step, state, inputs)):
            log.info(f"{step.name}: reused (its inputs are unchanged since {made}; --fresh runs it)")
            record(Outcome(step.name, "reused", round(time.monotonic() - start, 1), outputs(step, state)))
            continue
        before = memory.snapshot(state) if memory is not None and inputs is not None else {}
        try:
            with contextlib.nullcontext() if step.quiet else log.step(step.title(state) if step.title else step.name):
                step.run(state)
        except KeyboardInterrupt as e:
            why = f"stopped by {e.args[0]}" if isinstance(e, Terminated) and e.args else "stopped by Ctrl-C (SIGINT)"
            record(Outcome(step.name, "interrupted", round(time.monotonic() - start, 1), error=why))
            raise
        except Exception as e:
            record(Outcome(step.name, "failed", round(time.monotonic() - start, 1), error=shown(e)))
            raise
        if memory is not None and inputs is not None:
            memory.keep(step, state, inputs, before)
        record(Outcome(step.name, "ok", round(time.monotonic() - start, 1), outputs(step, state)))
