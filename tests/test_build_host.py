"""The spine end to end on this machine: host builds (CPU and CUDA 13.0), repair, verify, report.

The CUDA build compiles real device code with nvcc against torch 2.13.0+cu130 and cuDNN from
NVIDIA's wheels, and verify runs the CPU kernels of that CUDA wheel in a CUDA-torch venv without a GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.test_layout import assert_declared
from wheelci.native.elf import too_recent_for, scan_wheel
from wheelci.native.libs import is_excluded
from wheelci.wheel.metadata import get_headers
from wheelci.wheel.zipread import WheelArchive
from wheelci.wheel.names import WheelName
from conftest import ROOT
from tests._wheels import run_stage
from tests import _proc

# the generic checks, then the example's own tests (example_tests/, its [tool.wheelci] test-command)
VERIFY_OK = ("requires_torch", "nothing_grafted", "install", "import softmax_ext",
             "load softmax_ext/lib/libsoftmax_ext.so", *(f"test test_softmax_ext::{t}" for t in (
                 "test_ops_match_torch[float32-cpu]", "test_ops_match_torch[float64-cpu]", "test_opcheck[cpu]",
                 "test_gradcheck[cpu]", "test_torchscript_model_loads_in_a_new_process", "test_cpp_runner")))


def project_name() -> str:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]


def requires(wheel: Path) -> list[str]:
    with WheelArchive.open(wheel) as wa:
        return get_headers(wa.metadata, "Requires-Dist")


def assert_clean_manylinux(wheel: Path) -> list:
    """A manylinux wheel holding only our op library: nothing torch, CUDA or cuDNN grafted in."""
    name = WheelName.parse(wheel.name)
    assert name.project == project_name()
    # torch 2.13.0's policy, whatever this machine's glibc: it installs wherever that torch does
    assert "manylinux_2_28_x86_64" in name.platform.split("."), name.platform
    assert too_recent_for(wheel, "manylinux_2_28") == []
    libs = scan_wheel(wheel)
    assert [lib.filename for lib in libs] == [f"lib{name.distribution}.so"]
    members = zipfile.ZipFile(wheel).namelist()
    assert not [m for m in members if ".libs/" in m or is_excluded(m.rsplit("/", 1)[-1])]
    assert f"{name.distribution}/_preload.py" in members
    return libs


def assert_verified(report: dict) -> None:
    assert report["passed"] is True
    for check in VERIFY_OK:
        assert report["verify"][check] == "ok", (check, report["verify"])
    assert report["verify"]["test_command"].startswith("ok (")
    assert report["verify"]["torch_ops"] == ["softmax_ext"]


def test_cpu_build(cpu_build):
    libs = assert_clean_manylinux(cpu_build.wheel)
    needed = set(libs[0].needed)
    assert {"libtorch_cpu.so", "libc10.so"} <= needed
    assert not [n for n in needed if "cud" in n]
    assert requires(cpu_build.wheel) == ["torch==2.13.0"]
    assert WheelName.parse(cpu_build.wheel.name).version.endswith("+pt2.13.0.cpu")
    assert_verified(cpu_build.report)
    assert cpu_build.report["plan"]["cuda"] is None
    (wheel_report,) = cpu_build.report["wheels"]
    assert wheel_report["name"] == cpu_build.wheel.name
    assert wheel_report["size"] == cpu_build.wheel.stat().st_size
    assert "libc10.so" in wheel_report["excluded"]
    md = (cpu_build.out / "report.md").read_text()
    assert cpu_build.wheel.name in md and "| test test_softmax_ext::test_cpp_runner | ok |" in md


def test_cuda_build(cuda_build):
    libs = assert_clean_manylinux(cuda_build.wheel)
    lib = libs[0]
    assert {"libcudnn.so.9", "libcudart.so.13", "libtorch_cuda.so", "libc10_cuda.so"} <= set(lib.needed)
    assert "$ORIGIN/../../nvidia/cudnn/lib" in lib.runpath and "$ORIGIN/../../torch/lib" in lib.runpath
    reqs = requires(cuda_build.wheel)
    cudnn = cuda_build.report["plan"]["cudnn_requirement"]
    assert reqs == ["torch==2.13.0", cudnn] and cudnn.startswith("nvidia-cudnn-cu13==")
    assert_verified(cuda_build.report)
    assert cuda_build.report["verify"]["torch"].endswith("+cu130")
    assert WheelName.parse(cuda_build.wheel.name).version.endswith("+pt2.13.0.cu130")
    # The op library holds device code (a cubin, kind 2) for the requested arch only.
    with zipfile.ZipFile(cuda_build.wheel) as zf:
        data = zf.read(lib.path)
    assert fatbin_archs(data) == {(2, 90)}


def test_cuda_wheel_preload_lists_what_it_links(cuda_build):
    """The generated preload covers cuDNN, cudart and torch, dependencies before dependants."""
    name = WheelName.parse(cuda_build.wheel.name)
    source = zipfile.ZipFile(cuda_build.wheel).read(f"{name.distribution}/_preload.py").decode()
    order = [line.split("'")[1] for line in source.splitlines() if line.startswith("    ('lib")]
    for lib in ("libcudnn.so.9", "libcudart.so.13", "libtorch_cuda.so", "libc10.so"):
        assert lib in order
    assert order.index("libc10.so") < order.index("libtorch_cpu.so") < order.index("libtorch_cuda.so")
    assert order.index("libcudart.so.13") < order.index("libc10_cuda.so")


def fatbin_archs(elf: bytes) -> set[tuple[int, int]]:
    """(kind, sm) of every entry in the .nv_fatbin section: kind 1 is PTX, 2 a cubin.

    Entry headers stay readable when the payload is compressed (-Xfatbin -compress-all):
    a 16-byte container header (magic 0xBA55ED50), then entries whose header holds the SM at +28.
    """
    import io
    import struct

    from elftools.elf.elffile import ELFFile

    section = ELFFile(io.BytesIO(elf)).get_section_by_name(".nv_fatbin")
    assert section is not None, "no device code in the library"
    data, found, off = section.data(), set(), 0
    while off < len(data):
        magic, _, header, size = struct.unpack_from("<IHHQ", data, off)
        assert magic == 0xBA55ED50
        entry, end = off + header, off + header + size
        while entry < end:
            kind, _, entry_header, padded = struct.unpack_from("<HHIQ", data, entry)
            found.add((kind, struct.unpack_from("<I", data, entry + 28)[0]))
            entry += entry_header + padded
        off = end
    return found


def one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("args, fragments", [
    (["--cuda", "9.9"], ["9.9", "11.8", "13.0"]),  # unknown: lists the supported versions
    (["--cuda", "11.8", "--torch", "2.13.0"], ["2.13.0", "11.8"]),  # torch not built for that CUDA
    (["--cuda", "13.0", "--arch-list", "5.0"], ["5.0"]),  # nvcc 13 rejects it: said before compiling
    (["--cpu", "--torch", "banana"], ["banana"]),
    (["--cpu", "--local-version", "a+b"], ["a+b"]),
    (["--cpu", "--torch", "2.13.1"], ["2.13.1", "2.13.0"]),  # no such torch release: said in the plan, not by pip
    (["--cpu", "--torch", "2.13.1", "--dry-run"], ["2.13.1"]),
    (["--cpu", "--local-version", "a_b", "--dry-run"], ["a_b"]),  # the dry run checks what the real run checks
    (["--cpu", "--local-version", "x\n", "--dry-run"], ["x\\n"]),
])
def test_bad_build_input(tmp_path, args, fragments):
    out = tmp_path / "out"
    one_line_error(run_stage("ci.build", "--engine", "host", *args, "-w", out), *fragments)
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.network
def test_no_nvcc_obtainable(tmp_path):
    """A CUDA version with no matching host nvcc and no nvcc wheel is one clear error."""
    from wheelci.errors import CiError
    from wheelci.compile.hostenv import BuildEnv, find_nvcc

    _proc.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "v"], check=True)
    site = tmp_path / "v" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    env = BuildEnv(tmp_path / "v", tmp_path / "v" / "bin" / "python", site, "2.13.0", "14.0", [])
    with pytest.raises(CiError, match=r"no nvcc obtainable for CUDA 14\.0: .* no nvcc wheel"):
        find_nvcc(env, "14.0", ())
    with pytest.raises(CiError, match=r"no nvcc obtainable for CUDA 13\.9: .*could not install"):
        find_nvcc(env, "13.9", ("nvidia-cuda-nvcc==13.9.999",), source="wheel")


def test_repair_rejects_bad_wheels(tmp_path):
    out = tmp_path / "out"
    text = tmp_path / "softmax_ext-0.1.0-py3-none-linux_x86_64.whl"
    text.write_text("not a zip")
    one_line_error(run_stage("ci.repair", text, "-w", out, "--torch", "2.13.0"), text.name)
    badname = tmp_path / "not-a-wheel.zip"
    badname.write_bytes(b"PK\x05\x06" + b"\0" * 18)
    one_line_error(run_stage("ci.repair", badname, "-w", out, "--torch", "2.13.0"), "not-a-wheel.zip")
    one_line_error(run_stage("ci.repair", tmp_path / "missing-1.0-py3-none-any.whl", "-w", out), "no such file")
    assert not out.exists() or not any(out.iterdir())


def test_repair_cli_on_built_wheel(cpu_build, tmp_path):
    """ci.repair alone, on an already repaired wheel: idempotent, declares torch, --json result."""
    proc = run_stage("ci.repair", cpu_build.wheel, "-w", tmp_path, "--torch", "2.13.0+cpu", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["grafted"] == [] and "libtorch_cpu.so" in result["excluded"]
    assert requires(Path(result["wheel"])) == ["torch==2.13.0"]


@pytest.mark.slow
@pytest.mark.network
def test_cuda_build_with_a_toolkit_from_wheels_only(tmp_path):
    """--nvcc wheel: nvcc, cicc, CCCL and cudart from NVIDIA's wheels, as on a machine with no CUDA
    install; a different arch than the other build, to see the arch list reach nvcc."""
    from wheelci.engine import detect

    out = tmp_path / "out"
    auto = detect() is None  # no container engine here: --engine auto (the default) falls back to the host
    engine = [] if auto else ["--engine", "host"]
    proc = run_stage("ci.build", *engine, "--cuda", "13.0", "--arch-list", "8.0", "--nvcc", "wheel",
                      "-w", out, "--work-dir", tmp_path / "work")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_declared(tmp_path / "work", out)  # a CUDA build's entries: each one wheelci.util.layout names
    if auto:
        assert "note: engine auto: no container engine responds; building CUDA 13.0 on the host" in proc.stderr
    cache = (tmp_path / "work" / "build" / "CMakeCache.txt").read_text()
    compiler = next(line.split("=", 1)[1] for line in cache.splitlines() if line.startswith("CMAKE_CUDA_COMPILER:"))
    assert "/site-packages/nvidia/" in str(Path(compiler).resolve())
    (wheel,) = out.glob("*.whl")
    lib = assert_clean_manylinux(wheel)[0]
    assert fatbin_archs(zipfile.ZipFile(wheel).read(lib.path)) == {(2, 80)}
    assert json.loads((out / "report.json").read_text())["passed"] is True


@pytest.mark.slow
@pytest.mark.network
def test_build_checks_and_splits_against_the_limit(tmp_path):
    """ci.build runs check and split after repair: with the op library alone over --limit, split
    refuses, naming it, and nothing reaches the output directory (torch-sized splits: test_split)."""
    out = tmp_path / "out"
    proc = run_stage("ci.build", "--engine", "host", "--cpu", "--limit", "20KB", "-w", out)
    assert proc.returncode == 2, proc.stderr
    assert "over the 20KB limit: splitting" in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
    lib = f"lib{project_name().replace('-', '_')}.so"
    assert len(errors) == 1 and lib in errors[0] and "no split can bring it under" in errors[0], proc.stderr
    assert not list(out.glob("*.whl"))


def test_cuda_root_is_keyed_complete_and_shared(tmp_path):
    """The CUDA root: nvcc's toolkit first, wheel headers and libraries merged, unversioned links
    added; built once per (nvcc, wheels) and handed whole to concurrent builds."""
    from concurrent.futures import ThreadPoolExecutor

    from wheelci.compile.hostenv import BuildEnv, assemble_cuda_root

    home = tmp_path / "toolkit"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime.h").write_text("// toolkit\n")
    site = tmp_path / "env" / "site"
    for pkg, header, lib in (("cu13", "cuda_runtime.h", "libcudart.so.13"), ("cudnn", "cudnn.h", "libcudnn.so.9")):
        (site / "nvidia" / pkg / "include").mkdir(parents=True)
        (site / "nvidia" / pkg / "include" / header).write_text(f"// {pkg}\n")
        (site / "nvidia" / pkg / "lib").mkdir()
        (site / "nvidia" / pkg / "lib" / lib).write_bytes(b"\x7fELF")
    env = BuildEnv(tmp_path / "env", tmp_path / "env" / "bin" / "python", site, "2.13.0", "13.0", [])
    with ThreadPoolExecutor(4) as pool:
        roots = set(pool.map(lambda _: assemble_cuda_root(env, home / "bin" / "nvcc"), range(8)))
    (root,) = roots
    assert (root / "include" / "cuda_runtime.h").read_text() == "// toolkit\n"  # nvcc's own wins
    assert (root / "include" / "cudnn.h").read_text() == "// cudnn\n"
    assert (root / "lib64" / "libcudnn.so").resolve() == (site / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9")
    assert (root / "lib" / "libcudart.so").resolve() == (site / "nvidia" / "cu13" / "lib" / "libcudart.so.13")
    assert not list(env.root.glob(".cuda-root-*"))  # the losers' temp trees are gone
    (site / "nvidia" / "nvvm").mkdir()  # the env changed: a new root
    assert assemble_cuda_root(env, home / "bin" / "nvcc") != root


def test_each_long_step_logs_one_line_with_its_duration(cpu_build):
    """Logs and CI get one line per step with its duration (a terminal also gets live progress)."""
    import re

    for step in (r"compiled in \d+ s", r"ci\.build: compile \(host\): \d+ s", r"built \S+\.whl",
                 r"ci\.build: verify: \d+ s", r"verify passed"):
        assert re.search(step, cpu_build.stderr), (step, cpu_build.stderr[-2000:])


def test_an_unreachable_index_of_the_users_is_one_error_never_another_source():
    """A build environment keyed for a private index was filled from pip's configured indexes when that
    index was unreachable: a torch from another source, under this index's key."""
    import socket

    from wheelci.compile.hostenv import TorchSpec, torch_pip_args
    from wheelci.errors import CiError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nobody answers there
    for cuda in (None, "13.0"):
        with pytest.raises(CiError) as e:
            torch_pip_args(TorchSpec("2.13.0", cuda, f"http://ci:cnryprivQ7z@127.0.0.1:{port}/simple", True))
        assert f"127.0.0.1:{port}/simple" in str(e.value) and "cnryprivQ7z" not in str(e.value)
        assert "\n" not in str(e.value)


def test_the_gpu_jobs_verify_step_says_no_gpu_ran_the_kernels(cuda_build, tmp_path):
    """The workflow's GPU job, its verify step as build.yml writes it, over the example's real CUDA wheel
    and the CUDA torch it was built against, on this machine without a GPU: --require-gpu fails, saying
    that no GPU ran its kernels, and the job fails with it (publishing waits for this job)."""
    from tests.test_workflow import load_yaml, run_step, step_script
    from wheelci.compile.hostenv import TorchSpec, ensure_env

    build = load_yaml(ROOT / ".github" / "workflows" / "build.yml")
    site = ensure_env(TorchSpec("2.13.0", "13.0", None, True)).site  # the build's own, cached
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "wheelci").write_text(f'#!/bin/bash\nexec {sys.executable} -m wheelci "$@"\n')
    (bin_dir / "wheelci").chmod(0o755)
    (tmp_path / "job" / "wheelhouse").mkdir(parents=True)
    shutil.copy(cuda_build.wheel, tmp_path / "job" / "wheelhouse")
    script = f"cd {tmp_path / 'job'}\n" + step_script(build, "gpu", "Verify with the GPU")
    r, _ = run_step(script, {"PATH": f"{bin_dir}:/usr/bin:/bin", "PROJECT": str(ROOT), "TORCH_SITE": str(site),
                             "HOME": os.environ.get("HOME", "/root")}, tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "require_gpu: FAILED: --require-gpu: no GPU ran its kernels (none: no CUDA device (torch for CUDA 13.0))" \
        in r.stdout, r.stdout
    assert "test_command: ok" in r.stdout  # everything else passed: the GPU is what is missing
