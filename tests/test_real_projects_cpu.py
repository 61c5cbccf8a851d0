"""Real third-party projects built for CPU from their sdists (`ci.build SDIST --cpu --engine host`), each
wheel then installed with torch from pip into a fresh venv and its ops run there
(`real_projects/check_*.py`, which the build's own verify runs too).

- torchsort 0.1.10: its setup.py adds a CUDAExtension whenever an `nvcc` runs, and a CPU torch's
  cpp_extension refuses that ("CUDA_HOME environment variable is not set"): a --cpu build must not let
  it see the host's CUDA toolkit. The wheel holds only `isotonic_cpu`.
- torch-cluster 1.6.3, the newest sdist on the index: nine libraries, built with `use_ninja=False`,
  so one file at a time and without ccache: the suite's longest compile (many minutes on 2 cores).

Why the wheel cache: paying that compile on every run would add minutes to the suite for a result
that changes only when an input does. A verified wheel is kept in the tool's cache directory, keyed by
what decides its bytes: the sdist's sha256, the build arguments, the tool's plan for them (torch, the
manylinux policy, the build tools' pins, the CUDA toolkit a CPU build hides), the C++ compiler, Python,
glibc, and a digest of the tool's files that go into the wheel (the force-included glibc header, the
preload module). The tool's code is not in the key: it changes many times a day in ways that leave the
wheel as it was (logging, steps, error hints), and a digest of it made nearly every run a rebuild; after
a change to how wheels are compiled or repaired, delete `real-project-wheels` in the cache directory. An entry is a directory
written beside its final name and renamed into place, so a crash leaves no entry a later run could take
for whole; it is used only when its recorded key and the wheel's sha256 match, and is otherwise removed
and rebuilt. Installing, importing and running the ops in a fresh venv happen on every run.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import shutil
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

import pytest

import wheelci
from wheelci.util.cache import cache_dir
from wheelci.util.digest import sha256_file
from tests._wheels import run_stage
from tests.test_real_projects import CHECKS, build, sdist
from tests import _proc

BUILD_ARGS = ("--cpu",)  # build() adds --engine host
# what of the plan decides a host CPU build's bytes (its notes, paths and container settings do not)
PLAN_FIELDS = ("torch", "cuda", "arch_list", "nvcc_flags", "stable", "backend", "manylinux", "python",
               "tool_constraints", "cpu_view")
# the tool's files whose contents go into the binaries or the wheel: the header force-included into every
# compile, the preload module injected into the package, the build tools' pins
INTO_THE_WHEEL = ("resources/glibc_compat", "resources/preload_runtime.py", "resources/build-constraints.txt")
ENTRY = "entry.json"


def tool_digest() -> str:
    """sha256 over the paths and contents of the tool's files that go into the wheel."""
    root = Path(wheelci.__file__).resolve().parent
    h = hashlib.sha256()
    for part in INTO_THE_WHEEL:
        files = [root / part] if (root / part).is_file() else sorted((root / part).rglob("*"))
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def compiler_version() -> str:
    """The first line of `--version` of the C++ compiler setuptools and cpp_extension use."""
    cxx = shlex.split(os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++")[0]
    r = _proc.run([cxx, "--version"], capture_output=True, text=True, check=True)
    return r.stdout.splitlines()[0].strip()


def build_key(source: Path, args: tuple[str, ...] = BUILD_ARGS) -> dict:
    """Everything the built wheel depends on; the tool's dry-run plan names torch, the manylinux policy,
    the build tools' pins and what a CPU build hides of the CUDA toolkit."""
    r = run_stage("ci.build", source, *args, "--engine", "host", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    plan = json.loads(r.stdout)
    plan = {k: plan.get(k) for k in PLAN_FIELDS}
    return {"sdist_sha256": sha256_file(source), "args": " ".join(args), "plan": plan,
            "compiler": compiler_version(), "python": f"{platform.python_implementation()} {platform.python_version()}",
            "libc": " ".join(platform.libc_ver()), "tool": tool_digest()}


def cache_dir_for(name: str, key: dict) -> Path:
    """The cache entry of a build of `name` for this key."""
    return cache_dir("real-project-wheels", f"{name}-{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]}")


def cached_wheel(entry: Path, key: dict) -> Path | None:
    """The entry's wheel where the entry is whole and was made for this key, else None."""
    try:
        meta = json.loads((entry / ENTRY).read_text())
        wheel = entry / meta["wheel"]
        ok = meta["key"] == key and Path(meta["wheel"]).name == meta["wheel"] and sha256_file(wheel) == meta["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return wheel if ok else None


def cached_report(entry: Path) -> dict:
    """The build's report.json, as stored with the entry's wheel."""
    return json.loads((entry / ENTRY).read_text()).get("report") or {}


def store(entry: Path, wheel: Path, key: dict, report: dict | None = None) -> None:
    """Put a verified wheel (and its build's report) in the cache: written in a directory beside `entry`,
    renamed into place."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    part = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", suffix=".part", dir=entry.parent))
    shutil.copyfile(wheel, part / wheel.name)
    meta = {"key": key, "wheel": wheel.name, "sha256": sha256_file(part / wheel.name), "report": report}
    (part / ENTRY).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(entry, ignore_errors=True)  # an entry that failed validation, or another run's for this key
    try:
        os.rename(part, entry)
    except OSError:  # another run put its entry there meanwhile: read back and validated like ours
        shutil.rmtree(part, ignore_errors=True)


def verified_build(project: str, tmp: Path, check: Path, args: tuple[str, ...] = BUILD_ARGS,
                   timeout: float | None = None) -> tuple[Path, dict, bool]:
    """The project's verified wheel and its build's report, from the cache or built now (then cached);
    and whether it was built now (`timeout`: the build's, where a cold one takes longer than a command's
    default). The CUDA builds of test_real_projects.py use it too."""
    source = sdist(project)
    key = build_key(source, args)
    entry = cache_dir_for(project, key)
    wheel = cached_wheel(entry, key)
    if wheel is not None:
        return wheel, cached_report(entry), False
    r, report, wheels = build(tmp, source, *args, "--test-command", f"python {check}", timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(wheels) == 1, wheels
    assert report["passed"] and report["verify"]["test_command"].startswith("ok"), report["verify"]
    assert all(v == "ok" for k, v in report["verify"].items() if k.startswith("import ")), report["verify"]
    store(entry, wheels[0], key, report)
    wheel = cached_wheel(entry, key)
    assert wheel is not None, f"the cache entry {entry} did not read back"
    return wheel, cached_report(entry), True


def verified_wheel(project: str, tmp: Path, check: Path) -> tuple[Path, bool]:
    """The project's verified CPU wheel, from the cache or built now (then cached); and whether built. A
    cold build gets most of the test's hour: torch-cluster's nine libraries, one file at a time, took
    over a command's default 15 min on a busy 2-core machine, so it failed and was never cached."""
    wheel, _, built = verified_build(project, tmp, check, timeout=3300)
    return wheel, built


def install_and_check(wheel: Path, tmp: Path, check: Path) -> str:
    """A fresh venv, torch 2.13.0 and the wheel installed by pip from its configured sources, and the
    check script run there in isolated mode, away from this repository; returns its output."""
    venv = tmp / "fresh"
    _proc.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    r = _proc.run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-input",
                   "--disable-pip-version-check", "torch==2.13.0", str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = "import torch; print(torch.__version__, torch.version.cuda)"
    r = _proc.run([python, "-I", "-c", probe], capture_output=True, text=True, cwd=tmp, env=env)
    assert r.stdout.split() == ["2.13.0+cpu", "None"], (r.stdout, r.stderr[-2000:])
    r = _proc.run([python, "-I", check], capture_output=True, text=True, cwd=tmp, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.timeout(3600)  # a cold build: see verified_wheel
@pytest.mark.parametrize("project, check, version", [
    ("torchsort", "check_torchsort.py", "0.1.10"),
    # extended: nine libraries, one file at a time, about 8 min of a core each time the tool's files that go
    # into a wheel change (its cache key); torchsort keeps the CPU sdist path in CI's budget
    pytest.param("torch-cluster", "check_torch_cluster.py", "1.6.3", marks=pytest.mark.extended),
])
def test_sdist_builds_for_cpu_and_runs_in_a_fresh_venv(tmp_path, project, check, version):
    wheel, built = verified_wheel(project, tmp_path / "build", CHECKS / check)
    print(f"{project}: {'built and cached' if built else 'reused the cached'} {wheel.name}")
    dist = project.replace("-", "_")
    assert wheel.name.startswith(f"{dist}-{version}+pt2.13.0.cpu-cp311-cp311-manylinux_"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        libraries = [n for n in z.namelist() if n.endswith(".so")]
        requires = [ln for ln in z.read(f"{dist}-{version}+pt2.13.0.cpu.dist-info/METADATA").decode().splitlines()
                    if ln.startswith("Requires-Dist:")]
    assert libraries and not any("cuda" in n.lower() for n in libraries), libraries
    assert "Requires-Dist: torch==2.13.0" in requires, requires
    out = install_and_check(wheel, tmp_path, CHECKS / check)
    assert out.startswith(dist), out  # the script ran to its last line


def test_a_cache_entry_is_used_only_whole_and_for_its_key(tmp_path):
    """The cache's own contract, on a small stand-in file: a missing entry, another key, a changed wheel
    and an entry without its entry.json (a copy cut short) are misses; a store replaces a bad entry and
    leaves no temporary directory behind."""
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    wheel.write_bytes(b"only bytes to hash")
    key = {"sdist_sha256": "0" * 64, "tool": "1"}
    cache = tmp_path / "cache"
    entry = cache / "demo-key"
    assert cached_wheel(entry, key) is None
    store(entry, wheel, key)
    stored = cached_wheel(entry, key)
    assert stored == entry / wheel.name and stored.read_bytes() == wheel.read_bytes()
    assert cached_wheel(entry, {**key, "tool": "2"}) is None
    stored.write_bytes(b"changed")
    assert cached_wheel(entry, key) is None
    store(entry, wheel, key)
    assert cached_wheel(entry, key) == stored and stored.read_bytes() == wheel.read_bytes()
    (entry / ENTRY).unlink()
    assert cached_wheel(entry, key) is None
    store(entry, wheel, key)
    assert cached_wheel(entry, key) == stored
    assert [p.name for p in cache.iterdir()] == ["demo-key"]
