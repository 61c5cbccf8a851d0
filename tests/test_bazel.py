"""Bazel with rules_python, for real: docs/bazel.md's WORKSPACE and BUILD.bazel, the wheels served by a
`ci.index` index (over file:// and over http on loopback), `bazel test` on a py_test per case.

rules_python puts every wheel in its own directory on sys.path (external/pypi_<name>), the layout
the preload exists for. Shown here:
1. torch 2.1.2 from the public index fails under Bazel (pytorch#117350), with rules_python 0.9.0 and
   0.18.1. The lock pins the unpatched `torch==2.1.2` by hash while `2.1.2+bazel1` sits in the same
   index: the hash is what keeps pip from taking the local build (docs/bazel.md's pinning caveat).
2. `ci.patch --preload-from` with `--local-version bazel1` passes: as one wheel with 0.9.0, and with
   0.18.1 (docs/bazel.md's) split (no wheel over 500 MB), torch and its companion each in their own
   repository. One workspace per version: the second `bazel test` refetches only what the lock changed.
3. our own wheels, the example (CMake) and the setuptools fixture, imported and computed next to torch.
4. the lock of case 3 made the way rules_python users make it: `compile_pip_requirements` (pip-tools,
   `--generate-hashes`) against our index, over http.

Each workspace's output root (~7 GB with torch 2.1.2) lives under the test's temporary directory and is
deleted at the end of its test. Timings and disk use are printed (pytest -s, or the report's captured
output) for docs/bazel.md.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests import _bazel
from tests._servers import StaticServer, ensure_debian_package
from tests._wheels import run_stage
from tests.test_index import cli as index_cli
from tests import _proc, _shared

pytestmark = [pytest.mark.bazel, pytest.mark.real_torch, pytest.mark.extended]  # about 18 min: outside CI's budget

TORCH_TEST = """\
import json, os, sys
import torch

x = torch.arange(6.0).reshape(2, 3)
assert abs(torch.softmax(x, 1).sum().item() - 2.0) < 1e-5
assert (x @ x.T).trace().item() == 55.0
import importlib.metadata
assert importlib.metadata.version("torch") == "{version}", importlib.metadata.version("torch")
# one directory per wheel: torch's own repository is not where its nvidia libraries live
def repo(path):
    return path.split(".runfiles" + os.sep)[1].split(os.sep)[0] if ".runfiles" + os.sep in path else None
repos = sorted({{repo(p) for p in sys.path if repo(p) and repo(p) != "__main__"}})
assert len(repos) > 5 and repo(torch.__file__) in repos, (torch.__file__, repos)
assert "nvidia" not in os.listdir(os.path.dirname(os.path.dirname(torch.__file__))), torch.__file__
print(json.dumps({{"torch": torch.__version__, "file": torch.__file__, "repos": repos}}))
"""

SPLIT_TEST = TORCH_TEST + """\
import importlib.metadata as md
names = {{d.metadata["Name"] for d in md.distributions()}}
companions = [n for n in names if n.lower().startswith("torch") and n.lower() != "torch"]
assert companions, names
"""

EXTENSION_TEST = """\
import os
import torch
import softmax_ext
import tiny_ext

x = torch.randn(4, 7, dtype=torch.float64)
torch.testing.assert_close(softmax_ext.scaled_softmax(x, 0.5), torch.softmax(x * 0.5, -1))
assert torch.equal(tiny_ext.add_one(torch.arange(5.0)), torch.arange(5.0) + 1)
def repo(path):
    return path.split(".runfiles" + os.sep)[1].split(os.sep)[0]
# one directory per wheel: each package from its own repository
assert len({repo(m.__file__) for m in (torch, softmax_ext, tiny_ext)}) == 3, (torch, softmax_ext, tiny_ext)
print("ok", torch.__version__, softmax_ext.__file__, tiny_ext.__file__)
"""


@pytest.fixture(scope="module")
def bazel_ready():
    ensure_debian_package("bazel", "bazel-bootstrap")
    ensure_debian_package("java", "default-jre-headless")


def lock_for(dist: Path, wheels: list[Path]) -> str:
    """`name==version --hash=sha256:...` for each wheel, the hash read from our index's PEP 691 page."""
    from packaging.utils import parse_wheel_filename
    lines = []
    for w in wheels:
        name, version, *_ = parse_wheel_filename(w.name)
        page = json.loads((dist / "simple" / name / "index.json").read_text())
        (sha,) = [f["hashes"]["sha256"] for f in page["files"] if f["filename"] == w.name]
        lines.append(f"{name}=={version} --hash=sha256:{sha}\n")
    return "".join(sorted(lines))


def link_all(dest: Path, wheels: list[Path]) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for w in wheels:
        if not (dest / w.name).exists():
            (dest / w.name).symlink_to(w.resolve())
    r = index_cli(str(dest))
    assert r.returncode == 0, r.stderr
    return dest


def timed_test(ws: _bazel.Workspace, what: str):
    start = time.monotonic()
    r = ws.test()
    print(f"bazel: {what}: rules_python {ws.rules_python}: exit {r.returncode} in "
          f"{time.monotonic() - start:.0f} s, output root {ws.output_size() / 2**30:.1f} GiB", file=sys.stderr)
    return r, r.stdout + r.stderr


@pytest.fixture(scope="module")
def torch212(tmp_path_factory):
    """torch 2.1.2 and its wheels from the public index, and torch patched for this layout."""
    from tests.test_real_torch import fetch
    release = fetch("2.1.2")
    out = tmp_path_factory.mktemp("patched")
    r = run_stage("ci.patch", release.torch, "--preload-from", *release.nvidia, "--local-version", "bazel1",
                  "-w", out)
    assert r.returncode == 0, r.stderr
    (patched,) = out.glob("*.whl")
    return release, patched


def split_parts(patched: Path, release, out: Path) -> list[Path]:
    r = run_stage("ci.split", patched, "--limit", "500MB", "--preload-deps", *release.nvidia, "-w", out, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    parts = [Path(w["path"]) for w in json.loads(r.stdout)["wheels"]]
    assert len(parts) >= 2 and all(p.stat().st_size <= 500 * 10**6 for p in parts), parts
    return parts


@pytest.mark.parametrize("rules_python", sorted(_bazel.RULES_PYTHON))
def test_torch_unpatched_fails_patched_passes(bazel_ready, torch212, tmp_path, rules_python):
    from packaging.utils import parse_wheel_filename

    release, patched = torch212
    split = rules_python == _bazel.DOC_RULES_PYTHON
    fixed = split_parts(patched, release, tmp_path / "split") if split else [patched]
    dist = link_all(tmp_path / "dist", [release.torch, *release.others, *fixed])
    url = f"file://{dist}/simple"
    ws = _bazel.Workspace(tmp_path / "ws", rules_python, _bazel.overrides(tmp_path / "rules", rules_python))
    try:
        ws.write(url, lock_for(dist, [release.torch, *release.others]),
                 {"torch_test": (TORCH_TEST.format(version="2.1.2"), ["torch"])})
        r, out = timed_test(ws, "torch 2.1.2 unpatched")
        assert r.returncode != 0, out[-3000:]
        assert "libnvJitLink.so.12" in out or "libcufft.so.11" in out, out[-3000:]

        names = [str(parse_wheel_filename(p.name)[0]) for p in fixed]
        test = (SPLIT_TEST if split else TORCH_TEST).format(version="2.1.2+bazel1")
        ws.write(url, lock_for(dist, [*fixed, *release.others]), {"torch_test": (test, names)})
        r, out = timed_test(ws, "torch 2.1.2+bazel1 " + ("split" if split else "patched"))
        assert r.returncode == 0, out[-4000:]
        assert "PASSED" in out
    finally:
        ws.close()


@pytest.fixture(scope="module")
def torch_cpu_house(torch_cpu_wheel) -> list[Path]:
    """torch 2.13.0 (the CPU build) and its dependencies, as wheels (cached)."""
    from wheelci.util.cache import cache_dir
    house = cache_dir("bazel-torch-cpu-deps")
    with _shared.held("bazel-torch-cpu-deps"):
        if not (house / ".complete").exists():
            r = _proc.run([sys.executable, "-m", "pip", "download", "--isolated", "--quiet", "--only-binary=:all:",
                           "-d", str(house), str(torch_cpu_wheel)], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[-1500:]
            (house / ".complete").touch()
    return [torch_cpu_wheel, *(w for w in sorted(house.glob("*.whl")) if not w.name.startswith("torch-"))]


def test_our_wheels_next_to_torch_locked_by_rules_python(bazel_ready, cpu_build, tiny_cpu_build,
                                                         torch_cpu_house, tmp_path):
    """The example and the setuptools fixture, served over http; the lock made by rules_python's own
    compile_pip_requirements (pip-tools) from our index, with hashes; then `bazel test`."""
    dist = link_all(tmp_path / "dist", [cpu_build.wheel, tiny_cpu_build.wheel, *torch_cpu_house])
    ws = _bazel.Workspace(tmp_path / "ws", "0.18.1", _bazel.overrides(tmp_path / "rules", "0.18.1"))
    try:
        with StaticServer(dist, tmp_path / "access.log") as srv:
            url = srv.url + "simple"
            ws.write(url, "", {"extension_test": (EXTENSION_TEST, ["softmax-ext", "tiny-ext", "torch"])},
                     lock_target=True)
            (ws.root / "requirements.in").write_text("softmax-ext\ntiny-ext\n")
            start = time.monotonic()
            r = ws.run("run", "//:requirements.update")
            print(f"bazel: compile_pip_requirements: exit {r.returncode} in {time.monotonic() - start:.0f} s",
                  file=sys.stderr)
            assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
            lock = (ws.root / "requirements_lock.txt").read_text()
            for name in ("softmax-ext", "tiny-ext", "torch", "sympy"):
                assert f"\n{name}==" in "\n" + lock, lock
            assert lock.count("--hash=sha256:") >= 8, lock
            r, out = timed_test(ws, "the example and tiny_ext next to torch 2.13.0")
            assert r.returncode == 0, out[-4000:]
            served = srv.requests()
        assert any(p.endswith(".whl") for p in served), served  # rules_python's pip used the http index
    finally:
        ws.close()
