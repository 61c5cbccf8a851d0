"""Report: what was built, as `report.json` (for machines) and `report.md` (for people and CI summaries).

On GitHub Actions the Markdown is also appended to $GITHUB_STEP_SUMMARY, so each matrix job shows its
wheels, their sizes, what they link and whether verify passed.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from wheelci.util import secret
from wheelci.util.atomic import write_text
from wheelci.util.sizes import format_size


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


@dataclass
class BuildReport:
    plan: dict
    wheels: list[WheelReport] = field(default_factory=list)
    build_seconds: float = 0.0
    verify_seconds: float = 0.0
    verify: dict = field(default_factory=dict)  # check -> outcome
    passed: bool = True
    notes: list[str] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)  # each step's outcome: name, status, seconds, outputs, error
    failed_step: str | None = None  # where the build stopped, if it did
    work_dir: str = ""  # the build tree: its logs, and what the next build reuses
    set_aside: str | None = None  # a failed build: where in -w the earlier build's wheels and report went


REPORT_FILES = ("report.json", "report.md")


def vouched(out_dir: Path) -> list[str]:
    """The wheels the report in out_dir lists: an earlier build's, which it wrote there."""
    try:
        data = json.loads((out_dir / REPORT_FILES[0]).read_text()) if not (out_dir / REPORT_FILES[0]).is_symlink() else {}
    except (OSError, ValueError):
        return []
    wheels = data.get("wheels") if isinstance(data, dict) else None
    return [w["name"] for w in wheels if isinstance(w, dict) and isinstance(w.get("name"), str)] if isinstance(wheels, list) else []


def wheel_report(path: Path, *, excluded: list[str] | None = None, role: str = "main") -> WheelReport:
    """Describe a wheel from its own bytes: tags from the name, NEEDED from ELF, Requires-Dist from METADATA."""
    from wheelci.native.elf import scan_wheel
    from wheelci.wheel.metadata import get_headers
    from wheelci.wheel.zipread import WheelArchive
    from wheelci.wheel.names import WheelName

    name = WheelName.parse(path.name)
    with WheelArchive.open(path) as wa:
        requires = get_headers(wa.metadata, "Requires-Dist")
    needed = {lib.path: list(lib.needed) for lib in scan_wheel(path)}
    return WheelReport(path.name, name.tag, path.stat().st_size, needed, sorted(excluded or []), requires, role)


def to_markdown(r: BuildReport) -> str:
    plan = r.plan
    verify = next((s["status"] for s in r.steps if s["name"] == "verify"), None)
    # the verify step's own outcome: an upload that failed after it does not make verify FAILED
    status = ({"ok": "passed", "reused": "passed", "failed": "FAILED"}.get(verify, "not run") if verify
              else ("passed" if r.passed else "FAILED"))
    reused = [s["name"] for s in r.steps if s["status"] == "reused"]
    lines = [
        f"## Wheels: CUDA {plan.get('cuda') or 'none (CPU)'}, torch {plan.get('torch')}, engine {plan.get('engine')}",
        "",
        f"Build {r.build_seconds:.0f} s; verify {r.verify_seconds:.0f} s ({status}).",
        *([f"Reused from the last build, its inputs unchanged: {', '.join(reused)} (`--fresh` runs them)."]
          if reused else []),
        "",
        "| wheel | role | size | excluded (declared instead) | requires |",
        "|---|---|---:|---|---|",
    ]
    for w in r.wheels:
        lines.append(f"| `{w.name}` | {w.role} | {format_size(w.size)} | {', '.join(w.excluded) or '-'} "
                     f"| {', '.join(w.requires) or '-'} |")
    for w in r.wheels:
        for lib, needed in w.needed.items():
            lines += ["", f"`{lib}` NEEDs: {', '.join(needed)}"]
    if r.steps:
        lines += ["", "| step | status | seconds | outputs |", "|---|---|---:|---|"]
        lines += [f"| {s['name']} | {s['status']} | {s['seconds']:.1f} | "
                  f"{', '.join(f'`{o}`' for o in s['outputs']) or (s.get('error') or '-')} |" for s in r.steps]
    if r.failed_step:
        lines += ["", f"Stopped at step **{r.failed_step}**."]
    if r.set_aside:
        lines += ["", f"The earlier build's wheels and report were moved to `{r.set_aside}/`: this build does not "
                      "vouch for them."]
    if r.verify:
        lines += ["", "| verify check | outcome |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in r.verify.items()]
    lines += [f"\n> {n}" for n in r.notes]
    return "\n".join(lines) + "\n"


def write(r: BuildReport, out_dir: Path) -> tuple[Path, Path]:
    """Write report.json and report.md into out_dir (atomically), and the CI job summary if any."""
    data = secret.redact_data(asdict(r))  # the workflow uploads these as artifacts: no log masking there
    json_path, md_path = (out_dir / name for name in REPORT_FILES)
    write_text(json_path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    md = secret.redact(to_markdown(r))
    write_text(md_path, md)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as f:
            f.write(md)
    return json_path, md_path
