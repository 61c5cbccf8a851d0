"""Report: what was built, as `report.json` (for machines) and `report.md` (for people and CI summaries).

On GitHub Actions the Markdown is also appended to $GITHUB_STEP_SUMMARY, so each matrix job shows its
wheels, their sizes, what they link and whether verify passed.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from wheelci.errors import CiError
from wheelci.native.elf import scan_wheel
from wheelci.native.fatbin import wheel_device_code
from wheelci.util import secret, untrusted
from wheelci.util.atomic import write_text
from wheelci.util.invocation import command
from wheelci.util.owned import RECORDED_FILES, read_manifest
from wheelci.util.sizes import format_size
from wheelci.util.untrusted import code
from wheelci.wheel.metadata import get_headers
from wheelci.wheel.names import WheelName
from wheelci.wheel.zipread import WheelArchive


@dataclass
class WheelReport:
    """One output wheel."""

    name: str
    tags: str
    size: int
    needed: dict[str, list[str]] = field(default_factory=dict)  # library -> NEEDED
    excluded: list[str] = field(default_factory=list)  # NEEDED libs provided by torch/CUDA wheels
    requires: list[str] = field(default_factory=list)  # Requires-Dist
    role: str = "main"  # "main" or "companion" (a split-off library wheel)
    device_code: dict[str, list[str]] = field(default_factory=dict)  # library -> sm_80, compute_90 (its fat binaries)
    warnings: list[str] = field(default_factory=list)  # device code other than the arch list asked for


@dataclass
class BuildReport:
    plan: dict[str, Any]
    wheels: list[WheelReport] = field(default_factory=list)
    build_seconds: float = 0.0
    verify_seconds: float = 0.0
    verify: dict[str, object] = field(default_factory=dict)  # check -> outcome
    passed: bool = True
    notes: list[str] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)  # each step's outcome: name, status, seconds, outputs, error
    failed_step: str | None = None  # where the build stopped, if it did
    work_dir: str = ""  # the build tree: its logs, and what the next build reuses
    set_aside: str | None = None  # a failed build: where in -w the earlier build's wheels and report went
    # what the remote compile cache did (wheelci.compile.sccache.CacheReport as data): storage by name, compile
    # requests, device and host hits and misses; None: no remote store, or the compile was reused
    compile_cache: dict[str, Any] | None = None
    # what the project's setup.py said before the compile (wheelci.compile.probe): the variables it read, its
    # extensions, the device targets its flags name; None: not asked (another backend, or the compile was reused)
    probe: dict[str, Any] | None = None


REPORT_FILES = RECORDED_FILES  # report.json, report.md: recorded in -w's ownership manifest as the build's


def refuse_foreign_reports(out_dir: Path) -> None:
    """A build replaces report.json and report.md in -w only where -w's ownership manifest
    (wheelci.util.owned) lists them: an earlier build's. Anything else of that name (a user's file,
    however much it looks like ours, a link, a directory) is refused untouched."""
    present = [n for n in REPORT_FILES if (out_dir / n).exists() or (out_dir / n).is_symlink()]
    if not present:
        return
    owned = {n for names in read_manifest(out_dir).values() for n in names}
    foreign = [n for n in present if n not in owned or (out_dir / n).is_symlink() or not (out_dir / n).is_file()]
    if foreign:
        raise CiError(f"-w {out_dir} holds {', '.join(foreign)}, which no wheelci build wrote there; a build "
                      "writes its report under those names: move them away, or give another -w")


def wheel_report(path: Path, *, excluded: list[str] | None = None, role: str = "main") -> WheelReport:
    """Describe a wheel from its own bytes: tags from the name, NEEDED from ELF, Requires-Dist from METADATA."""

    name = WheelName.parse(path.name)
    with WheelArchive.open(path) as wa:
        requires = get_headers(wa.metadata, "Requires-Dist")
    needed = {lib.path: list(lib.needed) for lib in scan_wheel(path)}
    return WheelReport(path.name, name.tag, path.stat().st_size, needed, sorted(excluded or []), requires, role,
                       wheel_device_code(path))


# report.md is read by people (and shown as a CI job's summary, which GitHub caps at 1 MiB): what was built,
# where, each step's status, time and one line of why, how to run it again. Whatever is long (the files a
# compile read, every test's outcome) stays whole in report.json and is counted here.
SHOWN_OUTPUTS = 3  # a step's outputs named in its row; more are counted
SHOWN_CHECKS = 40  # verify rows, failures first; the rest counted
SHOWN_LIBRARIES = 8  # libraries whose NEEDED are listed, in all
SHOWN_WHEELS = 20  # rows of the wheels table
SHOWN_NOTES = 10
MAX_BYTES = 16 * 1024  # report.md's bound: past it, the rest is in report.json
CELL = 240  # characters of one table cell


def to_markdown(r: BuildReport, out_dir: Path | None = None) -> str:
    """report.md. Every value from outside (the project's name, its tests' names and output, a wheel's
    names and libraries, an error's words, paths) goes through wheelci.util.untrusted: one line,
    escaped, cut; only this function's own text is Markdown. The outcome comes first and the failed
    checks next, so the bound never cuts them for what follows."""
    plan = r.plan
    lines = [f"## {_cell(plan.get('project') or 'Wheels', 100)}: {_target(plan)}, torch {_cell(plan.get('torch'), 40)}, "
             f"engine {_cell(plan.get('engine'), 40)}", "", _outcome(r)]
    if r.set_aside:
        lines.append(f"The earlier build's wheels and report were moved to {code(str(r.set_aside) + '/')}: this "
                     "build does not vouch for them.")
    if out_dir is not None:
        lines.append(f"Wheels and this report in {code(out_dir, 1000)}" + (
            f"; build tree (logs, what the next build reuses) {code(r.work_dir, 1000)}." if r.work_dir else "."))
    reused = [s["name"] for s in r.steps if s["status"] == "reused"]
    if reused:
        lines.append(f"Reused from the last build, its inputs unchanged: {_cell(', '.join(reused))} (`--fresh` runs them).")
    if r.compile_cache:
        lines.append(cache_line(r.compile_cache))
    if r.verify:
        lines += ["", "| verify check | outcome |", "|---|---|", *_check_rows(r.verify)]
    if r.wheels:
        lines += ["", "| wheel | role | size | requires | left to torch/CUDA (declared instead) |", "|---|---|---:|---|---|"]
        lines += [f"| {code(w.name)} | {_cell(w.role, 20)} | {format_size(w.size)} | {_cell(', '.join(w.requires) or '-')} "
                  f"| {_cell(', '.join(w.excluded) or '-')} |" for w in r.wheels[:SHOWN_WHEELS]]
        if len(r.wheels) > SHOWN_WHEELS:
            lines.append(f"| {len(r.wheels) - SHOWN_WHEELS} more wheels | in report.json | | | |")
    if r.steps:
        lines += ["", "| step | status | seconds | what |", "|---|---|---:|---|"]
        lines += [f"| {_cell(s['name'], 40)} | {_cell(s['status'], 20)} | {s['seconds']:.1f} | {_step_line(s)} |"
                  for s in r.steps]
    libs = [(lib, needed) for w in r.wheels for lib, needed in w.needed.items()]
    lines += [f"\n{code(lib, 200)} NEEDs: {_cell(', '.join(needed), 1000)}" for lib, needed in libs[:SHOWN_LIBRARIES]]
    if len(libs) > SHOWN_LIBRARIES:
        lines.append(f"\n{len(libs) - SHOWN_LIBRARIES} more libraries: their NEEDED in report.json.")
    devices = [(lib, targets) for w in r.wheels for lib, targets in w.device_code.items()]
    lines += [f"\n{code(lib, 200)} device code: {_cell(' '.join(targets), 600)}" for lib, targets in devices[:SHOWN_LIBRARIES]]
    if len(devices) > SHOWN_LIBRARIES:
        lines.append(f"\n{len(devices) - SHOWN_LIBRARIES} more libraries with device code: in report.json.")
    lines += [f"\n> warning: {_cell(w, 600)}" for wheel in r.wheels for w in wheel.warnings[:SHOWN_NOTES]]
    lines += [f"\n> {_cell(n, 600)}" for n in r.notes[:SHOWN_NOTES]]
    if len(r.notes) > SHOWN_NOTES:
        lines.append(f"\n> {len(r.notes) - SHOWN_NOTES} more notes in report.json.")
    tail = ["", "To build it again: " + code(reproduce(plan, out_dir), 2000)]
    return _bounded(lines, tail)


def cache_line(c: dict[str, Any]) -> str:
    """The compile cache's line of report.md: its storage (never a credential) and its counts."""
    if not c.get("used"):
        return f"Compile cache {_cell(c.get('storage'))}: not used, {_cell(c.get('note'))}."
    dev, host = c.get("device") or {}, c.get("host") or {}
    line = (f"Compile cache {_cell(c.get('storage'))}: {c.get('requests', 0)} compile requests; device code "
            f"{dev.get('hits', 0)} hits, {dev.get('misses', 0)} misses; host code {host.get('hits', 0)} hits, "
            f"{host.get('misses', 0)} misses.")
    return line + (f" {_cell(c['note'])}." if c.get("note") else "")


def _bounded(lines: list[str], tail: list[str]) -> str:
    """The lines and the tail, cut where they would pass MAX_BYTES, saying so: whatever a report holds
    (hundreds of failed tests, long notes), report.md stays a page a person reads."""
    cut = "\n… report.md stops here (its bound); everything is in report.json."
    budget = MAX_BYTES - len(("\n".join(tail) + "\n" + cut).encode())
    kept: list[str] = []
    for line in lines:
        size = len(("\n".join([*kept, line]) + "\n").encode())
        if size > budget:
            kept.append(cut)
            break
        kept.append(line)
    return "\n".join([*kept, *tail]) + "\n"


def _target(plan: dict[str, Any]) -> str:
    return f"CUDA {plan['cuda']}" if plan.get("cuda") else "CPU"


def verify_status(r: BuildReport) -> str:
    """verify's own outcome (an upload that failed after it does not make it FAILED), with what a
    GPU-less run could not check."""
    verify = next((s["status"] for s in r.steps if s["name"] == "verify"), None)
    status = ({"ok": "passed", "reused": "passed", "failed": "FAILED"}.get(verify, "not run") if verify
              else ("passed" if r.passed else "FAILED"))
    # each torch's "gpu" check (prefixed "torch V: " when a stable wheel is verified under several)
    skipped = sorted({v.removeprefix("skipped: ") for k, v in r.verify.items()
                      if (k == GPU_CHECK or k.endswith(f": {GPU_CHECK}")) and isinstance(v, str)
                      and v.startswith("skipped: ")})
    return f"{status} ({'; '.join(skipped)})" if status == "passed" and skipped else status


GPU_CHECK = "gpu"  # verify's check of whether a CUDA wheel's kernels ran (wheelci.verify)


def _outcome(r: BuildReport) -> str:
    """One line: did it work, how long each part took (the steps' own times, so a failed build's are real)."""
    total = sum(s["seconds"] for s in r.steps)
    compile_seconds = max([r.build_seconds, *(s["seconds"] for s in r.steps if s["name"] == "compile")])
    verify_seconds = max([r.verify_seconds, *(s["seconds"] for s in r.steps if s["name"] == "verify")])
    times = f"{total:.0f} s in all: compile {compile_seconds:.0f} s, verify {verify_seconds:.0f} s"
    failed = next((s for s in r.steps if s["status"] in ("failed", "interrupted")), None)
    if failed is not None:
        return (f"**Stopped at step {failed['name']}** ({failed['status']} after {failed['seconds']:.0f} s; "
                f"{times}): {_cell(_first_line(failed.get('error')) or 'interrupted')}")
    if r.failed_step:
        return f"**Stopped at step {r.failed_step}** ({times})."
    return f"Verify **{_cell(verify_status(r), 300)}**; {times}."


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def _cell(text: object, width: int = CELL) -> str:
    """One Markdown table cell (or line) of text from outside: one line, escaped, cut at width characters."""
    return untrusted.markdown(text, width)


def _step_line(step: dict[str, Any]) -> str:
    """What a step did, in one line: its error, else its first outputs and how many more report.json lists."""
    if step.get("error"):
        return _cell(_first_line(step["error"]))
    outputs = [str(o) for o in step.get("outputs") or []]
    named = ", ".join(code(o, 100) for o in outputs[:SHOWN_OUTPUTS])
    more = len(outputs) - SHOWN_OUTPUTS
    return (named + (f" and {more:,} more (report.json)" if more > 0 else "")) or "-"


def _check_rows(checks: dict[str, object]) -> list[str]:
    """Failed checks first, then the others, SHOWN_CHECKS rows in all; the rest counted (every failure is
    in report.json, and the build's error line names them)."""
    def shown(v: object) -> str:
        return ", ".join(map(str, v)) or "-" if isinstance(v, list) else str(v)

    failed = [k for k, v in checks.items() if isinstance(v, str) and v.startswith("FAILED")]
    keep = (failed + [k for k in checks if k not in failed])[:SHOWN_CHECKS]
    rows = [f"| {_cell(k, 120)} | {_cell(shown(checks[k]))} |" for k in keep]
    if len(checks) > len(keep):
        hidden = len(failed) - len([k for k in keep if k in failed])
        rows.append(f"| {len(checks) - len(keep):,} more checks{f' ({hidden:,} failed)' if hidden else ''} "
                    "| in report.json |")
    return rows


def reproduce(plan: dict[str, Any], out_dir: Path | None = None) -> str:
    """The command that makes this build again, from the plan's own values (build variables are not
    shown: they may be secrets; [tool.wheelci] env supplies the project's)."""
    words = [command("build"), str(plan.get("project_dir") or ".")]
    words += ["--cuda", str(plan["cuda"])] if plan.get("cuda") else ["--cpu"]
    words += ["--torch", str(plan.get("torch")), "--engine", str(plan.get("engine"))]
    if plan.get("cuda") and plan.get("arch_list"):
        words += ["--arch-list", f"\"{plan['arch_list']}\""]
    if plan.get("archs") and plan["archs"] != ["x86_64"]:
        words += ["--archs", ",".join(plan["archs"])]
    if plan.get("python") and plan.get("engine") != "host":  # the host builds for the Python that runs it
        words += ["--python", ",".join(plan["python"])]
    if isinstance(plan.get("stable"), dict) and plan["stable"].get("target"):
        words += ["--stable-abi", str(plan["stable"]["target"])]
    if plan.get("variants"):
        words.append("--variant")
    return " ".join(words + ["-w", str(out_dir or "wheelhouse")])


def write(r: BuildReport, out_dir: Path) -> tuple[Path, Path]:
    """Write report.json and report.md into out_dir (atomically), and the CI job summary if any."""
    data = secret.redact_data(asdict(r))  # the workflow uploads these as artifacts: no log masking there
    json_path, md_path = (out_dir / name for name in REPORT_FILES)
    write_text(json_path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    md = secret.redact(to_markdown(r, out_dir))
    write_text(md_path, md)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as f:
            f.write(md)
    return json_path, md_path
