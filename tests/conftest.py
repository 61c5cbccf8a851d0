"""Shared fixtures: the project root and the example wheels built once per session.

The CPU and CUDA host builds are real (`python -m ci.build --engine host ...`): compile, link,
repair, verify. Their build environments are cached under the cache directory (see ci.compile.hostenv), so
only a cold machine pays the ~3 GB CUDA download.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._wheels import run_stage
from tests import _proc, _shared

ROOT = Path(__file__).resolve().parent.parent
collect_ignore = ["fixtures"]  # projects the tests build; their own tests run inside verify

# Variables a CI job (GitHub Actions, our own workflow) sets that change what the stages write: the
# suite runs without them, session fixtures included, and a test that needs one sets it itself.
CI_VARIABLES = ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "CI_IMAGE_REGISTRY", "SOURCE_DATE_EPOCH", "PIP_CONSTRAINT",
                "CI_STABLE_ABI", "CI_VERBOSE", "CI_HEARTBEAT")
for _var in CI_VARIABLES:
    os.environ.pop(_var, None)
# The cache's place under its old name moves to the new one (a stage would print a deprecation line).
if "CUDA_WHEEL_CI_CACHE" in os.environ:
    os.environ.setdefault("WHEELCI_CACHE_DIR", os.environ.pop("CUDA_WHEEL_CI_CACHE"))
# The tool's own settings go too (a WHEELCI_* build option would change every build's plan), but where the
# cache is and the index torch releases are read from.
for _var in [v for v in os.environ if v.startswith("WHEELCI_") and v not in ("WHEELCI_CACHE_DIR", "WHEELCI_TORCH_INDEX")]:
    os.environ.pop(_var, None)
# The suite's builds share the machine's cache, kept under its own budget (.ci/run): a build's default cap
# would remove the torch environments other tests are about to use. A test of the cap sets its own.
os.environ["WHEELCI_CACHE_MAX_SIZE"] = "none"


@dataclass(frozen=True)
class Built:
    """One `ci.build` run: its output directory, the main wheel and the report."""

    out: Path
    wheel: Path
    report: dict
    stderr: str


def _build(tmp_path_factory, name: str, *args: str) -> Built:
    """One `ci.build` per run, shared by the run's workers (tests._shared.once_per_run)."""

    def make(out: Path) -> dict:
        proc = run_stage("ci.build", "--engine", "host", "--fresh", *args, "-w", out)  # every step runs
        assert proc.returncode == 0, proc.stderr[-3000:]
        return {"stderr": proc.stderr}

    out, result = _shared.once_per_run(tmp_path_factory, name, make)
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return Built(out, wheels[0], json.loads((out / "report.json").read_text()), result["stderr"])


@pytest.fixture(scope="session")
def cpu_build(tmp_path_factory) -> Built:
    return _build(tmp_path_factory, "cpu", "--cpu")


@pytest.fixture(scope="session")
def cuda_build(tmp_path_factory) -> Built:
    return _build(tmp_path_factory, "cuda", "--cuda", "13.0", "--arch-list", "9.0")


@pytest.fixture(scope="session")
def tiny_cpu_build(tmp_path_factory) -> Built:
    """The setuptools fixture (tests/fixtures/tiny_ext) built, repaired and verified, CPU."""
    return _build(tmp_path_factory, "tiny-cpu", str(ROOT / "tests" / "fixtures" / "tiny_ext"), "--cpu")


@pytest.fixture(scope="session")
def pair_cpu_build(tmp_path_factory) -> Built:
    """tests/fixtures/pair_ext (two libraries registering the same operators, PyG's layout), CPU."""
    return _build(tmp_path_factory, "pair-cpu", str(ROOT / "tests" / "fixtures" / "pair_ext"), "--cpu")


@pytest.fixture(scope="session")
def torch_cpu_wheel() -> Path:
    """The torch 2.13.0 CPU wheel (192 MB), through pip's own sources, cached between runs."""
    from wheelci.util.cache import cache_dir

    cache = cache_dir() / "torch-cpu"
    with _shared.held("torch-cpu"):
        found = sorted(cache.glob("torch-2.13.0*.whl"))
        if found:
            return found[0]
        cache.mkdir(parents=True, exist_ok=True)
        r = _proc.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "torch==2.13.0",
                       "-d", str(cache)], capture_output=True, text=True)
        found = sorted(cache.glob("torch-2.13.0*.whl"))
        assert found, f"pip could not download the torch 2.13.0 wheel: {r.stderr.strip()[-300:]}"
    return found[0]


@pytest.fixture(scope="session")
def engines():
    """Docker and Podman, installed and started here when missing (root with apt); stopped at the end
    if the suite started them. An engine that cannot start fails the tests that need it."""
    from tests import _engines

    started = _engines.start()
    yield started
    started.stop()


# What makes a test slow or networked is what it needs, so the markers follow from that instead of being
# repeated on every test: a real torch release, a container engine or Bazel, or one of the session's
# built wheels (a real compile, and on a cold machine a build environment from the package index).
HEAVY_MARKERS = ("real_torch", "container", "bazel", "extended")
BUILT_FIXTURES = ("cpu_build", "cuda_build", "tiny_cpu_build", "pair_cpu_build", "engines", "torch_cpu_wheel")

# Seconds a test may run (pytest-timeout), its fixtures' setup included (the first user of a session build
# pays for it, on a cold machine a GB download too): the default for a hermetic test, longer by what a
# test needs. A test that names its own `@pytest.mark.timeout` keeps it. Past its limit a test fails with
# its name and where it stood, instead of spending the whole CI run. pyproject.toml's `timeout` is the same
# default for any pytest run of this tree (the example's verify installs pytest-timeout for it).
DEFAULT_TIMEOUT = 300
TIMEOUTS = {"bazel": 2400, "act": 1800, "container": 1800, "real_torch": 1800, "slow": 1200, "network": 900}


def pytest_collection_modifyitems(config, items):
    for item in items:
        heavy = any(item.get_closest_marker(m) for m in HEAVY_MARKERS)
        if heavy or set(getattr(item, "fixturenames", ())) & set(BUILT_FIXTURES):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.network)
        if item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.xdist_group(_group(item)))
        limits = [t for marker, t in TIMEOUTS.items() if item.get_closest_marker(marker)]
        if not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(max(limits, default=DEFAULT_TIMEOUT)))
        if item.get_closest_marker("gpu") and not _has_cuda_device():
            item.add_marker(pytest.mark.skip(reason="no CUDA device on this machine (the gpu marker)"))


@pytest.fixture(autouse=True)
def _command_limit(request):
    """A command a test runs (tests/_proc.py) ends before the test's own limit, so its timeout names it."""
    marker = request.node.get_closest_marker("timeout")
    _proc.LIMIT = float(marker.args[0]) if marker and marker.args else None
    yield
    _proc.LIMIT = None


def _group(item) -> str:
    """The heavy tier runs on xdist workers by group (`--dist loadgroup`): a module's tests stay together,
    so its module fixtures are made once, and everything using the container engines shares the one
    worker that starts them."""
    if ("engines" in getattr(item, "fixturenames", ()) or item.get_closest_marker("container")
            or item.get_closest_marker("act")):  # act's checks read Docker's images: not while it stops
        return "engines"
    return item.module.__name__


def pytest_sessionfinish(session):
    """Temporary trees go whether the tests passed or failed (the heavy tier unpacks GBs: torch releases,
    Bazel output roots); a --basetemp given by hand stays. The controller removes the run's root, which
    holds every worker's."""
    if os.environ.get("PYTEST_XDIST_WORKER") or session.config.option.basetemp:
        return
    base = session.config._tmp_path_factory._basetemp  # set only where this process made it
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)


def _has_cuda_device() -> bool:
    return Path("/dev/nvidiactl").exists() or any(Path("/dev").glob("nvidia[0-9]*"))
