"""The third-party wheel tools on real torch releases from the public index, in the layouts users have.

Three releases span the three nvidia wheel layouts: 2.0.1 (the `-cu11` packages, and the torch<->triton
cycle), 2.1.2 (`nvidia/<pkg>/lib`, whose own loader fails one-directory-per-package) and 2.13.0
(`nvidia/cu13/lib`). Each release is downloaded with its dependencies once into the cache directory
(about 2.5 GB each) and every wheel unpacked into its own directory, as Bazel's rules_python lays them
out. Imports run with `python -S` and PYTHONPATH only, so nothing from the test environment leaks in.

The table in docs/third-party-wheels.md ("Real torch releases") is what these tests show.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from wheelci.util.cache import cache_dir
from tests._wheels import run_stage
from tests import _proc, _shared

pytestmark = pytest.mark.real_torch

PLATFORMS = ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64",
             *(f"manylinux_2_{n}_x86_64" for n in range(5, 29)), "any"]
ARM_PLATFORMS = ["manylinux2014_aarch64", *(f"manylinux_2_{n}_aarch64" for n in range(17, 29)), "any"]

# release -> (layout of its nvidia wheels, what unmodified torch does with every wheel in its own
# directory: None = imports, else the error it fails with). Measured by test_unpatched_per_package.
RELEASES = {
    "2.0.1": ("nvidia/<pkg>/lib, -cu11 packages", None),
    "2.1.2": ("nvidia/<pkg>/lib, -cu12 packages", "libnvJitLink.so.12: cannot open shared object file"),
    "2.13.0": ("nvidia/cu13/lib", None),
}
# Split limits that force a companion, for the current layout (nvidia/cu13/lib). 2.1.2 (its libtorch_cuda.so
# alone is 438 MiB compressed) split the same way at 500MB and cost the suite three more minutes.
SPLIT = {"2.13.0": "400MB"}
COMPUTE = ("import torch, json; x = torch.arange(6.0).reshape(2, 3);"
           "print(json.dumps([torch.__version__, torch.softmax(x, 1).sum().item(), (x @ x.T).trace().item()]))")


@dataclass(frozen=True)
class Release:
    version: str
    torch: Path  # the wheel
    others: list[Path]  # every other wheel torch needs (nvidia-*, triton, pure Python)
    dirs: dict[str, Path]  # wheel file name -> its own unpacked directory

    @property
    def nvidia(self) -> list[Path]:
        return [w for w in self.others if w.name.startswith("nvidia_")]

    def other_dirs(self) -> list[Path]:
        return [self.dirs[w.name] for w in self.others]


def unpack(wheel: Path, dest: Path) -> Path:
    """A wheel unpacked into its own directory (modes kept), built aside and renamed into place."""
    if dest.is_dir():
        return dest
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            target = tmp / info.filename
            zf.extract(info, tmp)
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                os.chmod(target, mode)
    tmp.rename(dest)
    return dest


def fetch(version: str, unpack_to: Path | None = None, arch: str = "x86_64") -> Release:
    """The release's wheels, cached between runs (one process downloads them); with unpack_to, each also
    unpacked into its own directory there. The unpacked trees are twice the wheels' size, so they live
    in the run's temporary tree, not the cache. `arch`: the release's wheels for that machine."""
    root = cache_dir() / "real-torch" / (version if arch == "x86_64" else f"{version}-{arch}")
    wheels = root / "wheels"
    platforms = PLATFORMS if arch == "x86_64" else ARM_PLATFORMS
    with _shared.held(f"real-torch-{version}-{arch}"):
        if not (wheels / ".complete").exists():
            wheels.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "pip", "download", "--isolated", "--quiet", "--only-binary=:all:",
                   "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
                   *(a for p in platforms for a in ("--platform", p)), f"torch=={version}", "-d", str(wheels)]
            r = _proc.run(cmd, capture_output=True, text=True, timeout=1800)
            assert r.returncode == 0, f"pip download torch=={version}: {r.stderr[-2000:]}"
            (wheels / ".complete").touch()
        _shared.store_once(wheels, cache_dir("wheelhouse"))  # the same nvidia-* wheels other tests download
    all_wheels = sorted(wheels.glob("*.whl"))
    (torch,) = [w for w in all_wheels if w.name.startswith(f"torch-{version}-")]
    others = [w for w in all_wheels if w != torch]
    dirs = {w.name: unpack(w, unpack_to / w.name[:-4]) for w in all_wheels} if unpack_to else {}
    return Release(version, torch, others, dirs)


# 2.0.1 (the -cu11 packages, which import as they are) is in the extended tier: outside CI's budget
@pytest.fixture(scope="module", params=[pytest.param(v, marks=[pytest.mark.extended] if v == "2.0.1" else [])
                                        for v in sorted(RELEASES, key=lambda v: tuple(map(int, v.split("."))))])
def release(request, tmp_path_factory) -> Iterator[Release]:
    where = tmp_path_factory.mktemp(f"per-package-{request.param}")
    yield fetch(request.param, where)
    shutil.rmtree(where)  # GBs: gone before the next release unpacks


def run_torch(paths: list[Path], code: str = COMPUTE) -> subprocess.CompletedProcess:
    """A fresh `python -S` with PYTHONPATH = paths (sys.path order), no site-packages, no user site."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD")}
    env.update(PYTHONPATH=os.pathsep.join(map(str, paths)), PYTHONNOUSERSITE="1")
    return _proc.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True,
                     timeout=600, cwd="/")


def computed(r: subprocess.CompletedProcess, version: str) -> list:
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out[0].startswith(version) and out[1] == pytest.approx(2.0) and out[2] == 55.0, out
    return out


def valid_distribution(wheel: Path, tmp: Path) -> None:
    """twine check --strict and `wheel unpack` accept it (what ci.upload and users run)."""
    twine = _proc.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
                      capture_output=True, text=True)
    assert twine.returncode == 0, twine.stdout + twine.stderr
    unpacked = _proc.run([sys.executable, "-m", "wheel", "unpack", "-d", str(tmp / "unpack"), str(wheel)],
                         capture_output=True, text=True)
    assert unpacked.returncode == 0, unpacked.stderr
    shutil.rmtree(tmp / "unpack")


def test_unpatched_per_package(release):
    """What a user gets today with every wheel in its own directory (Bazel rules_python)."""
    layout, error = RELEASES[release.version]
    r = run_torch([release.dirs[release.torch.name], *release.other_dirs()])
    if error is None:
        computed(r, release.version)
    else:
        assert r.returncode != 0 and error in r.stderr, r.stderr[-2000:]


def test_patched_with_preload_imports_and_computes_per_package(release, tmp_path):
    """ci.patch --preload-from the nvidia wheels: torch imports and computes one-directory-per-package."""
    out = tmp_path / "out"
    r = run_stage("ci.patch", release.torch, "--preload-from", *release.nvidia, "--local-version", "bazel1",
                  "-w", out)
    assert r.returncode == 0, r.stderr
    (patched,) = out.glob("*.whl")
    assert "+bazel1" in patched.name
    valid_distribution(patched, tmp_path)
    site = unpack(patched, tmp_path / "torch")
    computed(run_torch([site, *release.other_dirs()]), release.version)


@pytest.mark.parametrize("release", sorted(SPLIT), indirect=True)  # the releases with a split limit
def test_split_imports_in_every_layout(release, tmp_path):
    """Split under a limit that forces a companion; torch imports with (a) everything in one
    site-packages (installed by pip and uv), (b) torch and its companion in one directory and each
    other wheel in its own, (c) every wheel, the companion too, in its own directory."""
    limit = SPLIT[release.version]
    out = tmp_path / "out"
    r = run_stage("ci.split", release.torch, "--limit", limit, "-w", out, "--json")
    assert r.returncode == 0, r.stderr
    wheels = [Path(w["path"]) for w in json.loads(r.stdout)["wheels"]]
    from wheelci.util.sizes import parse_size
    assert len(wheels) >= 2 and all(w.stat().st_size <= parse_size(limit) for w in wheels)
    for w in wheels:
        valid_distribution(w, tmp_path)

    from tests.test_index import _uv
    site = tmp_path / "site"  # (a) one site-packages: pip installs the split, uv the rest
    pip = _proc.run([sys.executable, "-m", "pip", "install", "--isolated", "--no-deps", "--no-compile",
                     "--quiet", "--target", str(site), *map(str, wheels)], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr[-2000:]
    uv = _proc.run([_uv(), "pip", "install", "--no-deps", "--no-cache", "--no-config", "--target", str(site),
                    *map(str, release.others)], capture_output=True, text=True)
    assert uv.returncode == 0, uv.stderr[-2000:]
    computed(run_torch([site]), release.version)

    together = tmp_path / "torch"  # (b)
    for w in wheels:
        with zipfile.ZipFile(w) as zf:
            zf.extractall(together)
    computed(run_torch([together, *release.other_dirs()]), release.version)

    apart = [unpack(w, tmp_path / w.name[:-4]) for w in wheels]  # (c)
    computed(run_torch([*apart, *release.other_dirs()]), release.version)


def test_triton_cycle_removed_resolves_offline_with_pip_and_uv(tmp_path):
    """torch 2.0.1 requires triton 2.0.0, which requires torch. --remove-requires triton breaks the
    cycle; pip and uv resolve `torch triton` offline from a directory holding the patched torch."""
    rel = fetch("2.0.1")
    with zipfile.ZipFile(rel.torch) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        assert "Requires-Dist: triton" in zf.read(meta).decode()
    out = tmp_path / "out"
    r = run_stage("ci.patch", rel.torch, "--remove-requires", "triton", "--local-version", "nocycle", "-w", out)
    assert r.returncode == 0, r.stderr
    (patched,) = out.glob("*.whl")
    valid_distribution(patched, tmp_path)
    links = tmp_path / "links"
    links.mkdir()
    for w in [patched, *rel.others]:
        (links / w.name).symlink_to(w)
    report = tmp_path / "report.json"
    pip = _proc.run([sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed",
                     "--no-index", "--find-links", str(links), "--python-version", "3.11",
                     "--only-binary=:all:", "--report", str(report), "torch==2.0.1+nocycle", "triton"],
                    capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr[-2000:]
    chosen = {i["metadata"]["name"].lower(): i for i in json.loads(report.read_text())["install"]}
    assert chosen["torch"]["metadata"]["version"] == "2.0.1+nocycle"
    assert not any(req.startswith("triton") for req in chosen["torch"]["metadata"].get("requires_dist", []))
    assert "triton" in chosen

    from tests.test_index import _uv
    venv = tmp_path / "venv"
    _proc.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    uv = _proc.run([_uv(), "pip", "install", "--dry-run", "--no-cache", "--no-config", "--offline",
                    "--python", str(venv / "bin" / "python"), "--no-index", "--find-links", str(links),
                    "torch==2.0.1+nocycle", "triton"], capture_output=True, text=True)
    assert uv.returncode == 0, uv.stderr[-2000:]
    assert "torch==2.0.1+nocycle" in uv.stderr and "triton==2.0.0" in uv.stderr, uv.stderr
