"""Twelve of the most-used PyTorch CUDA extensions, from their sdists on the public index (tests._sdists:
pinned by sha256, cached), each with a truth table written from its build files and checked against what
the tool says of it.

- The plan (`wheelci plan`, the dry run's reading: none of the project's code runs), in the hermetic tier:
  the switches it sets, whether the device targets the project hard-codes are replaced by --arch-list.
- The project asked (wheelci.compile.probe: its setup.py run with setup() answering, as the build asks
  it before compiling), in the heavy tier, in the suite's cached torch 2.13.0 environments: whether a CPU
  build can exist, whether the CUDA build compiles CUDA, the device targets its flags name, the
  variables it reads, its setup_requires.

Nothing is compiled here; the real builds are tests/test_real_projects*.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests import _proc, _sdists
from wheelci.config.sdist import extract_sdist

pytestmark = pytest.mark.network

NINE = ["sm_75", "sm_80", "sm_87", "sm_90", "sm_100", "sm_120", "sm_103", "sm_110", "sm_121"]

# project -> (what a --cuda 13.0 --arch-list 9.0 plan sets, what a --cpu plan sets, the targets it hard-codes)
PLANNED: dict[str, tuple[dict[str, str], dict[str, str], list[str]]] = {
    "torch-scatter": ({"FORCE_CUDA": "1"}, {}, []),
    "torch-sparse": ({"FORCE_CUDA": "1"}, {}, []),
    "torch-cluster": ({"FORCE_CUDA": "1"}, {}, []),
    "torch-spline-conv": ({"FORCE_CUDA": "1"}, {}, []),
    # a download switch: a CPU build sets it too (what it downloads is not built here either way)
    "causal-conv1d": ({"CAUSAL_CONV1D_FORCE_BUILD": "TRUE"}, {"CAUSAL_CONV1D_FORCE_BUILD": "TRUE"}, NINE),
    "mamba-ssm": ({"MAMBA_FORCE_BUILD": "TRUE"}, {"MAMBA_FORCE_BUILD": "TRUE"}, NINE),
    "flash-attn": ({"FLASH_ATTENTION_FORCE_BUILD": "TRUE", "FLASH_ATTN_CUDA_ARCHS": "90"},
                   {"FLASH_ATTENTION_FORCE_BUILD": "TRUE"}, ["sm_80", "sm_90", "sm_100", "sm_120"]),
    "xformers": ({"FORCE_CUDA": "1"}, {}, []),
    "natten": ({"NATTEN_CUDA_ARCH": "9.0"}, {}, []),
    # its setup.py reads DS_BUILD_OPS through a helper of its own: the text does not show it, the probe does
    "deepspeed": ({}, {}, []),
    "torchsort": ({}, {}, []),
    "chamferdist": ({"FORCE_CUDA": "1"}, {}, []),
}
# project -> the stable-ABI target its CUDA build compiles against (its own TORCH_TARGET_VERSION): planned so
STABLE = {"xformers": "2.10"}


def plan(project: str, *kind: str) -> dict:
    r = _proc.run([sys.executable, "-m", "wheelci", "plan", str(_sdists.sdist(project)), *kind, "--engine",
                        "host", "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.mark.parametrize("project", list(PLANNED))
def test_the_plan_reads_each_project_right(project):
    cuda_sets, cpu_sets, hard_coded = PLANNED[project]
    cuda = plan(project, "--cuda", "13.0", "--arch-list", "9.0")
    assert cuda["switches"] == cuda_sets
    assert cuda["narrowed"] is True  # --arch-list given: the device targets are its own
    said = [n for n in cuda["notes"] if "hard-codes device targets" in n]
    if hard_coded:
        assert said == [f"setup.py hard-codes device targets ({' '.join(hard_coded)}): every nvcc call gets the arch "
                        "list's (9.0) instead (--keep-project-archs keeps the project's)"], said
    else:
        assert not said
    assert any(n.startswith("read from the project's text") for n in cuda["notes"])  # which reading it used
    assert (cuda["stable"] or {}).get("target") == STABLE.get(project), cuda["stable"]
    assert cuda["label"] == ("cu13" if project in STABLE else "pt2.13.0.cu130")
    cpu = plan(project, "--cpu")
    assert cpu["switches"] == cpu_sets and cpu["stable"] is None  # xformers' CPU build is classic


def test_a_stable_abi_project_is_pinned_where_torch_names_one_release():
    """Each job of a workflow matrix names its torch: the wheel it builds is pinned to it, as asked."""
    doc = plan("xformers", "--cuda", "13.0", "--torch", "2.13.0")
    assert doc["stable"] is None and doc["label"] == "pt2.13.0.cu130"
    assert any("--torch 2.13.0 asks for a wheel pinned to it; --stable-abi 2.10" in n for n in doc["notes"])


@pytest.mark.parametrize("project", ["causal-conv1d"])
def test_without_an_arch_list_the_plan_says_the_projects_own_targets_stand(project):
    doc = plan(project, "--cuda", "13.0")
    assert doc["narrowed"] is False
    assert any(n.startswith(f"setup.py hard-codes device targets ({' '.join(NINE)}): the wheel holds those")
               for n in doc["notes"]), doc["notes"]


# --- the project asked, in the suite's torch environments --------------------------------------------

# project -> (a CPU build's stop, or None where it builds; the CUDA build: CUDA compiled, the targets
# its flags name, what it reads among its own variables, its setup_requires)
ASKED: dict[str, tuple[str | None, bool, list[str], set[str], set[str]]] = {
    "torch-scatter": (None, True, [], {"FORCE_CUDA", "FORCE_ONLY_CPU", "FORCE_ONLY_CUDA"}, set()),
    "torch-sparse": (None, True, [], {"FORCE_CUDA", "WITH_METIS"}, set()),
    "torch-cluster": (None, True, [], {"FORCE_CUDA"}, set()),
    "torch-spline-conv": (None, True, [], {"FORCE_CUDA"}, set()),
    "causal-conv1d": ("NameError: name 'bare_metal_version' is not defined", True, NINE,
                      {"CAUSAL_CONV1D_FORCE_BUILD", "CAUSAL_CONV1D_SKIP_CUDA_BUILD"}, set()),
    "mamba-ssm": ("InvalidVersion: Invalid version: None", True, NINE, {"MAMBA_FORCE_BUILD", "MAMBA_SKIP_CUDA_BUILD"}, set()),
    "flash-attn": ("OSError: CUDA_HOME environment variable is not set", True, ["sm_90"],
                   {"FLASH_ATTENTION_FORCE_BUILD", "FLASH_ATTN_CUDA_ARCHS"}, {"psutil"}),
    "xformers": (None, True, [], {"FORCE_CUDA"}, set()),
    "natten": (None, False, [], {"NATTEN_CUDA_ARCH"}, set()),  # its CMake library: built by its build_ext
    "deepspeed": (None, False, [], {"DS_BUILD_OPS", "DS_ACCELERATOR"}, set()),
    "torchsort": (None, True, [], set(), set()),
    "chamferdist": (None, True, [], {"FORCE_CUDA"}, set()),
}


def _env_python(cuda: str | None) -> tuple[Path, Path | None]:
    from wheelci.compile.hostenv import TorchSpec, assemble_cuda_root, ensure_env, find_nvcc
    from wheelci.compile.host import toolkit_wheels

    env = ensure_env(TorchSpec("2.13.0", cuda, "https://download.pytorch.org/whl/cu130" if cuda else None,
                               bool(cuda)))
    root = assemble_cuda_root(env, find_nvcc(env, cuda, toolkit_wheels(cuda))) if cuda else None
    return env.python, root


@pytest.mark.slow
@pytest.mark.parametrize("project", list(ASKED))
def test_the_project_asked_says_what_its_build_does(project, tmp_path):
    from wheelci.compile import probe
    from wheelci.compile.hostenv import cpu_environ, cuda_build_environ
    from wheelci.engine import nvcc_dirs

    cpu_stop, builds_cuda, targets, reads, setup_requires = ASKED[project]
    tree = extract_sdist(_sdists.sdist(project), tmp_path / "src")
    cuda_plan = plan(project, "--cuda", "13.0", "--arch-list", "9.0")
    cpu_plan = plan(project, "--cpu")

    python, _ = _env_python(None)
    # as a CPU build's compile sees the machine: no nvcc on PATH (torchsort builds CUDA wherever one runs)
    hidden = cpu_environ({**os.environ, **cpu_plan["switches"]}, nvcc_dirs(dict(os.environ)), tmp_path / "cpu-path")
    cpu = probe.ask(python, tree, hidden)
    assert cpu is not None
    if cpu_stop is None:
        assert cpu.error is None, cpu.error
    else:
        assert cpu.error and cpu_stop in cpu.error, cpu.error

    python, root = _env_python("13.0")
    assert root is not None
    environ = {**os.environ, **cuda_build_environ(root, "9.0"), **cuda_plan["switches"]}
    answers = probe.ask(python, tree, environ)
    assert answers is not None and answers.error is None, answers and answers.error
    assert answers.builds_cuda is builds_cuda, answers.extensions
    assert answers.stable_abi == STABLE.get(project) and cpu.stable_abi is None, answers.extensions
    if project == "natten":
        assert answers.builds_itself == ["natten.libnatten"], answers.extensions
    assert answers.device_targets == targets, answers.device_targets
    assert reads <= set(answers.env), sorted(answers.env)
    assert setup_requires <= set(answers.setup_requires), answers.setup_requires
