"""The step driver (wheelci.steps): every step timed and recorded, a step that does not apply recorded
as skipped, a clean stop at the first failure with the step named, outputs read from what each step
declares it writes."""

from __future__ import annotations

import json
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


# ---------------------------------------------------------------- reuse: wheelci.reuse.Records


@dataclass
class Files:
    """A two-step pipeline over real files: copy the source, then append a suffix read from `suffix`."""

    work: Path
    source: Path
    suffix: str = "!"
    copied: Path | None = None
    out: Path | None = None
    ran: list[str] = field(default_factory=list)
    notes: dict = field(default_factory=dict)


def _copy(s: Files) -> None:
    s.ran.append("copy")
    s.copied = s.work / "copied.txt"
    s.copied.write_text(s.source.read_text())


def _append(s: Files) -> None:
    s.ran.append("append")
    s.out = s.work / "out.txt"
    s.out.write_text(s.copied.read_text() + s.suffix)
    s.notes["append"] = "done"


FILE_STEPS = (Step("copy", _copy, reads=("source",), writes=("copied",), reuse=True),
              Step("append", _append, reads=("copied", "suffix"), writes=("out",), reuse=True))


def _rerun(work: Path, source: Path, suffix: str = "!") -> tuple[Files, list]:
    from wheelci.reuse import Records

    state, seen = Files(work, source, suffix), []
    memory = Records(work, snapshot=lambda s: {"notes": dict(s.notes)},
                     restore=lambda s, parts: s.notes.update(parts.get("notes", {})))
    run_steps(FILE_STEPS, state, seen.append, memory)
    return state, [(o.name, o.status) for o in seen]


def test_a_step_is_reused_only_while_its_inputs_and_recorded_outputs_are_unchanged(tmp_path):
    source = tmp_path / "source.txt"
    source.write_text("a")
    work = tmp_path / "work"
    work.mkdir()
    state, seen = _rerun(work, source)
    assert seen == [("copy", "ok"), ("append", "ok")] and state.out.read_text() == "a!"

    state, seen = _rerun(work, source)  # nothing changed: nothing runs, the outputs and report parts come back
    assert seen == [("copy", "reused"), ("append", "reused")] and state.ran == []
    assert state.out == work / "out.txt" and state.notes == {"append": "done"}

    state, seen = _rerun(work, source, suffix="?")  # a changed value: only the step that reads it
    assert seen == [("copy", "reused"), ("append", "ok")] and state.out.read_text() == "a?"

    source.write_text("b")  # a changed file: both
    state, seen = _rerun(work, source, suffix="?")
    assert seen == [("copy", "ok"), ("append", "ok")] and state.out.read_text() == "b?"

    (work / "out.txt").write_text("tampered")  # a recorded output that changed since: its step runs again
    state, seen = _rerun(work, source, suffix="?")
    assert seen == [("copy", "reused"), ("append", "ok")] and state.out.read_text() == "b?"

    (work / "copied.txt").unlink()  # one that is gone: its step runs, and so does what reads it
    state, seen = _rerun(work, source, suffix="?")
    assert seen == [("copy", "ok"), ("append", "reused")]  # the same bytes again: what reads them is reused
    assert state.out.read_text() == "b?"


@pytest.mark.parametrize("record", ["", "{", "[]", '{"copy": 3}', '{"copy": {"inputs": 1, "writes": []}}',
                                    '{"copy": {"inputs": "x", "writes": {"copied": {"file": 3}}}}'])
def test_a_corrupt_record_runs_the_steps(tmp_path, record):
    from wheelci.reuse import RECORD

    source = tmp_path / "source.txt"
    source.write_text("a")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / RECORD).write_text(record)
    state, seen = _rerun(tmp_path / "work", source)
    assert seen == [("copy", "ok"), ("append", "ok")] and state.out.read_text() == "a!"


def test_a_record_whose_report_parts_do_not_read_back_runs_the_step(tmp_path):
    """A record edited (or cut off) where the step's report parts are: the step runs, no traceback."""
    from wheelci.reuse import RECORD

    source = tmp_path / "source.txt"
    source.write_text("a")
    work = tmp_path / "work"
    work.mkdir()
    _rerun(work, source)
    record = json.loads((work / RECORD).read_text())
    record["append"]["adds"] = {"notes": 3}
    (work / RECORD).write_text(json.dumps(record))
    state, seen = _rerun(work, source)
    assert seen == [("copy", "reused"), ("append", "ok")] and state.out.read_text() == "a!"


def test_a_reused_compile_reports_what_its_compile_cache_did():
    """The fifth review: a reused compile step dropped the compile cache's counts from report.json and
    report.md. The counts are one of the parts a step adds, recorded and restored with the step."""
    from dataclasses import asdict
    from types import SimpleNamespace

    from wheelci.build import report_parts, restore_report_parts
    from wheelci.report import BuildReport, to_markdown

    counts = {"storage": "redis redis://127.0.0.1:6379", "used": True, "note": None, "requests": 9,
              "device": {"hits": 7, "misses": 0}, "host": {"hits": 2, "misses": 0}, "errors": 0}
    first = SimpleNamespace(report=BuildReport(plan={"project": "p"}, compile_cache=counts))
    recorded = json.loads(json.dumps(report_parts(first)))  # as the record keeps it
    again = SimpleNamespace(report=BuildReport(plan={"project": "p"}))
    restore_report_parts(again, recorded)
    assert asdict(again.report)["compile_cache"] == counts
    assert "9 compile requests; device code 7 hits" in to_markdown(again.report)
    with pytest.raises(ValueError):
        restore_report_parts(again, {"compile_cache": "7 hits"})
