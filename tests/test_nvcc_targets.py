"""--arch-list is law: every nvcc call's device targets are the asked ones, whatever the project's flags name
(wheelci/resources/nvcc_targets.py), and the plan says which targets the wheel will hold."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from tests import _proc

from wheelci.compile import launch
from wheelci.native.fatbin import read_library, summary
from wheelci.resources import __file__ as resources_init

SCRIPT = Path(resources_init).parent / "nvcc_targets.py"
_spec = importlib.util.spec_from_file_location("nvcc_targets", SCRIPT)
assert _spec is not None and _spec.loader is not None
targets = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(targets)

# causal-conv1d 1.7.0's setup.py with CUDA 13.0: nine targets, and cpp_extension's own flags beside them
CAUSAL = ["nvcc", "-c", "csrc/causal_conv1d.cu", "-o", "x.o", "-O3", "-std=c++17",
          *(f"-gencode=arch=compute_{n},code=sm_{n}" for n in (75, 80, 87, 90, 100, 103, 110, 120, 121)),
          "--use_fast_math", "-Xcompiler", "-fPIC", "--threads", "4"]


def test_nine_hard_coded_targets_become_the_one_asked():
    out = targets.narrow(CAUSAL, "9.0")
    assert [a for a in out if "arch" in a] == ["-gencode=arch=compute_90,code=sm_90"]
    # everything else the project gave stays, in its order
    assert [a for a in out if "arch" not in a] == [a for a in CAUSAL if "arch" not in a]


@pytest.mark.parametrize("given, asked, want", [
    (["-arch=sm_80"], "9.0+PTX", ["-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_90,code=compute_90"]),
    (["-arch", "sm_80", "-code", "sm_80"], "8.0;9.0", ["-gencode=arch=compute_80,code=sm_80",
                                                        "-gencode=arch=compute_90,code=sm_90"]),
    (["--generate-code=arch=compute_80,code=[compute_80,sm_80]"], "8.6", ["-gencode=arch=compute_86,code=sm_86"]),
    (["-gencode", "arch=compute_90a,code=sm_90a"], "9.0", ["-gencode=arch=compute_90a,code=sm_90a"]),
    (["-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_90,code=sm_90"], "9.0",
     ["-gencode=arch=compute_90,code=sm_90"]),
    (["--gpu-architecture=native"], "12.0", ["-gencode=arch=compute_120,code=sm_120"]),
    (["-arch=all-major"], "10.0f", ["-gencode=arch=compute_100f,code=sm_100f"]),
])
def test_every_spelling_of_a_target_is_replaced(given, asked, want):
    assert targets.narrow(["nvcc", "-c", "a.cu", *given], asked) == ["nvcc", "-c", "a.cu", *want]


@pytest.mark.parametrize("call", [
    ["nvcc", "--version"],
    ["nvcc", "-shared", "a.o", "b.o", "-o", "lib.so", "-lcudart"],
    ["nvcc", "-c", "a.cu", "-Xcompiler", "-march=native", "-Xptxas", "-arch=sm_80"],  # other tools' flags
    ["ccache", "nvcc", "-c", "a.cu", "-ccbin", "/usr/bin/g++-arch"],
])
def test_a_call_naming_no_target_of_nvcc_runs_as_given(call):
    assert targets.narrow(call, "9.0") == call


def test_launchers_in_front_are_kept_and_narrowed_behind():
    out = targets.narrow(["ccache", "/cuda/bin/nvcc", "-c", "a.cu", "-arch=sm_75"], "9.0")
    assert out == ["ccache", "/cuda/bin/nvcc", "-c", "a.cu", "-gencode=arch=compute_90,code=sm_90"]


def test_a_bad_arch_list_is_refused_not_guessed():
    with pytest.raises(ValueError, match="not an arch list entry"):
        targets.narrow(CAUSAL, "sm_90")


def test_cmake_keeps_the_cache_launcher_behind_the_narrowing(tmp_path):
    put = launch.Launchers(config=["-C", "cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=/usr/bin/ccache",
                                   "-C", "cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=/usr/bin/ccache"])
    out = launch.narrowing("9.0", Path(sys.executable), put, {}, cmake=True, root=tmp_path / "cuda",
                           where=tmp_path / "t")
    assert out.config[:2] == put.config[:2]
    cuda = [v for v in out.config if "CMAKE_CUDA_COMPILER_LAUNCHER" in v]
    assert len(cuda) == 1
    script = Path(cuda[0].split("=", 1)[1]).read_text()
    assert str(SCRIPT) in script and " 9.0 -- /usr/bin/ccache " in script


def _root(tmp_path: Path, nvcc: str) -> Path:
    """A CUDA root shaped as a host build's (links to a toolkit)."""
    home = Path(nvcc).resolve().parent.parent
    root = tmp_path / "cuda-root"
    (root / "bin").mkdir(parents=True)
    for name in ("include", "lib64", "nvvm"):
        if (home / name).exists():
            (root / name).symlink_to(home / name)
    for entry in (home / "bin").iterdir():
        (root / "bin" / entry.name).symlink_to(entry)
    return root


def test_a_real_nvcc_compiles_only_the_asked_target(tmp_path):
    """Through the CUDA root a cpp_extension build gets: its nvcc is the narrowing one, the rest links."""
    nvcc = shutil.which("nvcc")
    assert nvcc is not None, "no nvcc on PATH: this machine kind has one (the CUDA 13.0 host builds use it)"
    root = _root(tmp_path, nvcc)
    environ = {"PATH": f"{root / 'bin'}:/usr/bin:/bin", "PYTORCH_NVCC": str(root / "bin" / "nvcc")}
    launch.narrowing("9.0", Path(sys.executable), launch.Launchers(), environ, cmake=False, root=root,
                     where=tmp_path / "t")
    view = Path(environ["CUDA_HOME"])
    assert environ["PATH"].split(":")[0] == str(view / "bin") and (view / "include").exists()
    assert environ["PYTORCH_NVCC"] == str(view / "bin" / "nvcc")
    (tmp_path / "k.cu").write_text("__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n")
    # the one-file-at-a-time path runs CUDA_HOME's nvcc, with the project's targets
    _proc.run([str(view / "bin" / "nvcc"), "-shared", "-Xcompiler", "-fPIC", "-o", str(tmp_path / "k.so"),
                    str(tmp_path / "k.cu"), "-gencode=arch=compute_75,code=sm_75",
                    "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_120,code=sm_120"],
                   check=True, env=environ, capture_output=True)
    with open(tmp_path / "k.so", "rb") as f:
        assert summary(read_library(f)) == (["sm_90"], [])


@pytest.mark.parametrize("mode", ["-ptx", "--cubin", "--options-file=opts.txt", "-optf"])
def test_a_single_target_output_or_an_options_file_runs_as_given(mode):
    """nvcc refuses several targets for a .ptx or a .cubin, and an options file's targets are not seen."""
    call = ["nvcc", mode, "-arch=sm_80", "a.cu"]
    assert targets.narrow(call, "8.0;9.0") == call


CMAKE_PROJECT = {
    "pyproject.toml": '[build-system]\nrequires = ["scikit-build-core>=0.10"]\nbuild-backend = "scikit_build_core.build"\n'
                      '[project]\nname = "archk"\nversion = "0.1"\n[tool.scikit-build]\nwheel.py-api = "py3"\n'
                      'wheel.packages = ["archk"]\n',
    # the project's own targets, hard-coded as bitsandbytes-style CMake projects do
    "CMakeLists.txt": 'cmake_minimum_required(VERSION 3.24)\nproject(archk LANGUAGES CXX CUDA)\n'
                      'set(CMAKE_CUDA_ARCHITECTURES 75 80 120)\nadd_library(k SHARED k.cu)\n'
                      'install(TARGETS k LIBRARY DESTINATION archk)\n',
    "k.cu": "__global__ void twice(float *x) { x[threadIdx.x] *= 2.0f; }\n"
            'extern "C" void launch(float *x) { twice<<<1, 32>>>(x); }\n',
    "archk/__init__.py": "",
}


@pytest.mark.slow
@pytest.mark.network
def test_a_cmake_project_with_hard_coded_architectures_gets_the_asked_one(tmp_path):
    """A CMake project that sets CMAKE_CUDA_ARCHITECTURES itself (75;80;120), built with --arch-list 9.0:
    its CUDA compiler launcher narrows every device compile, and the library holds sm_90 alone; with
    --keep-project-archs, its own three."""
    import zipfile

    from tests._wheels import run_stage

    project = tmp_path / "archk"
    for name, text in CMAKE_PROJECT.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    for keep, want in ((False, ["sm_90"]), (True, ["sm_120", "sm_75", "sm_80"])):
        work = tmp_path / f"work-{keep}"
        args = ["--keep-project-archs"] if keep else []
        r = run_stage("ci.build", project, "--cuda", "13.0", "--arch-list", "9.0", "--engine", "host", "--compile-only",
                      "--work-dir", work, "-w", tmp_path / f"out-{keep}", *args)
        assert r.returncode == 0, r.stderr[-3000:]
        (wheel,) = (work / "dist").glob("*.whl")
        with zipfile.ZipFile(wheel) as zf:
            (member,) = [n for n in zf.namelist() if n.endswith("libk.so")]
            library = tmp_path / f"libk-{keep}.so"
            library.write_bytes(zf.read(member))
        with open(library, "rb") as f:
            assert sorted(summary(read_library(f))[0]) == want, keep


# bitsandbytes-style: the CUDA library is built only when the project's own COMPUTE_BACKEND says cuda
BACKEND_PROJECT = {
    **{k: v.replace("archk", "backk") for k, v in CMAKE_PROJECT.items() if k != "CMakeLists.txt" and k != "archk/__init__.py"},
    "CMakeLists.txt": 'cmake_minimum_required(VERSION 3.24)\nproject(backk LANGUAGES CXX)\n'
                      'set(COMPUTE_BACKEND "cpu" CACHE STRING "The compute backend to use (cpu, cuda, hip, mps, xpu)")\n'
                      'if(COMPUTE_BACKEND STREQUAL "cuda")\n  enable_language(CUDA)\n  add_library(k SHARED k.cu)\n'
                      'else()\n  add_library(k SHARED k.cpp)\nendif()\ninstall(TARGETS k LIBRARY DESTINATION backk)\n',
    "k.cpp": 'extern "C" int twice(int x) { return 2 * x; }\n',
    "backk/__init__.py": "",
}


@pytest.mark.slow
@pytest.mark.network
def test_a_cmake_project_whose_option_chose_no_cuda_is_asked_and_built_with_it(tmp_path):
    """A --cuda build of a CMake project whose own option chooses its CPU library: its configure, asked
    (wheelci.compile.cmakeprobe), defines no CUDA target and stops before compiling; the option whose
    choices list cuda is set, and the library holds sm_90. Given by the user, the option stands and the
    build is refused in seconds, naming it, with nothing compiled."""
    import zipfile

    from tests._wheels import run_stage

    project = tmp_path / "backk"
    for name, text in BACKEND_PROJECT.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    args = ("--cuda", "13.0", "--arch-list", "9.0", "--engine", "host")
    r = run_stage("ci.build", project, *args, "--compile-only", "--work-dir", tmp_path / "work", "-w", tmp_path / "out")
    assert r.returncode == 0, r.stderr[-3000:]
    assert ('the build sets the project\'s option COMPUTE_BACKEND=cuda' in r.stderr
            and "CUDA targets k; device targets: 9.0" in r.stderr), r.stderr[-3000:]
    (wheel,) = (tmp_path / "work" / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (member,) = [n for n in zf.namelist() if n.endswith("libk.so")]
        library = tmp_path / "libk.so"
        library.write_bytes(zf.read(member))
    with open(library, "rb") as f:
        assert sorted(summary(read_library(f))[0]) == ["sm_90"]
    report = json.loads((tmp_path / "out" / "report.json").read_text())["probe"]["cmake"]
    assert report["set"] == {"COMPUTE_BACKEND": "cuda"} and report["languages"] == ["CUDA", "CXX"], report
    assert [(t["name"], t["cuda_sources"]) for t in report["targets"]] == [("k", 1)], report

    r = run_stage("ci.build", project, *args, "--env", "CMAKE_ARGS=-DCOMPUTE_BACKEND=cpu",
                  "--work-dir", tmp_path / "work-cpu", "-w", tmp_path / "out-cpu")
    assert r.returncode == 1, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert ("compiles no CUDA as configured" in last and "stopped before compiling" in last
            and 'COMPUTE_BACKEND=cpu ("The compute backend to use (cpu, cuda, hip, mps, xpu)")' in last
            and "FORCE_CUDA" not in last), last
    assert not list((tmp_path / "work-cpu" / "build").rglob("*.o")), "the refused build compiled something"
