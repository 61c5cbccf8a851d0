"""aarch64 on this x86_64 machine, for real: tests/fixtures/tiny_ext built for aarch64 by cibuildwheel in an
aarch64 image under QEMU and verified in it (its imports and its own tests, over PyPI's aarch64 torch), and
PyPI's torch 2.13.0 aarch64 wheel (a CUDA 13.0 build) through check, split, preload (its libraries' order
against their own ELF dependencies) and the index.

The aarch64 image is the suite's stand-in (tests/_standin.py, Debian arm64, made once and kept by its
recipe's hash); QEMU comes from Debian's qemu-user-static, registered here (tests/_emulation.py). The
first run compiles tiny.cpp under emulation (minutes); ccache keeps later runs short.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import zipfile
from pathlib import Path
from urllib.parse import quote

import pytest

from tests import _emulation, _proc, _standin
from tests._servers import StaticServer
from tests._wheels import run_stage
from tests.test_real_torch import fetch

pytestmark = [pytest.mark.container, pytest.mark.timeout(5400)]  # a cold first run: the image and a compile in QEMU

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"
CPU_TORCH = "2.9.1"  # PyPI's last aarch64 torch that is a CPU build (2.13.0's is CUDA 13.0)
EPOCH = {"SOURCE_DATE_EPOCH": "1767323045"}


@pytest.fixture(scope="module")
def arm_image(engines) -> str:
    why = _emulation.ensure("aarch64")  # this machine kind registers QEMU as root: a failure, never a skip
    assert why is None, f"aarch64 emulation: {why}"
    assert engines.why_not["docker"] is None, engines.why_not["docker"]
    return _standin.ensure_image("docker", "aarch64")


@pytest.fixture(scope="module")
def arm_cpu_torch(tmp_path_factory) -> Path:
    """PyPI's torch 2.9.1 aarch64 wheel (a CPU build), as a find-links directory."""
    from wheelci.util.cache import cache_dir
    from tests import _shared

    where = cache_dir() / "torch-cpu-aarch64"
    with _shared.held("torch-cpu-aarch64"):
        if not list(where.glob(f"torch-{CPU_TORCH}-*aarch64.whl")):
            r = _proc.run([sys.executable, "-m", "pip", "download", "--isolated", "--quiet", "--no-deps",
                           "--only-binary=:all:", "--platform", "manylinux_2_28_aarch64", "--python-version", "3.11",
                           f"torch=={CPU_TORCH}", "-d", str(where)], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[-2000:]
    return where


@pytest.fixture(scope="module")
def arm_tiny(arm_image, arm_cpu_torch, tmp_path_factory) -> Path:
    """tiny_ext built for aarch64 (CPU) in the aarch64 image under QEMU, and verified there: its -w."""
    out = tmp_path_factory.mktemp("arm-tiny") / "wheelhouse"
    r = run_stage("ci.build", TINY, "--cpu", "--archs", "aarch64", "--engine", "docker", "--image", arm_image,
                  "--torch", CPU_TORCH, "--find-links", arm_cpu_torch, "-w", out, env=EPOCH,
                  timeout=3600)  # a compile under QEMU: 37 min on a loaded 2-core machine, past a command's default 15
    assert r.returncode == 0, r.stderr[-4000:]
    return out


@pytest.mark.extended  # torch installed and a compile run under QEMU, about 12 min: outside CI's budget
def test_tiny_ext_builds_for_aarch64_and_verifies_under_emulation(arm_image, arm_tiny):
    (wheel,) = arm_tiny.glob("*.whl")
    assert re.fullmatch(r"tiny_ext-0\.1\.0\+pt2\.9\.1\.cpu-cp311-cp311-manylinux_2_\d+_aarch64\.whl", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as z:
        (ext,) = [n for n in z.namelist() if n.endswith(".so")]
        assert z.read(ext)[18:20] == (183).to_bytes(2, "little")  # e_machine EM_AARCH64
    report = json.loads((arm_tiny / "report.json").read_text())
    assert report["passed"] and report["plan"]["archs"] == ["aarch64"]
    verify = report["verify"]
    assert verify["where"].startswith("aarch64 under QEMU in " + arm_image), verify
    assert verify["import tiny_ext"] == "ok" and verify["install"] == "ok", verify
    tests = {k: v for k, v in verify.items() if k.startswith("test ")}
    # the fixture's own tests ran, under aarch64: its CPU test passed, its CUDA test skipped (no GPU)
    assert tests["test test_tiny::test_add_one_cpu"] == "ok" and not any(v.startswith("FAILED") for v in tests.values())
    assert verify[f"abi {wheel.name}"].startswith("ok"), verify
    # repaired by auditwheel's aarch64 policy with torch left out: declared, preloaded, never grafted
    assert verify["nothing_grafted"] == "ok" and verify["requires_torch"] == "ok", verify
    (shipped,) = report["wheels"]
    assert {"libc10.so", "libtorch_cpu.so"} <= set(shipped["excluded"]), shipped["excluded"]
    print(f"\naarch64 build: {report['build_seconds']} s, verify {report['verify_seconds']} s (under QEMU)")


def test_an_aarch64_variant_and_plain_wheel_share_the_index(tmp_path):
    """The index lists an aarch64 variant wheel in its variants file beside the plain one; an installer
    without variant support (pip) takes the plain aarch64 wheel for an aarch64 machine, nothing for x86_64."""
    from tests._elfbuild import make_wheel
    from wheelci.wheel.variant import add_variant, cuda_variant

    site = tmp_path / "site"
    plain = make_wheel(site, "tiny-ext", {"tiny_ext/__init__.py": b""}, version="0.1.0",
                       tag="cp311-cp311-manylinux_2_34_aarch64")
    variant = add_variant(plain, site, cuda_variant("13.0", "9.0;10.0"))
    assert variant.name.endswith("_aarch64-cu130.whl"), variant.name
    r = run_stage("ci.index", site, "--json")
    assert r.returncode == 0, r.stderr
    page = (site / "simple" / "tiny-ext" / "index.html").read_text()
    assert quote(variant.name) in page and quote(plain.name) in page and "tiny_ext-0.1.0-variants.json" in page
    variants = json.loads((site / "simple" / "tiny-ext" / "tiny_ext-0.1.0-variants.json").read_text())
    assert "cu130" in variants["variants"]
    with StaticServer(site, tmp_path / "http.log") as server:
        common = [sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--only-binary=:all:",
                  "--python-version", "3.11", "--index-url", server.url + "simple/"]
        got = _proc.run([*common, "--platform", "manylinux_2_34_aarch64", "-d", str(tmp_path / "got"), "tiny-ext"],
                        capture_output=True, text=True)
        assert got.returncode == 0, got.stderr[-2000:]
        assert [p.name for p in (tmp_path / "got").iterdir()] == [plain.name]
        x86 = _proc.run([*common, "--platform", "manylinux_2_34_x86_64", "-d", str(tmp_path / "x86"), "tiny-ext"],
                        capture_output=True, text=True)
        assert x86.returncode != 0 and "No matching distribution" in x86.stderr, x86.stderr[-1000:]


@pytest.fixture(scope="module")
def arm_torch():
    return fetch("2.13.0", arch="aarch64")


def test_the_aarch64_torch_wheel_through_check_split_preload_and_the_index(arm_torch, tmp_path):
    """Every stage reads aarch64 ELF files as it reads x86_64 ones. (Importing this CUDA build under QEMU
    here hangs in qemu-user 7.2, in rt_sigsuspend, so its import is not checked; tiny_ext's over PyPI's
    CPU aarch64 torch is, above.)"""
    from wheelci.native.elf import scan_wheel

    torch = arm_torch.torch
    assert torch.name.endswith("manylinux_2_28_aarch64.whl"), torch.name
    # check: over PyPI's limit, the ten largest members named
    r = run_stage("ci.check", torch, "--json")
    assert r.returncode == 1 and "libtorch_cuda.so" in r.stdout + r.stderr
    # split under a limit that forces companions; each part an aarch64 wheel under it, together the whole
    split = tmp_path / "split"
    r = run_stage("ci.split", torch, "--limit", "400MB", "-w", split, "--json")  # libtorch_cuda.so: 296 MiB
    assert r.returncode == 0, r.stderr
    parts = [Path(w["path"]) for w in json.loads(r.stdout)["wheels"]]
    assert len(parts) >= 2 and all(p.name.endswith("_aarch64.whl") for p in parts)
    assert run_stage("ci.check", *parts, "--limit", "400MB").returncode == 0
    with zipfile.ZipFile(torch) as z:
        whole = {n for n in z.namelist() if not n.startswith("torch-2.13.0.dist-info/")}
    shipped = set()
    for p in parts:
        with zipfile.ZipFile(p) as z:
            shipped |= {n for n in z.namelist() if ".dist-info/" not in n}
    def base(n: str) -> str:  # a companion holds its libraries under a directory of its own
        return n.rsplit("/", 1)[-1] if ".so" in n.rsplit("/", 1)[-1] else n

    assert {base(n) for n in whole} <= {base(n) for n in shipped}, sorted({base(n) for n in whole} - {base(n) for n in shipped})[:5]
    # preload: the aarch64 CUDA libraries in dependency order, as their own ELF files say
    needs = {lib.soname: set(lib.needed) for w in arm_torch.nvidia for lib in scan_wheel(w) if lib.soname}
    assert any(lib.startswith("libcublasLt.so") for lib in needs), sorted(needs)[:5]
    r = run_stage("ci.preload", *arm_torch.nvidia, "--needed", "libcublas.so.13", "--needed", "libcusparse.so.12",
                  "--print-order")
    assert r.returncode == 0, r.stderr
    order = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    assert "libcublas.so.13" in order and "libnvJitLink.so.13" in order, order
    for i, soname in enumerate(order):  # what each needs of the others is loaded before it
        assert not (needs.get(soname, set()) & set(order[i + 1:])), (soname, order)
    patched = tmp_path / "patched"
    r = run_stage("ci.patch", torch, "--preload-from", *arm_torch.nvidia, "--local-version", "bazel1", "-w", patched)
    assert r.returncode == 0, r.stderr
    (patched_wheel,) = patched.glob("*.whl")
    assert patched_wheel.name.endswith("+bazel1-cp311-cp311-manylinux_2_28_aarch64.whl"), patched_wheel.name
    # the index: pip resolves the aarch64 parts for an aarch64 machine, nothing for an x86_64 one
    site = tmp_path / "site"
    site.mkdir()
    for p in parts:
        shutil.copy2(p, site / p.name)
    r = run_stage("ci.index", site)
    assert r.returncode == 0, r.stderr
    with StaticServer(site, tmp_path / "http.log") as server:
        common = [sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--only-binary=:all:",
                  "--python-version", "3.11", "--index-url", server.url + "simple/", "-d"]
        arm = _proc.run([*common, str(tmp_path / "got-arm"), "--platform", "manylinux_2_28_aarch64", "torch==2.13.0"],
                        capture_output=True, text=True)
        assert arm.returncode == 0, arm.stderr[-2000:]
        assert [p.name for p in (tmp_path / "got-arm").glob("torch-*.whl")] == [parts[0].name]
        x86 = _proc.run([*common, str(tmp_path / "got-x86"), "--platform", "manylinux_2_28_x86_64", "torch==2.13.0"],
                        capture_output=True, text=True)
        assert x86.returncode != 0 and not list((tmp_path / "got-x86").glob("*.whl")), x86.stderr[-1000:]
