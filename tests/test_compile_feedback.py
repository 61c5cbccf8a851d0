"""The compile step as a project and its user meet it: a CPU build sees no CUDA toolkit, a failed compile
names its likely cause, and a long compile shows it is alive (its log written as it goes, a count on a
terminal, a line at a set interval in CI while the compiler prints nothing).

The builds are real (`python -m build` in the cached CPU torch env, gcc, CMake and ninja); the projects
are written here, each built to show one thing: a setup.py that reaches for CUDA when it sees nvcc or
CUDA_HOME, as torchsort's does, and a CMake project whose first step waits until the test releases it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests._wheels import run_stage
from wheelci.compile import cmakeprobe, hints, progress
from wheelci.errors import CiError, Finding
from wheelci.util import log
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
WAIT = 300  # seconds a test waits for something it needs before it fails (a bound, never a timing)


# --- the likely cause, from real log lines -------------------------------------------------------

TORCH_NO_CUDA_HOME = ("  File \"/tmp/torch/utils/cpp_extension.py\", line 3302, in CUDAExtension\n"
                      "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.\n")


def _gcc_missing_header(tmp_path: Path, header: str, compiler: str = "gcc", suffix: str = ".c") -> str:
    """What a real compiler says of an #include it cannot open."""
    src = tmp_path / f"op{suffix}"
    src.write_text(f'#include "{header}"\nint f(void) {{ return 0; }}\n')
    r = _proc.run([compiler, "-c", str(src), "-o", str(tmp_path / "op.o")], capture_output=True, text=True,
                  cwd=tmp_path)
    assert r.returncode != 0
    return r.stdout + r.stderr


def test_a_missing_header_is_named_from_the_compilers_own_line(tmp_path):
    text = _gcc_missing_header(tmp_path, "cutlass/gemm/device/gemm.h")
    why = hints.hint("building 'ext._C' extension\n" + text + "error: command '/usr/bin/gcc' failed\n", cuda="13.0")
    assert why.startswith("the compiler found no cutlass/gemm/device/gemm.h: ")
    assert "submodule" in why  # cutlass is vendored, not the toolkit's
    assert "Python's development headers" in hints.hint(_gcc_missing_header(tmp_path, "Python.h"), cuda=None)
    cpu = hints.hint(_gcc_missing_header(tmp_path, "cuda_runtime.h"), cuda=None)
    assert cpu.startswith("the compiler found no cuda_runtime.h: a CUDA header in a CPU build") and "--cuda" in cpu
    assert "CUDA toolkit" in hints.hint(_gcc_missing_header(tmp_path, "cublas_v2.h"), cuda="12.8")


def test_nvcc_names_a_missing_header_too(tmp_path):
    nvcc = shutil.which("nvcc")
    assert nvcc is not None, "no nvcc on PATH: this machine kind has one (the CUDA 13.0 host builds use it)"
    text = _gcc_missing_header(tmp_path, "kernels/common.cuh", compiler=nvcc, suffix=".cu")
    assert hints.missing_header(text) == "kernels/common.cuh", text


@pytest.mark.parametrize("text, cuda, fragments", [
    (TORCH_NO_CUDA_HOME, None, ["a CUDA extension in a CPU build", "torch.version.cuda", "--cuda X.Y"]),
    (TORCH_NO_CUDA_HOME, "12.8", ["found no CUDA toolkit", "a CPU torch in the build environment"]),
    ("/bin/sh: 1: nvcc: not found\nerror: command 'nvcc' failed\n", None, ["runs nvcc in a CPU build"]),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/usr/local/cuda/bin/nvcc'\n", "13.0",
     ["nvcc is not where the build looks"]),
    ("No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'\nRuntimeError: no GPU, no kernels\n", "13.0",
     ["torch sees no GPU", "FORCE_CUDA=1"]),
])
def test_known_causes_are_named_for_the_build_they_broke(text, cuda, fragments):
    why = hints.hint(text, cuda=cuda)
    assert why is not None and all(f in why for f in fragments), why


def test_what_the_log_does_not_show_is_not_guessed():
    # every CUDA build on a GPU-less machine logs torch's note: beside a compiler error it is not the cause
    noise = "No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'\n"
    # (the compiler's own line is quoted, never torch's note)
    assert hints.hint(noise + "op.cpp:7:3: error: 'foo' was not declared in this scope\n", cuda="13.0") == \
        "the compiler's first error: op.cpp:7:3: error: 'foo' was not declared in this scope"
    assert hints.hint("ERROR Backend subprocess exited when trying to invoke build_wheel\n", cuda=None) is None
    classic = ("torch/extension.h:12:2: error: #error This file should not be included when either "
               "TORCH_STABLE_ONLY or TORCH_TARGET_VERSION is defined.\n")
    assert "port it to torch/csrc/stable" in hints.hint(classic, cuda=None, stable=True)
    assert "csrc/stable" not in hints.hint(classic, cuda=None, stable=False)  # not a stable build: not that refusal


# a CMakeCache.txt as a bitsandbytes-style configure leaves it: the project's options among CMake's own
CMAKE_CACHE = """# This is the CMakeCache file.
//The compute backend to use (cpu, cuda, hip, mps, xpu)
COMPUTE_BACKEND:STRING=cpu

//Build the benchmarks
BUILD_BENCH:BOOL=OFF

//Semicolon separated list of CUDA architectures
COMPUTE_CAPABILITY:STRING=

//CUDA architectures
CMAKE_CUDA_ARCHITECTURES:STRING=52

//Path to a program.
CMAKE_CUDA_COMPILER:FILEPATH=/usr/local/cuda/bin/nvcc

//The directory containing a CMake configuration file for Torch.
Torch_DIR:PATH=/site/torch/share/cmake/Torch

//Use GPU timers
USE_GPU_TIMERS:BOOL=ON
WITH_CUDA:BOOL=OFF

//token for the gpu backend
GPU_API_TOKEN:STRING=hf_SuperSecretValue123

CMAKE_CUDA_COMPILER_LOADED:INTERNAL=1
"""


def test_a_cmake_project_without_device_code_is_told_its_own_options():
    """bitsandbytes' CUDA build with nothing compiled was told of setup.py switches: its option is
    COMPUTE_BACKEND=cuda, which its CMake cache names and describes."""
    options = cmakeprobe.cmake_cuda_options(CMAKE_CACHE)
    assert options == ['COMPUTE_BACKEND=cpu ("The compute backend to use (cpu, cuda, hip, mps, xpu)")',
                       'COMPUTE_CAPABILITY= ("Semicolon separated list of CUDA architectures")',
                       'WITH_CUDA=OFF', 'USE_GPU_TIMERS=ON ("Use GPU timers")',
                       'GPU_API_TOKEN=*** ("token for the gpu backend")']
    said = hints.no_device_code("k-0.1-py3-none-linux_x86_64.whl", "13.0", True, CMAKE_CACHE)
    assert "COMPUTE_BACKEND=cpu" in said and "--env CMAKE_ARGS=-DNAME=VALUE" in said and "FORCE_CUDA" not in said
    assert "hf_SuperSecretValue123" not in said
    assert "its CMakeLists.txt names it" in hints.no_device_code("k.whl", "13.0", True, None)
    assert "--env FORCE_CUDA=1" in hints.no_device_code("k.whl", "13.0", False, None)
    assert cmakeprobe.cmake_cuda_options("") == [] and cmakeprobe.cmake_cuda_options("//x\nA:BOOL") == []
    # a megabyte of help lines that no entry follows: one pass (a pattern over the runs took minutes)
    for run in ("//\n", "//x\n", "// cuda backend\n"):
        assert cmakeprobe.cmake_cuda_options(run * (cmakeprobe.CACHE_MAX // len(run))) == []


def test_a_build_tools_count_is_read_from_its_own_lines():
    assert progress.read(b"[3/12] Building CXX object CMakeFiles/_C.dir/csrc/op.cpp.o\n") == progress.Count(3, 12, "files")
    assert progress.read(b"[0/2] Generating gen.c\n") == progress.Count(0, 2, "files")
    assert progress.read(b"[ 42%] Building CXX object CMakeFiles/_C.dir/op.cpp.o\n") == progress.Count(42, 100, "%")
    assert progress.read(b"[100%] Linking CXX shared module _C.so\n") == progress.Count(100, 100, "%")
    for other in (b"[INFO] compiling\n", b"c++ -c [1/2].cpp\n", b"\n", b"[1/2]\n", b"building 'x._C' extension\n",
                  # a number no build tool counts to: past int()'s digit limit, or one the estimate overflows on
                  b"[" + b"1" * 5000 + b"/2] x\n", b"[1/" + b"9" * 400 + b"] a\n", b"[" + b"9" * 4 + b"%] a\n"):
        assert progress.read(other) is None, other
    # setuptools without ninja: each compiler run it prints is a file compiled, with no total
    gcc = (b"x86_64-linux-gnu-gcc -Wno-unused-result -fPIC -I/usr/include/python3.11 -c csrc/tiny.cpp "
           b"-o build/temp.linux-x86_64-cpython-311/csrc/tiny.o -std=c++17\n")
    nvcc = b"/usr/local/cuda-13.0/bin/nvcc -I/x/include -c csrc/tiny_cuda.cu -o build/t/tiny_cuda.o --use_fast_math\n"
    first = progress.read(gcc)
    assert first == progress.Count(1, None, "compiled")
    assert progress.read(nvcc, first) == progress.Count(2, None, "compiled")
    assert progress.read(b"g++ -shared build/t/tiny.o -o build/lib/_C.so\n", first) is None  # a link, no source
    # a line of `-c`s (under the length a line is read at) is read in one pass, not quadratically
    for line in (b"gcc " + b" -c" * 2700, b"gcc -x " + b"-c " * 2700 + b"a.cu"):
        assert progress.read(line) in (None, progress.Count(1, None, "compiled"))
    assert progress.read(b"gcc -x " + b"-c " * 2700 + b"a.cu") == progress.Count(1, None, "compiled")


def test_the_time_left_is_projected_at_the_pace_since_the_first_count():
    c = progress.Count
    assert progress.estimate((100.0, c(0, 12, "files")), (160.0, c(3, 12, "files"))) == 180.0  # 20 s a file, 9 to go
    assert progress.estimate((100.0, c(3, 12, "files")), (100.0, c(3, 12, "files"))) is None  # no pace yet
    assert progress.estimate((0.0, c(1, None, "compiled")), (9.0, c(4, None, "compiled"))) is None  # no total
    assert progress.estimate((0.0, c(0, 2, "files")), (5.0, c(2, 2, "files"))) is None  # done
    assert progress.estimate((0.0, c(10, 100, "%")), (60.0, c(40, 100, "%"))) == 120.0
    assert progress.describe(c(3, 12, "files"), 540.0) == "3 of 12 files, about 9 min 0 s left"
    assert progress.describe(c(42, 100, "%"), None) == "42% of the steps"
    assert progress.describe(c(1, None, "compiled"), None) == "1 file compiled"
    assert progress.describe(c(3, 12, "files"), -5.0) == "3 of 12 files, past the estimate"


def test_a_tracker_says_the_status_at_any_moment():
    now = [0.0]
    tracker = progress.Tracker(clock=lambda: now[0])
    assert tracker() == "" and not tracker.feed(b"-- Configuring done\n")
    now[0] = 30.0  # a configure's time is not the compile's pace
    assert tracker.feed(b"[0/4] Building CXX object a.o\n")
    now[0] = 90.0
    assert tracker.feed(b"[2/4] Building CXX object b.o\n")
    assert tracker() == "2 of 4 files, about 1 min 0 s left"
    now[0] = 110.0  # the timer's line a while later: the estimate counts down
    assert tracker() == "2 of 4 files, about 40 s left"


# --- the ticker: a terminal's status line, CI's heartbeat ----------------------------------------

@pytest.fixture
def voice(monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv(log.HEARTBEAT, raising=False)
    monkeypatch.setattr(log, "_voice", "ci.test")


def test_a_terminal_gets_one_status_line_redrawn_and_cleared(voice, capsys):
    with log.Ticker("compiling", terminal=True) as ticker:
        tracker = progress.Tracker()
        ticker.update(tracker if tracker.feed(b"[12/40] Building CXX object op.cpp.o\n") else None)
        ticker.update(None)  # a line with no count changes nothing
    err = capsys.readouterr().err
    assert re.search(r"\rcompiling, \d+ s, 12 of 40 files\033\[K", err) and err.endswith("\r\033[K"), repr(err)
    assert "\n" not in err  # the line is redrawn in place, never added to


def test_ci_gets_a_line_every_interval_while_nothing_is_printed(voice, capsys):
    err = ""
    ticker = log.Ticker("compiling", terminal=False, interval=0.01)
    ticker.update("3/40 steps")  # before its timer starts: every line it says has the count
    with ticker:
        deadline = time.monotonic() + WAIT
        while err.count("\n") < 3 and time.monotonic() < deadline:  # the step itself says nothing meanwhile
            time.sleep(0.01)
            err += capsys.readouterr().err
    lines = (err + capsys.readouterr().err).splitlines()
    assert len(lines) >= 3, lines
    assert all(re.fullmatch(r"ci\.test: compiling, \d+ s, 3/40 steps", ln) for ln in lines), lines


def test_the_heartbeat_interval_is_set_or_refused(voice, monkeypatch):
    assert log.heartbeat_seconds() == 60
    monkeypatch.setenv(log.HEARTBEAT, "0.5")
    assert log.heartbeat_seconds() == 0.5
    for bad in ("soon", "0", "-1", "nan", "inf"):
        monkeypatch.setenv(log.HEARTBEAT, bad)
        with pytest.raises(CiError, match=rf"^{log.HEARTBEAT}='{bad}': not a number of seconds above 0$"):
            log.heartbeat_seconds()
    assert [log.duration(s) for s in (0, 59.9, 60, 185, 3725)] == ["0 s", "59 s", "1 min 0 s", "3 min 5 s", "1 h 2 min"]


# --- a CPU build sees no CUDA toolkit ------------------------------------------------------------

# torchsort's rule (FACTS.md), made to fail loudly: a CUDA extension whenever nvcc runs or a toolkit is named,
# which under a CPU torch is cpp_extension's "CUDA_HOME environment variable is not set"
SETUP_PY = '''\
import os
import shutil

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

seen = {"nvcc": shutil.which("nvcc"), **{v: os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH", "CUDACXX")}}
print("toolkit seen by setup.py:", seen, flush=True)
if any(seen.values()) or os.environ.get("FORCE_CUDA") == "1":
    ext = CUDAExtension("nvcc_probe._C", ["op.cpp", "op_cuda.cu"])
else:
    ext = CppExtension("nvcc_probe._C", ["op.cpp"])
setup(name="nvcc-probe", version="0.1.0", packages=["nvcc_probe"], ext_modules=[ext],
      cmdclass={"build_ext": BuildExtension})
'''
OP_CPP = '''\
#include <Python.h>
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&mod); }
'''


def nvcc_probe_project(root: Path) -> Path:
    (root / "nvcc_probe").mkdir(parents=True)
    (root / "nvcc_probe" / "__init__.py").write_text("")
    (root / "setup.py").write_text(SETUP_PY)
    (root / "op.cpp").write_text(OP_CPP)
    (root / "op_cuda.cu").write_text("__global__ void k() {}\n")
    (root / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=64", "torch"]\n'
                                         'build-backend = "setuptools.build_meta"\n')
    return root


@pytest.fixture
def cuda_on_path(tmp_path, monkeypatch) -> Path:
    """This machine as a CUDA developer's: a toolkit's bin on PATH (with an nvcc and another tool of the
    same directory) and the variables naming it."""
    bin_dir = tmp_path / "toolkit" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("nvcc", "toolkit-probe"):
        (bin_dir / tool).write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0'\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDACXX"):
        monkeypatch.setenv(var, str(bin_dir.parent) if var != "CUDACXX" else str(bin_dir / "nvcc"))
    return bin_dir


def test_a_cpu_environment_keeps_every_tool_but_nvcc(cuda_on_path, tmp_path):
    from wheelci.compile.hostenv import cpu_environ
    from wheelci.engine import nvcc_dirs
    from wheelci.plan import cpu_view

    view = cpu_view(os.environ, False, nvcc_dirs(os.environ))
    assert str(cuda_on_path) in view.nvcc_dirs and view.unset == ["CUDA_HOME", "CUDA_PATH", "CUDACXX"]
    env = cpu_environ({**os.environ, "CUDAToolkit_ROOT": "/x", "KEEP": "1"}, view.nvcc_dirs, tmp_path / "view")
    assert shutil.which("nvcc", path=env["PATH"]) is None
    probe = "toolkit-probe"  # a tool this test made beside the fake nvcc, not one the machine installs
    assert shutil.which(probe, path=env["PATH"]) is not None  # the same directory's other tools stay
    assert shutil.which("sh", path=env["PATH"]) is not None
    assert env["KEEP"] == "1" and not {"CUDA_HOME", "CUDA_PATH", "CUDACXX", "CUDAToolkit_ROOT"} & set(env)
    # a reused work directory: the view is made again, from what the directory holds now
    (cuda_on_path / probe).unlink()
    env = cpu_environ(dict(os.environ), view.nvcc_dirs, tmp_path / "view")
    assert shutil.which(probe, path=env["PATH"]) is None and shutil.which("nvcc", path=env["PATH"]) is None


def test_the_plan_states_what_a_cpu_host_build_hides(cuda_on_path, tmp_path):
    project = nvcc_probe_project(tmp_path / "p")
    r = run_stage("ci.build", "--cpu", "--engine", "host", "--dry-run", project)
    assert r.returncode == 0, r.stderr
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith("toolchain"))
    assert f"PATH's {cuda_on_path} seen without nvcc" in row and "CUDA_HOME, CUDA_PATH, CUDACXX unset" in row
    r = run_stage("ci.build", "--cpu", "--engine", "host", "--dry-run", "--json", project)
    view = json.loads(r.stdout)["cpu_view"]
    assert str(cuda_on_path) in view["nvcc_dirs"] and view["unset"] == ["CUDA_HOME", "CUDA_PATH", "CUDACXX"]
    # a container's image has no toolkit to hide, and a CUDA build wants it
    for args in (["--cpu", "--engine", "docker"], ["--cuda", "13.0", "--engine", "host"]):
        r = run_stage("ci.build", *args, "--dry-run", "--json", project)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["cpu_view"] is None
        assert "toolchain" not in run_stage("ci.build", *args, "--dry-run", project).stdout


@pytest.fixture(scope="module")
def cpu_env():
    """The cached CPU torch build env (ci.compile.hostenv), as host builds use it."""
    from wheelci.compile.hostenv import TorchSpec, ensure_env
    from wheelci.config import matrix

    return ensure_env(TorchSpec(matrix.load().default_torch, None, matrix.load().cpu_index_url, False))


@pytest.mark.slow
@pytest.mark.network  # the CPU torch build env, on a cold machine
def test_the_probe_project_fails_where_it_sees_a_toolkit(cuda_on_path, tmp_path, cpu_env):
    """What the CPU view is for: the same project, built as it stands, fails on this machine as torchsort
    does, and the log's cause is named."""
    project = nvcc_probe_project(tmp_path / "p")
    r = _proc.run([cpu_env.python, "-m", "build", "--no-isolation", "--wheel", "-o", tmp_path / "dist", project],
                  capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert r.returncode != 0 and "CUDA_HOME environment variable is not set" in r.stdout + r.stderr
    assert "a CUDA extension in a CPU build" in hints.hint(r.stdout + r.stderr, cuda=None)


def _cpu_plan(project: Path, build_env: dict[str, str] | None = None):
    from wheelci.engine import detect_facts
    from wheelci.plan import Request, RunSettings, make_plan

    return make_plan(Request(engine="host"), project_dir=project, run=RunSettings(build_env=build_env or {}),
                     env=os.environ, facts=detect_facts(os.environ, engine="host", cuda=None))


@pytest.mark.slow
@pytest.mark.network  # the CPU torch build env, on a cold machine
def test_a_cpu_host_build_of_it_compiles_its_cpu_part(cuda_on_path, tmp_path, cpu_env, capfd):
    from wheelci.compile.host import compile_host

    project = nvcc_probe_project(tmp_path / "p")
    result = compile_host(_cpu_plan(project), project, tmp_path / "work")
    assert result.wheel.name.startswith("nvcc_probe-0.1.0-")
    text = (tmp_path / "work" / "compile.log").read_text()
    assert "toolkit seen by setup.py: {'nvcc': None, 'CUDA_HOME': None, 'CUDA_PATH': None, 'CUDACXX': None}" in text
    assert f"toolchain: CPU only: PATH's {cuda_on_path} seen without nvcc" in capfd.readouterr().err


@pytest.mark.slow
@pytest.mark.network  # the CPU torch build env, on a cold machine
def test_a_cpu_build_that_insists_on_cuda_fails_with_the_cause_named(cuda_on_path, tmp_path, cpu_env, capfd):
    from wheelci.compile.host import compile_host

    project = nvcc_probe_project(tmp_path / "p")
    with pytest.raises(Finding) as e:
        compile_host(_cpu_plan(project, {"FORCE_CUDA": "1"}), project, tmp_path / "work")
    # refused before any compile (the project asked first: wheelci.compile.probe), with the same cause
    assert re.fullmatch(r"a CPU build of this project cannot run: its setup.py stops before any compile under torch "
                        r"2\.13\.0: OSError: CUDA_HOME environment variable is not set.*; the project builds a CUDA "
                        r"extension in a CPU build \(.*\): add the CUDA extension only under a CUDA torch "
                        r"\(torch\.version\.cuda\), or build with --cuda X\.Y", str(e.value)), str(e.value)
    assert not (tmp_path / "work" / "dist").exists() or not any((tmp_path / "work" / "dist").iterdir())


# --- a long compile shows it is alive --------------------------------------------------------------

# The first build step waits for the test's release file, saying so once (through the console pool ninja
# prints it at once), then generates a source that includes a header nobody has: the compile fails after.
# In a container the release file is in the ccache directory, which the container build mounts.
WAIT_PY = '''\
import os, sys, time
release = os.environ.get("SLOW_RELEASE") or os.path.join(os.environ["CCACHE_DIR"], "slow-release")
print("slow step: waiting for the test", flush=True)
deadline = time.monotonic() + {wait}
while not os.path.exists(release):
    if time.monotonic() > deadline:
        sys.exit("slow step: never released")
    time.sleep(0.05)
open(sys.argv[1], "w").write('#include "slow_missing.h"\\nint slow(void) {{ return 1; }}\\n')
'''
CMAKE = '''\
cmake_minimum_required(VERSION 3.18)
project(slow_ext LANGUAGES C)
find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)
include(CheckLanguage)
check_language(CUDA)
find_package(CUDAToolkit QUIET)
message(STATUS "slow: CUDA compiler '${CMAKE_CUDA_COMPILER}', CUDAToolkit found '${CUDAToolkit_FOUND}'")
add_custom_command(OUTPUT gen.c COMMAND ${Python_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/wait.py gen.c USES_TERMINAL)
python_add_library(_slow MODULE gen.c WITH_SOABI)
install(TARGETS _slow DESTINATION slow_ext)
'''


def slow_project(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "wait.py").write_text(WAIT_PY.format(wait=WAIT))
    (root / "CMakeLists.txt").write_text(CMAKE)
    (root / "pyproject.toml").write_text('[build-system]\nrequires = ["scikit-build-core"]\n'
                                         'build-backend = "scikit_build_core.build"\n\n'
                                         '[project]\nname = "slow-ext"\nversion = "0.1.0"\n')
    return root


class Lines:
    """A stream's lines as they come, read by a thread of their own."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        with stream:
            for line in stream:
                self.lines.append(line)

    def join(self) -> str:
        self._thread.join()
        return "".join(self.lines)

    def wait_for(self, predicate, what: str, running: subprocess.Popen) -> None:
        deadline = time.monotonic() + WAIT
        while not predicate():
            assert running.poll() is None, f"the build ended before {what}: {''.join(self.lines)[-3000:]}"
            assert time.monotonic() < deadline, f"no {what} in {WAIT} s: {''.join(self.lines)[-3000:]}"
            time.sleep(0.05)


def watch_slow_build(args: list, env: dict[str, str], logfile: Path, release: Path, doing: str) -> str:
    """Run `ci.build ARGS` on the slow project with stderr a pipe (logs and CI) and a short heartbeat:
    while its first step waits, the log must hold that step's line and the ticker must keep beating
    (`doing, N s[, count]`); then release it, and return stderr once the build has ended (it fails)."""
    env = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "ci" / "src")]), log.HEARTBEAT: "0.2"}
    env.pop("GITHUB_ACTIONS", None)
    building = subprocess.Popen([sys.executable, "-m", "ci.build", *map(str, args)], cwd=ROOT, env=env, text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = Lines(building.stderr)

    def beats() -> list[str]:  # the stage's voice, then the ticker's status
        return [ln for ln in err.lines if re.fullmatch(rf"[\w. ]+: {doing}, \d+[^,]*(, .*)?\n", ln)]

    try:
        # the build log holds the waiting step's line while the build still runs
        err.wait_for(lambda: logfile.is_file() and "slow step: waiting" in logfile.read_text(errors="replace"),
                     "line in the log", building)
        seen = len(beats())
        # the step prints nothing more until released: the lines that still come are the timer's
        err.wait_for(lambda: len(beats()) >= seen + 2, "heartbeat while the compiler is silent", building)
        assert building.poll() is None
        assert re.search(r", 0 of [1-9]\d* files$", beats()[-1]), beats()[-1]  # ninja's count: none done, one running
    finally:
        release.touch()
        building.wait(timeout=WAIT)
    stderr = err.join()
    assert building.returncode == 1, stderr[-3000:]
    return stderr


@pytest.mark.slow
@pytest.mark.network  # the CPU torch build env, on a cold machine
def test_a_long_compile_is_logged_as_it_goes_and_beats_in_ci(tmp_path, cpu_env):
    project, work, release = slow_project(tmp_path / "slow"), tmp_path / "work", tmp_path / "release"
    stderr = watch_slow_build(["--cpu", "--engine", "host", "--work-dir", work, "-w", tmp_path / "out", project],
                              {**os.environ, "SLOW_RELEASE": str(release)}, work / "compile.log", release, "compiling")
    assert "the compiler found no slow_missing.h: install what provides it" in stderr.splitlines()[-1], stderr[-3000:]
    text = (work / "compile.log").read_text()
    assert "slow_missing.h: No such file or directory" in text
    # a CPU build's CMake finds no CUDA, though this machine's /usr/local/cuda may hold one
    assert "toolchain: CPU only: " in stderr and "CMake's find_package(CUDAToolkit) off" in stderr
    assert "slow: CUDA compiler 'NOTFOUND', CUDAToolkit found ''" in text, text[-3000:]


@pytest.mark.container
def test_a_container_build_is_logged_as_it_goes_beats_and_says_why_it_failed(engines, torch_cpu_wheel, tmp_path):
    """The same through cibuildwheel in Docker (the suite's stand-in image; torch from a mounted wheel)."""
    from tests import _standin

    if engines.why_not.get("docker"):
        pytest.fail(f"docker should run on this machine but does not: {engines.why_not['docker']}")
    project, work, ccache = slow_project(tmp_path / "slow"), tmp_path / "work", tmp_path / "ccache"
    ccache.mkdir()
    args = ["--cpu", "--engine", "docker", "--image", _standin.ensure_image("docker"), "--find-links",
            torch_cpu_wheel.parent, "--work-dir", work, "-w", tmp_path / "out", project]
    stderr = watch_slow_build(args, {**os.environ, "CCACHE_DIR": str(ccache)}, work / "cibuildwheel.log",
                              ccache / "slow-release", "building in a container")
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("python -m ci.build: error:")]
    assert "cibuildwheel failed with exit status" in line and "the compiler found no slow_missing.h" in line, line


def test_a_plain_compiler_error_is_named_from_above_the_traceback():
    """The log's tail is the build tool's traceback; the compiler's own error sits far above it."""
    from wheelci.compile.hints import hint

    log = ("running build_ext\n[1/2] c++ -c tiny.cpp\nFAILED: tiny.o\n"
           "/tmp/x/csrc/tiny.cpp:11:17: error: stray '@' in program\n   11 | this is not C++ @@@ ;\n"
           + "Traceback (most recent call last):\n  File \"setup.py\", line 3\n" * 20
           + "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.\n")
    assert hint(log, cuda=None) == "the compiler's first error: /tmp/x/csrc/tiny.cpp:11:17: error: stray '@' in program"
    assert hint("Traceback (most recent call last):\nOSError: boom\n", cuda=None) is None
