"""A CMake project's configure asked what it builds (wheelci.compile.cmakeprobe): the question, the real
CMake answering it, and what the build makes of the answers. The build itself is in test_nvcc_targets.py
(a bitsandbytes-style project, heavy tier)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace
from importlib.resources import files
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tests import _proc
from wheelci import plan as pl
from wheelci.compile import cmakeprobe
from wheelci.compile.cmakeprobe import Configured, Target

ROOT = Path(__file__).resolve().parent.parent
PROBE = Path(str(files("wheelci.resources") / "cmake_probe" / "probe.cmake"))
CMAKE = shutil.which("cmake", path=str(Path(sys.executable).parent)) or shutil.which("cmake")

# a project whose CUDA part is one option away, in a subdirectory with a project() of its own: the question
# is put once however many project() calls include it, and every directory's targets are answered
PROJECT = {
    "CMakeLists.txt": 'cmake_minimum_required(VERSION 3.18)\nproject(backk LANGUAGES CXX)\n'
                      'set(COMPUTE_BACKEND "cpu" CACHE STRING "The compute backend to use")\n'
                      'set_property(CACHE COMPUTE_BACKEND PROPERTY STRINGS cpu cuda hip)\n'
                      'option(BUILD_BENCH "Build the benchmarks" OFF)\n'
                      'add_library(k SHARED k.cpp)\nadd_subdirectory(sub)\n',
    "k.cpp": 'extern "C" int twice(int x) { return 2 * x; }\n',
    "sub/CMakeLists.txt": "project(inner LANGUAGES CXX)\nadd_library(inner STATIC inner.cpp)\n"
                          "add_library(headers INTERFACE)\n",
    "sub/inner.cpp": "int inner() { return 1; }\n",
}


def configure(tmp: Path, needs_cuda: bool, *defines: str) -> tuple[subprocess.CompletedProcess, Configured | None]:
    if CMAKE is None:
        pytest.fail("no cmake: requirements-dev.txt installs it into .venv")
    for name, text in PROJECT.items():
        (tmp / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "src" / name).write_text(text)
    answers = tmp / "answers.txt"
    r = _proc.run([CMAKE, "-S", tmp / "src", "-B", tmp / "build", f"-DCMAKE_PROJECT_INCLUDE={PROBE}",
                   f"-Dwheelci_probe_answers={answers}", f"-Dwheelci_probe_needs_cuda={'ON' if needs_cuda else 'OFF'}",
                   *defines], capture_output=True, text=True, timeout=300)
    return r, cmakeprobe.Asking([], answers).read()


def test_the_configure_answers_every_target_and_goes_on_when_no_cuda_is_needed(tmp_path):
    r, said = configure(tmp_path, needs_cuda=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert said is not None and said.languages == ("CXX",)
    assert [(t.name, t.kind, t.cuda_sources) for t in said.targets] == [
        ("k", "SHARED_LIBRARY", 0), ("inner", "STATIC_LIBRARY", 0)]  # the interface library builds nothing
    assert not said.cuda_targets
    assert (tmp_path / "build" / "Makefile").is_file() or (tmp_path / "build" / "build.ninja").is_file()
    # read once: the file is gone, so a run that does not answer is never read as this one
    assert not (tmp_path / "answers.txt").exists()


def test_a_cuda_build_of_no_cuda_target_stops_at_the_end_of_its_configure(tmp_path):
    r, said = configure(tmp_path, needs_cuda=True)
    assert r.returncode != 0 and cmakeprobe.STOPPED in r.stdout + r.stderr
    assert said is not None and not said.cuda_targets  # answered before it stopped
    generated = tmp_path / "build"
    assert not (generated / "Makefile").exists() and not (generated / "build.ninja").exists()  # nothing to compile
    cache = cmakeprobe.cache_text(generated)
    assert cache is not None  # what the stopped configure left names the option, and its choices
    (backend,) = [e for e in cmakeprobe.project_options(cache) if e.name == "COMPUTE_BACKEND"]
    assert backend.choices == ("cpu", "cuda", "hip") and backend.value == "cpu"
    setting = cmakeprobe.cuda_setting(cache, set())
    assert setting is not None and (setting[0].name, setting[1]) == ("COMPUTE_BACKEND", "cuda")
    assert cmakeprobe.cuda_setting(cache, {"COMPUTE_BACKEND"}) is None  # the user's own definition stands


def test_without_the_answers_file_named_the_include_does_nothing(tmp_path):
    """A tree configured with the question once and then without it (a kept tree, another tool): no file,
    no stop."""
    if CMAKE is None:
        pytest.fail("no cmake")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.18)\nproject(p NONE)\n")
    r = _proc.run([CMAKE, "-S", tmp_path / "src", "-B", tmp_path / "b", f"-DCMAKE_PROJECT_INCLUDE={PROBE}",
                   "-Dwheelci_probe_needs_cuda=ON"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


CACHE = """//The compute backend to use (cpu, cuda, hip, mps, xpu)
COMPUTE_BACKEND:STRING=cpu
//Build the benchmarks
BUILD_BENCH:BOOL=OFF
MYLIB_USE_CUDA:BOOL=OFF
//token for the gpu backend
GPU_API_TOKEN:STRING=hf_SuperSecretValue123
SKBUILD:INTERNAL=2
SKBUILD_PROJECT_NAME:STRING=backk
CMAKE_CUDA_ARCHITECTURES:STRING=52
wheelci_probe_needs_cuda:UNINITIALIZED=ON
"""


def test_only_an_option_whose_meaning_cuda_makes_certain_is_set():
    # two of them (a backend choice listed in its help, a USE_CUDA switch): not certain which, none set
    assert cmakeprobe.cuda_setting(CACHE, set()) is None
    one, value = cmakeprobe.cuda_setting(CACHE, {"MYLIB_USE_CUDA"}) or (None, None)
    assert one is not None and (one.name, value) == ("COMPUTE_BACKEND", "cuda")
    switch, value = cmakeprobe.cuda_setting(CACHE, {"COMPUTE_BACKEND"}) or (None, None)
    assert switch is not None and (switch.name, value) == ("MYLIB_USE_CUDA", "ON")
    # already on, a choice that does not list cuda, a name that only mentions CUDA: nothing to set
    assert cmakeprobe.cuda_setting("WITH_CUDA:BOOL=ON\n", set()) is None
    assert cmakeprobe.cuda_setting("//The backend (cpu, hip)\nBACKEND:STRING=cpu\n", set()) is None
    assert cmakeprobe.cuda_setting("CUDA_TIMERS:BOOL=OFF\n", set()) is None
    assert cmakeprobe.cuda_setting("//The backend (cpu, cuda)\nBACKEND:STRING=rocm-6\n", set()) is None  # not a choice
    # CMake's, scikit-build-core's and the question's own entries are not the project's options
    assert [e.name for e in cmakeprobe.project_options(CACHE)] == [
        "COMPUTE_BACKEND", "BUILD_BENCH", "MYLIB_USE_CUDA", "GPU_API_TOKEN"]


def test_the_users_definitions_are_read_from_every_variable_that_carries_them():
    env = {"CMAKE_ARGS": "-DA=1 -D B:BOOL=ON '-DC=two words' -G Ninja", "SKBUILD_CMAKE_ARGS": "-DD=1;-DE=2",
           "SKBUILD_CMAKE_DEFINE": "F=1;G:BOOL=ON"}
    assert cmakeprobe.user_defines(env) == {"A", "B", "C", "D", "E", "F", "G"}
    assert cmakeprobe.user_defines({"CMAKE_ARGS": "-DA='unbalanced"}) == {"A"}  # not a shell's words: still read
    assert cmakeprobe.user_defines({"CMAKE_ARGS": "-D"}) == set()


def _plan(cuda: str | None = "13.0", narrowed: bool = True) -> pl.Plan:
    """A host plan of the repository's example (the plan's own fields are what the notes read)."""
    plan = pl.make_plan(pl.Request(cuda=cuda, engine="host", arch_list="9.0" if cuda else None), project_dir=ROOT)
    return replace(plan, narrowed=narrowed and cuda is not None)


def test_what_the_plan_says_of_the_answers_and_the_refusal(tmp_path):
    said = Configured(("CUDA", "CXX"), (Target("k", "SHARED_LIBRARY", 0, ("75",)),
                                        Target("kc", "MODULE_LIBRARY", 2, ("80", "120-real"))))
    assert [t.name for t in said.cuda_targets] == ["kc"]
    assert cmakeprobe.notes(said, _plan()) == ["CUDA targets kc; device targets: 9.0 (the configure's 120-real;80 replaced)"]
    assert cmakeprobe.notes(said, _plan(narrowed=False)) == [
        "CUDA targets kc; device targets: 120-real;80 (their CUDA_ARCHITECTURES)"]
    assert cmakeprobe.notes(said, _plan(cuda=None)) == []
    flags = Configured(("CUDA", "CXX"), (Target("softmax_ext", "SHARED_LIBRARY", 1, ()),))  # torch's CMake: flags
    (note,) = cmakeprobe.notes(flags, _plan(narrowed=False))
    assert note.startswith("CUDA targets softmax_ext; device targets: what their nvcc flags name") and "9.0" in note
    # a CUDA language with no CUDA source still may compile some (not stopped); none of either is stopped
    assert flags.compiles_cuda and Configured(("CUDA",), ()).compiles_cuda and not Configured(("CXX",), ()).compiles_cuda
    refused = cmakeprobe.refusal(_plan(), CACHE)
    assert "COMPUTE_BACKEND=cpu" in refused and "hf_SuperSecretValue123" not in refused and "***" in refused
    assert "its CMakeLists.txt names it" in cmakeprobe.refusal(_plan(), None)
    assert said.to_json()["targets"][1] == {"name": "kc", "type": "MODULE_LIBRARY", "cuda_sources": 2,
                                            "cuda_architectures": ["80", "120-real"]}


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="target\tlanguages,0123456789abc\n-_:=/BOOLSTRING", max_size=400))
def test_the_readers_take_any_text(text):
    said = cmakeprobe.parse(text)
    assert said is None or all(t.cuda_sources >= 0 for t in said.targets)
    for entry in cmakeprobe.project_options(text):
        assert entry.kind in ("BOOL", "STRING")
    cmakeprobe.cuda_setting(text, set())
    cmakeprobe.user_defines({"CMAKE_ARGS": text, "SKBUILD_CMAKE_DEFINE": text})
