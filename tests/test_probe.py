"""The verdict on what a project's setup.py said (wheelci.compile.probe.judge): each point judged before the
compile, a refusal only where no compile can give the build, and what it read shown by the secret rule.
The answers are the probe's own JSON shape; tests/test_corpus.py asks twelve real projects."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from wheelci import plan as pl
from wheelci.compile import probe
from wheelci.util import secret

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tiny_ext"


@pytest.fixture(scope="module")
def cuda_plan():
    return pl.make_plan(pl.Request(cuda="13.0", engine="host", arch_list="9.0"), project_dir=FIXTURE)


@pytest.fixture(scope="module")
def cpu_plan():
    return pl.make_plan(pl.Request(cuda=None, engine="host"), project_dir=FIXTURE)


def answers(**setup) -> probe.Answers:
    doc = {"env": setup.pop("env", {}), "cuda": [], "failed_imports": [], "downloads": setup.pop("downloads", []),
           "error": setup.pop("error", None), "setup": setup.pop("setup", {"ext_modules": [], **setup})}
    return probe.parse(json.loads(json.dumps(doc)))


CUDA_EXT = {"name": "k._C", "kind": "CUDAExtension", "sources": 2, "cuda_sources": 1,
            "extra_compile_args": {"nvcc": ["-gencode", "arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=[sm_90,compute_90]"]}}
CPU_EXT = {"name": "k._cpu", "kind": "Extension", "sources": 1, "cuda_sources": 0}


def test_a_script_that_stops_before_setup_is_refused_and_a_cpu_build_says_why(cpu_plan):
    verdict = probe.judge(answers(error="NameError: name 'bare_metal_version' is not defined", setup=None), cpu_plan)
    assert verdict.refusal == ("a CPU build of this project cannot run: its setup.py stops before any compile under "
                               "torch 2.13.0: NameError: name 'bare_metal_version' is not defined (a CPU build of it "
                               "cannot exist: build with --cuda X.Y)")


def test_what_the_probe_itself_causes_is_never_a_refusal(cuda_plan):
    """A false refusal is the worst answer: only the project's own failure before setup() refuses."""
    after = answers(error="AttributeError: 'NoneType' object has no attribute 'command_obj'", ext_modules=[CUDA_EXT])
    assert probe.judge(after, cuda_plan).refusal is None  # setup() answered first: our stub returned None
    for downloaded in ("urllib.error.URLError: <urlopen error the build's probe reaches no network>",
                       "RuntimeError: could not fetch the prebuilt kernels: the build's probe reaches no network"):
        offline = answers(error=downloaded, setup=None, downloads=["https://github.com/x/releases/x.whl"])
        assert probe.judge(offline, cuda_plan).refusal is None, downloaded
    guarded = answers(error="SystemExit: run me through the project's build backend", setup=None)
    assert probe.judge(guarded, cuda_plan).refusal is None


def test_compiling_nothing_or_the_cpu_path_only_is_said_not_refused(cuda_plan):
    """Extensions declared in pyproject.toml, or a command of the project's own, may still build them: the
    compile's device code check decides."""
    got = probe.judge(answers(env={"NATTEN_CUDA_ARCH": None}), cuda_plan)
    assert got.refusal is None
    assert any(n.startswith("warning:") and "compiles nothing as configured" in n and "it reads NATTEN_CUDA_ARCH" in n
               for n in got.notes), got.notes
    cpu_only = probe.judge(answers(ext_modules=[CPU_EXT]), cuda_plan)
    assert cpu_only.refusal is None and any("compiles its CPU path only" in n for n in cpu_only.notes)
    own = answers(ext_modules=[CPU_EXT], cmdclass={"build_ext": "setup.CMakeBuild"})
    assert not any("CPU path only" in n for n in probe.judge(own, cuda_plan).notes)
    itself = answers(ext_modules=[{"name": "natten.libnatten", "kind": "Extension", "sources": 0}])
    assert any("built by the project's own build step" in n for n in probe.judge(itself, cuda_plan).notes)


def test_the_device_targets_are_named(cuda_plan):
    a = answers(ext_modules=[CUDA_EXT])
    assert a.device_targets == ["sm_80", "sm_90", "compute_90"]
    assert "device targets: 9.0 (the project's own sm_80 sm_90 compute_90 replaced)" in probe.judge(a, cuda_plan).notes
    kept = replace(cuda_plan, narrowed=False)
    assert "device targets: sm_80 sm_90 compute_90 (the project's own; --arch-list replaces them)" in probe.judge(a, kept).notes


def test_extensions_built_against_the_stable_abi_are_said_to_be(cuda_plan):
    """xformers' CUDA build passes -DTORCH_STABLE_ONLY and its own TORCH_TARGET_VERSION: a wheel pinned to one
    torch would shut out every other release it loads on."""
    stable = {**CUDA_EXT, "extra_compile_args": {"cxx": ["-O3", "-DTORCH_STABLE_ONLY",
                                                         "-DTORCH_TARGET_VERSION=0x020a000000000000"], "nvcc": []}}
    a = answers(ext_modules=[stable])
    assert a.stable_abi == "2.10"
    assert any(n.startswith("its extensions compile against torch's stable ABI (TORCH_TARGET_VERSION 2.10)")
               and "--stable-abi 2.10" in n and "torch==2.13.0" in n for n in probe.judge(a, cuda_plan).notes)
    macro = answers(ext_modules=[{**CUDA_EXT, "define_macros": [["TORCH_TARGET_VERSION", "0x020b000000000000"]]}])
    assert macro.stable_abi == "2.11"
    classic = answers(ext_modules=[CUDA_EXT])
    assert classic.stable_abi is None and not any("stable ABI" in n for n in probe.judge(classic, cuda_plan).notes)


def test_what_it_read_is_shown_by_the_secret_rule(cuda_plan):
    plan = replace(cuda_plan, run=replace(cuda_plan.run, build_env={"MY_SWITCH": "s3cret-value", "FORCE_CUDA": "1"},
                                          public_env=["FORCE_CUDA"]))
    a = answers(ext_modules=[CUDA_EXT], env={"GITHUB_TOKEN": "ghp_leak", "MY_SWITCH": "s3cret-value", "FORCE_CUDA": "1",
                                             "URL": "https://user:pw@host/x", "UNSET": None})
    shown = json.dumps([a.to_json(plan), probe.judge(a, plan).notes])
    assert "ghp_leak" not in shown and "s3cret-value" not in shown and "pw@" not in shown
    assert a.to_json(plan)["env"] == {"GITHUB_TOKEN": "***", "MY_SWITCH": "***", "FORCE_CUDA": "1",
                                      "URL": secret.redact("https://user:pw@host/x"), "UNSET": None}


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20))
def test_any_json_the_probe_file_holds_parses_without_an_exception(doc):
    """The file is written by the project's process (its setup.py may replace anything): read, never trusted."""
    got = probe.parse(doc)
    _ = (got.device_targets, got.builds_cuda, got.builds_itself, got.own_build_ext)
    for key in ("env", "setup", "cuda", "downloads", "error"):
        probe.parse({key: doc, "setup": doc if key != "setup" else {"ext_modules": doc, "cmdclass": doc}})


@pytest.mark.parametrize("cuda, setup_called, builds, want", [
    (["is_available -> False"], True, False, True),               # asked, told no, builds no CUDA: answer it
    (["get_device_capability -> RuntimeError: no device"], True, False, True),
    (["is_available -> False"], True, True, False),               # builds CUDA anyway: nothing to answer
    (["get_arch_list -> []"], True, False, False),                # not a device question
    ([], True, False, False),                                     # asked nothing: its own switch, or none
    (["is_available -> False"], False, False, False),             # stopped before setup(): its refusal stands
])
def test_a_gpu_is_answered_only_for_a_project_that_asks_for_one(cuda_plan, cuda, setup_called, builds, want):
    ext = {"name": "x._C", "kind": "CUDAExtension" if builds else "CppExtension", "sources": ["a.cpp"]}
    answers = probe.Answers(cuda=cuda, setup_called=setup_called, extensions=[ext])
    assert probe.wants_a_gpu(answers, cuda_plan) is want
    assert probe.wants_a_gpu(answers, replace(cuda_plan, cuda=None)) is False  # a CPU build never is
    if want:  # a variable it reads that the user set (FORCE_CUDA=0): the user decided, no answer
        read = replace(answers, env={"FORCE_CUDA": "0"})
        user = replace(cuda_plan, run=replace(cuda_plan.run, build_env={"FORCE_CUDA": "0"}))
        assert probe.wants_a_gpu(read, user) is False


def test_the_capability_answered_is_the_arch_lists_newest():
    assert probe.gpu_capability("7.5;8.0;9.0;12.0+PTX") == "12.0"
    assert probe.gpu_capability("8.6") == "8.6"


@pytest.mark.slow
@pytest.mark.network
def test_torch_answers_as_the_gpu_of_the_arch_list_under_the_hook(tmp_path):
    """The real torch of the CPU build environment, with the hook first on PYTHONPATH: its device questions
    get one device of the asked capability; without WHEELCI_GPU_ANSWER it says what it always says."""
    import os
    import shutil
    from importlib.resources import files

    from tests import _proc

    from wheelci.compile.hostenv import TorchSpec, ensure_env

    env = ensure_env(TorchSpec("2.13.0", None, None, False))
    hook = tmp_path / "hook"
    hook.mkdir()
    shutil.copy(str(files("wheelci.resources") / "gpu_answer" / "sitecustomize.py"), hook)
    code = ("import torch; c = torch.cuda; p = c.get_device_properties(0); "
            "print(c.is_available(), c.device_count(), c.get_device_capability(), p.major, p.minor)")
    base = {k: v for k, v in os.environ.items() if k != "WHEELCI_GPU_ANSWER"}
    asked = _proc.run([env.python, "-c", code], capture_output=True, text=True,
                      env={**base, "PYTHONPATH": str(hook), "WHEELCI_GPU_ANSWER": "9.0"})
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.split() == ["True", "1", "(9,", "0)", "9", "0"]
    plain = _proc.run([env.python, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True,
                      text=True, env={**base, "PYTHONPATH": str(hook)})
    assert plain.stdout.strip() == "False"


@pytest.mark.slow
@pytest.mark.network
def test_a_project_that_builds_cuda_only_on_a_gpu_builds_it_here(tmp_path):
    """pytorch/extension-cpp's kind (it once gave a CPU-only wheel labelled +cu130 here): tiny_ext changed to build its CUDA extension only when torch sees a GPU, with no switch: the probe sees
    it ask and build none, the build answers as a compute capability 9.0 device would, and the wheel holds
    sm_90 code, first try, on this machine without a GPU."""
    import shutil
    import zipfile

    from tests._wheels import run_stage
    from tests.test_build_host import fatbin_archs
    from wheelci.native.elf import scan_wheel

    project = tmp_path / "gpu-only"
    shutil.copytree(FIXTURE, project)
    setup = project / "setup.py"
    setup.write_text(setup.read_text().replace("if torch.version.cuda is not None and CUDA_HOME is not None:",
                                               "if torch.cuda.is_available() and CUDA_HOME is not None:"))
    out = tmp_path / "out"
    r = run_stage("ci.build", project, "--cuda", "13.0", "--arch-list", "9.0", "--engine", "host", "-w", out)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "the build answers as a compute capability 9.0 device would" in r.stderr, r.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    (lib,) = [lib for lib in scan_wheel(wheel) if "libcudart.so.13" in lib.needed]
    with zipfile.ZipFile(wheel) as zf:
        assert fatbin_archs(zf.read(lib.path)) == {(2, 90)}
