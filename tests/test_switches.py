"""The project's build switches, found in its build script before any compile (wheelci.config.switches):
the snippets are the shapes real projects' setup.py files have (torch-scatter's, flash-attn's), and the
dry run shows what the build sets and why."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from wheelci.config import switches as sw

ROOT = Path(__file__).resolve().parent.parent

# torch-scatter's setup.py (PyG): the CUDA library only under a GPU, or FORCE_CUDA
PYG = '''
import os, sys, glob
import torch
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

WITH_CUDA = False
if torch.cuda.is_available():
    WITH_CUDA = CUDA_HOME is not None or torch.version.hip
suffices = ['cpu', 'cuda'] if WITH_CUDA else ['cpu']
if os.getenv('FORCE_CUDA', '0') == '1':
    suffices = ['cuda', 'cpu']
if os.getenv('FORCE_ONLY_CUDA', '0') == '1':
    suffices = ['cuda']
if os.getenv('FORCE_ONLY_CPU', '0') == '1':
    suffices = ['cpu']
'''

# flash-attn's setup.py (Dao-AILab): a prebuilt wheel unless FORCE_BUILD, nine hard-coded gencodes
FLASH = '''
import os, urllib.request, urllib.error
from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
PACKAGE_NAME = "flash_attn"
BASE_WHEEL_URL = "https://github.com/Dao-AILab/flash-attention/releases/download/{tag_name}/{wheel_name}"
FORCE_BUILD = os.getenv("FLASH_ATTENTION_FORCE_BUILD", "FALSE") == "TRUE"
SKIP_CUDA_BUILD = os.getenv("FLASH_ATTENTION_SKIP_CUDA_BUILD", "FALSE") == "TRUE"
FORCE_CXX11_ABI = os.getenv("FLASH_ATTENTION_FORCE_CXX11_ABI", "FALSE") == "TRUE"
if not SKIP_CUDA_BUILD:
    cc_flag.append("-gencode")
    cc_flag.append("arch=compute_80,code=sm_80")
    if bare_metal_version >= Version("11.8"):
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_90,code=sm_90")
class CachedWheelsCommand(_bdist_wheel):
    def run(self):
        if FORCE_BUILD:
            return super().run()
        wheel_url, wheel_filename = get_wheel_url()
        try:
            urllib.request.urlretrieve(wheel_url, wheel_filename)
        except (urllib.error.HTTPError, urllib.error.URLError):
            super().run()
'''

# detectron2's shape: the CUDA extension under a GPU or FORCE_CUDA, read through os.environ.get
DETECTRON = '''
if (torch.cuda.is_available() and ((CUDA_HOME is not None) or is_rocm_pytorch)) or os.environ.get(
        "FORCE_CUDA", "0") == "1":
    extension = CUDAExtension
'''

# a project that asks for a GPU and reads no switch anyone knows
GUARD_ONLY = '''
import torch
from torch.utils.cpp_extension import BuildExtension, CUDAExtension, CppExtension
ext = CUDAExtension if torch.cuda.is_available() else CppExtension
'''


def names(reading: sw.ScriptReading) -> dict[str, str | None]:
    return {s.name: s.compared for s in reading.switches}


def test_pyg_setup_reads_force_cuda_and_its_siblings():
    r = sw.read_script(PYG)
    assert names(r) == {"FORCE_CUDA": "1", "FORCE_ONLY_CUDA": "1", "FORCE_ONLY_CPU": "1"}
    assert r.cuda_guard == ["setup.py"] and not r.downloads_wheel and not r.gencodes
    plan = sw.plan_switches(r, {}, cuda=True)
    assert plan.sets == {"FORCE_CUDA": "1"}  # never FORCE_ONLY_CUDA (the CPU twin stays) nor FORCE_ONLY_CPU
    assert any("FORCE_CUDA=1" in n and "torch-scatter" in n for n in plan.notes), plan.notes
    assert any("FORCE_ONLY_CUDA" in n and "not set" in n for n in plan.notes), plan.notes
    assert not any(n.startswith("warning") for n in plan.notes), plan.notes
    assert plan.public == ["FORCE_CUDA"]
    assert sw.plan_switches(r, {}, cuda=False).sets == {}  # a CPU build forces nothing


def test_flash_attn_setup_is_built_not_downloaded_and_its_gencodes_are_named():
    r = sw.read_script(FLASH)
    assert names(r) == {"FLASH_ATTENTION_FORCE_BUILD": "TRUE", "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE"}
    assert r.downloads_wheel == ["setup.py"] and not r.cuda_guard
    assert r.gencodes == ["sm_80", "sm_90"] and r.gencode_scripts == ["setup.py"]
    plan = sw.plan_switches(r, {}, cuda=True)
    assert plan.sets == {"FLASH_ATTENTION_FORCE_BUILD": "TRUE"}
    assert not any("downloads a prebuilt wheel" in n for n in plan.notes), plan.notes  # the switch covers it
    note = sw.gencode_note(r, "9.0", narrowed=False)
    assert note and "sm_80 sm_90" in note and "the wheel holds those" in note and "--arch-list narrows" in note
    note = sw.gencode_note(r, "9.0", narrowed=True)
    assert note and "sm_80 sm_90" in note and "every nvcc call gets the arch list's (9.0)" in note


def test_the_users_value_wins_and_a_skip_switch_is_a_warning():
    r = sw.read_script(FLASH)
    plan = sw.plan_switches(r, {"FLASH_ATTENTION_FORCE_BUILD": "FALSE", "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE"},
                            cuda=True)
    assert plan.sets == {}
    assert any("FLASH_ATTENTION_FORCE_BUILD=FALSE as given" in n for n in plan.notes), plan.notes
    assert any(n.startswith("warning") and "SKIP_CUDA_BUILD=TRUE" in n for n in plan.notes), plan.notes
    assert plan.public == ["FLASH_ATTENTION_FORCE_BUILD", "FLASH_ATTENTION_SKIP_CUDA_BUILD"]


def test_detectron_style_read_across_lines_and_a_bare_guard():
    assert names(sw.read_script(DETECTRON)) == {"FORCE_CUDA": "1"}
    r = sw.read_script(GUARD_ONLY)
    assert not r.switches and r.cuda_guard
    notes = sw.plan_switches(r, {}, cuda=True).notes
    assert len(notes) == 1 and notes[0].startswith("warning") and "no device code" in notes[0], notes
    assert sw.plan_switches(r, {"MY_CUDA": "1"}, cuda=False).notes == []  # a CPU build: nothing to say


def test_a_download_without_a_known_switch_is_named():
    text = 'import urllib.request\nurllib.request.urlretrieve(f"{BASE}/{name}.whl", "x.whl")\n'
    notes = sw.plan_switches(sw.read_script(text), {}, cuda=False).notes
    assert len(notes) == 1 and "downloads a prebuilt wheel" in notes[0], notes
    # a URL fetched for something else is no wheel download
    assert not sw.read_script('urlopen("https://example.org/data.json")').downloads_wheel


def test_cmake_reads_and_hard_coded_architectures():
    r = sw.read_script('if(DEFINED ENV{FORCE_CUDA} OR "$ENV{FORCE_CUDA}")\nendif()\n'
                       'set(CMAKE_CUDA_ARCHITECTURES "80;90-real")\n', "CMakeLists.txt")
    assert names(r) == {"FORCE_CUDA": None} and r.gencodes == ["sm_80", "sm_90"]
    assert sw.plan_switches(r, {}, cuda=True).sets == {"FORCE_CUDA": "1"}  # the convention's value


@pytest.mark.parametrize("text", ["", "os.getenv(", "os.getenv('FORCE_CUDA'" + " " * 5000, "\x00" * 100,
                                  "arch=compute_" * 1000, "FORCE_CUDA" * 10000])
def test_odd_text_reads_as_nothing_or_something_never_an_error(text):
    r = sw.read_script(text)
    assert isinstance(r, sw.ScriptReading)


@pytest.mark.parametrize("tail", [" " * sw.MAX_SCRIPT, " \t\n" * (sw.MAX_SCRIPT // 3), "80 " * (sw.MAX_SCRIPT // 3)])
def test_a_script_of_a_megabyte_is_read_in_one_pass(tmp_path, tail):
    # whitespace (or words) after `set(CMAKE_CUDA_ARCHITECTURES` with no `)`: a pattern whose two parts both
    # take whitespace backtracks quadratically (4000 spaces took minutes); read whole, this meets the timeout
    (tmp_path / "CMakeLists.txt").write_text(("set(CMAKE_CUDA_ARCHITECTURES " + tail)[:sw.MAX_SCRIPT])
    (tmp_path / "setup.py").write_text(("arch=compute_80,code=sm_80" + " , sm_80" * sw.MAX_SCRIPT)[:sw.MAX_SCRIPT])
    r = sw.read_scripts(tmp_path)
    assert r.gencodes == ["sm_80"]
    closed = sw.read_script("set(CMAKE_CUDA_ARCHITECTURES" + " " * 50 + "\n  86 \"90a\" )\n", "CMakeLists.txt")
    assert closed.gencodes == ["sm_86", "sm_90a"]


@pytest.mark.parametrize("head", ['option(WITH_CUDA "x"', "option(A ", "set(X ", 'set(X "', "set(X a CACHE STRING "])
def test_a_megabyte_of_an_unclosed_cmake_option_is_read_in_one_pass(head):
    """The options' pattern meets a megabyte of spaces after each of its parts in linear time (a first try
    of it took over ten minutes on one)."""
    for tail in (" " * sw.MAX_SCRIPT, " \t\n" * (sw.MAX_SCRIPT // 3), "a " * (sw.MAX_SCRIPT // 2)):
        assert sw.read_script((head + tail)[:sw.MAX_SCRIPT], "CMakeLists.txt").cmake_options == []


def test_a_target_version_of_the_stable_abi_is_read_as_its_torch_minor():
    xformers = 'stable_args = [\n    "-DTORCH_STABLE_ONLY",\n    "-DTORCH_TARGET_VERSION=0x020a000000000000",\n]\n'
    assert sw.read_script(xformers).stable_target == "2.10"
    cmake = "target_compile_definitions(ops PRIVATE TORCH_TARGET_VERSION=0x020C000000000000)"
    assert sw.read_script(cmake, "CMakeLists.txt").stable_target == "2.12"
    for text in ("TORCH_TARGET_VERSION", "-DTORCH_TARGET_VERSION=0x020a", "# TORCH_TARGET_VERSION=2.10"):
        assert sw.read_script(text).stable_target is None, text


def test_a_cmake_projects_own_cuda_options_are_named_with_their_defaults():
    """bitsandbytes builds CUDA only with COMPUTE_BACKEND=cuda: the plan names it before anything compiles."""
    text = ('set(COMPUTE_BACKEND "cpu" CACHE STRING "The compute backend to use (cpu, cuda, hip, mps, xpu)")\n'
            'option(WITH_CUDA "Build the CUDA kernels" ON)\noption(BUILD_BENCH "benchmarks" OFF)\n'
            'option(USE_GPU_TIMERS "timers")\nset(PLAIN "x" CACHE STRING "nothing of devices")\n')
    reading = sw.read_script(text, "CMakeLists.txt")
    assert reading.cmake_options == ["COMPUTE_BACKEND=cpu", "WITH_CUDA=ON", "USE_GPU_TIMERS=OFF"]
    assert sw.read_script(text, "setup.py").cmake_options == []  # CMake's syntax, read in CMake's file only
    notes = sw.plan_switches(reading, {}, cuda=True).notes
    assert ("CMakeLists.txt's own options that may decide its CUDA code: COMPUTE_BACKEND=cpu, WITH_CUDA=ON, "
            "USE_GPU_TIMERS=OFF (the defaults written; --env CMAKE_ARGS=-DNAME=VALUE sets one)") in notes
    assert not any("CMake" in n for n in sw.plan_switches(reading, {}, cuda=False).notes)


def test_unrelated_variables_are_not_switches():
    r = sw.read_script('os.getenv("MAX_JOBS")\nos.environ["CUDA_HOME"]\nos.getenv("FORCE_BUILDX")\n')
    assert r.switches == []


def test_the_dry_run_plan_sets_the_switch_and_shows_its_value(tmp_path):
    """A PyG-style project's CUDA plan on a GPU-less builder: FORCE_CUDA=1 set and shown (a build switch
    is no secret), the user's own value winning."""
    from tests._wheels import run_stage

    project = tmp_path / "scatterlike"
    shutil.copytree(ROOT / "tests" / "fixtures" / "tiny_ext", project)
    (project / "setup.py").write_text((project / "setup.py").read_text() + "\n" + PYG.replace("import torch\n", ""))
    env = {"WHEELCI_CACHE_DIR": str(tmp_path / "cache")}
    r = run_stage("ci.build", project, "--cuda", "13.0", "--engine", "host", "--dry-run", "--json", env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["switches"] == {"FORCE_CUDA": "1"} and doc["build_env"]["FORCE_CUDA"] == "1"
    assert any("FORCE_CUDA=1" in n for n in doc["notes"]), doc["notes"]
    r = run_stage("ci.build", project, "--cuda", "13.0", "--engine", "host", "--dry-run", "--json",
                  "--env", "FORCE_CUDA=0", env=env)
    doc = json.loads(r.stdout)
    assert doc["switches"] == {} and doc["build_env"] == {"FORCE_CUDA": "0"}, doc["build_env"]
    r = run_stage("ci.build", project, "--cuda", "13.0", "--engine", "host", "--dry-run", env=env)
    assert "FORCE_CUDA=1" in r.stdout and "FORCE_CUDA=***" not in r.stdout, r.stdout


def _dry(tmp_path: Path, *args: str):
    from tests._wheels import run_stage

    r = run_stage("ci.build", ROOT / "tests" / "fixtures" / "tiny_ext", "--cuda", "13.0", "--engine", "host",
                  "--dry-run", "--json", *args, env={"WHEELCI_CACHE_DIR": str(tmp_path / "cache")})
    return r, (json.loads(r.stdout) if r.returncode == 0 else None)


def test_a_build_bound_for_pypi_has_no_local_label_and_says_why(tmp_path):
    """PyPI refuses local versions: the plan for an upload to it uses none (auto); the pypi limit, a size
    (and the default one), keeps the label (`wheelci check --limit pypi` refuses it), and warns only of a
    label the user chose."""
    _, doc = _dry(tmp_path)
    assert doc["label"] == "pt2.13.0.cu130"
    for url in ("https://upload.pypi.org/legacy/", "https://upload.pypi.org./legacy/"):  # the same host
        r, doc = _dry(tmp_path, "--upload", url)
        assert r.returncode == 0 and doc["label"] is None, r.stderr
    assert any(n.startswith("no local version label") and "PyPI refuses" in n for n in doc["notes"]), doc["notes"]
    r, doc = _dry(tmp_path, "--limit", "pypi")
    assert r.returncode == 0 and doc["label"] == "pt2.13.0.cu130", r.stderr
    assert not any("PyPI" in n for n in doc["notes"]), doc["notes"]  # every build of the default limit: no noise
    r, _ = _dry(tmp_path, "--upload", "https://upload.pypi.org/legacy/", "--local-version", "internal1")
    assert r.returncode == 2 and "PyPI refuses local version labels" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and json.loads(r.stdout)["exit_code"] == 2  # --json: the error too
    r, doc = _dry(tmp_path, "--limit", "pypi", "--local-version", "internal1")
    assert doc["label"] == "internal1" and any(n.startswith("warning: the local version label") for n in doc["notes"])
    _, doc = _dry(tmp_path, "--upload", "https://packages.example.org/legacy/")  # an index of one's own
    assert doc["label"] == "pt2.13.0.cu130"


def test_a_host_plan_shows_no_container_image_or_cibuildwheel_variables(tmp_path):
    """A host build uses neither: showing them read as if Docker were needed. A container plan has both."""
    from tests._wheels import run_stage

    env = {"WHEELCI_CACHE_DIR": str(tmp_path / "cache")}
    project = ROOT / "tests" / "fixtures" / "tiny_ext"
    host = run_stage("ci.build", project, "--cuda", "13.0", "--engine", "host", "--dry-run", env=env)
    assert host.returncode == 0, host.stderr
    assert "CIBW_" not in host.stdout and "environment:" not in host.stdout, host.stdout
    assert re.search(r"^image\s+none \(host build", host.stdout, re.M), host.stdout
    doc = json.loads(run_stage("ci.build", project, "--cuda", "13.0", "--engine", "host", "--dry-run", "--json",
                               env=env).stdout)
    assert doc["environment"] == {} and doc["image"] is None and "CIBW_" not in json.dumps(doc)
    docker = run_stage("ci.plan", "--project-dir", project, "--cuda", "13.0", "--engine", "docker", env=env)
    assert docker.returncode == 0 and "CIBW_BUILD=" in docker.stdout and "environment:" in docker.stdout, docker.stderr


def test_a_dao_ailab_style_project_is_built_not_downloaded_and_its_gencodes_named_before_the_compile(tmp_path):
    """flash-attn's shape: the plan sets FLASH_ATTENTION_FORCE_BUILD=TRUE (its setup.py downloads a
    prebuilt wheel otherwise) and names the targets it hard-codes, which --arch-list 9.0 does not reach."""
    from tests._wheels import run_stage

    project = tmp_path / "flashlike"
    shutil.copytree(ROOT / "tests" / "fixtures" / "tiny_ext", project)
    (project / "setup.py").write_text((project / "setup.py").read_text() + "\n" + FLASH)
    r = run_stage("ci.build", project, "--cuda", "13.0", "--arch-list", "9.0", "--engine", "host", "--dry-run",
                  env={"WHEELCI_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    assert re.search(r"^switches\s+FLASH_ATTENTION_FORCE_BUILD=TRUE \(set by the plan", r.stdout, re.M), r.stdout
    assert "note: setup.py hard-codes device targets (sm_80 sm_90)" in r.stdout, r.stdout
    assert "FLASH_ATTENTION_SKIP_CUDA_BUILD" not in r.stdout.split("switches", 1)[1].splitlines()[0]
