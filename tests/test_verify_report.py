"""verify must catch a wheel that installs and imports but computes the wrong thing; report writes
what CI shows. The broken wheel is made with the pipeline's own ci.patch from the real CPU build.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from wheelci import report
from wheelci.compile.hostenv import TorchSpec, ensure_env
from wheelci.wheel.names import WheelName
from conftest import ROOT
from tests._wheels import run_stage
from tests import _proc

pytestmark = [pytest.mark.slow, pytest.mark.network]  # a real torch environment

OPS = "test test_softmax_ext::test_ops_match_torch[float32-cpu]"


def cpu_torch_site() -> Path:
    return ensure_env(TorchSpec("2.13.0", None, None, False)).site


def broken_copy(wheel: Path, tmp_path: Path) -> Path:
    """The same wheel whose Python wrapper doubles the scale: imports fine, wrong numbers."""
    pkg = WheelName.parse(wheel.name).distribution
    init = zipfile.ZipFile(wheel).read(f"{pkg}/__init__.py").decode()
    line = "    return _ops.scaled_softmax(x, float(scale))\n"
    assert line in init
    n = init.splitlines(keepends=True).index(line) + 1
    patch = tmp_path / "break.patch"
    patch.write_text(f"--- a/{pkg}/__init__.py\n+++ b/{pkg}/__init__.py\n@@ -{n} +{n} @@\n-{line}"
                     f"+{line.replace('float(scale)', '2 * float(scale)')}")
    out = tmp_path / "broken"
    proc = run_stage("ci.patch", wheel, "--patch", patch, "--local-version", "broken", "-w", out)
    assert proc.returncode == 0, proc.stderr
    (result,) = out.glob("*.whl")
    return result


def test_verify_passes_the_real_wheel_and_fails_a_broken_one(cpu_build, tmp_path):
    site = cpu_torch_site()
    """The example's own tests run through the generic path (--project: its [tool.wheelci] test command)."""
    good = run_stage("ci.verify", cpu_build.wheel, "--torch-site", site, "--project", ROOT, "--json")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["checks"][OPS] == "ok"

    bad = run_stage("ci.verify", broken_copy(cpu_build.wheel, tmp_path), "--torch-site", site, "--project", ROOT,
                    "--json")
    assert bad.returncode == 1, bad.stderr
    checks = json.loads(bad.stdout)["result"]["checks"]  # the --json failure document holds the report
    assert checks["install"] == "ok" and checks["import softmax_ext"] == "ok"
    assert checks[OPS].startswith("FAILED: AssertionError")  # the report names the test that failed
    # gradcheck still passes: it checks the op against its own backward, which the wrapper bypasses
    assert checks["test test_softmax_ext::test_gradcheck[cpu]"] == "ok"
    errors = [line for line in bad.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and OPS in errors[0]


def test_verify_without_tests_runs_the_generic_checks(cpu_build):
    proc = run_stage("ci.verify", cpu_build.wheel, "--torch-site", cpu_torch_site(), "--json")
    assert proc.returncode == 0, proc.stderr
    checks = json.loads(proc.stdout)["checks"]
    assert checks["torch_ops"] == ["softmax_ext"] and checks["load softmax_ext/lib/libsoftmax_ext.so"] == "ok"
    assert checks["test_command"].startswith("skipped")


def test_verify_bad_input(tmp_path):
    proc = run_stage("ci.verify", tmp_path / "none-1.0-py3-none-any.whl", "--torch-site", tmp_path)
    assert proc.returncode == 2 and "no such file" in proc.stderr
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    proc = run_stage("ci.verify", wheel, "--torch-site", tmp_path)
    assert proc.returncode == 2 and "no torch installed there" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_stage("ci.verify", wheel, "--torch-site", cpu_torch_site(), "--project", tmp_path / "nowhere")
    assert proc.returncode == 2 and "not a project directory" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_report_files_and_job_summary(cpu_build, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    wheel = report.wheel_report(cpu_build.wheel, excluded=["libc10.so"])
    r = report.BuildReport(plan={"cuda": None, "torch": "2.13.0", "engine": "host"}, wheels=[wheel],
                           build_seconds=12.0, verify_seconds=3.0, verify={"ops_cpu": "ok"})
    json_path, md_path = report.write(r, tmp_path / "out")
    data = json.loads(json_path.read_text())
    assert data["wheels"][0]["size"] == cpu_build.wheel.stat().st_size
    assert data["wheels"][0]["requires"] == ["torch==2.13.0"]
    (lib, needed), = data["wheels"][0]["needed"].items()
    assert lib.endswith(".so") and "libc10.so" in needed
    md = md_path.read_text()
    assert f"`{cpu_build.wheel.name}`" in md and "| ops_cpu | ok |" in md and "Verify **passed**" in md
    assert summary.read_text() == "earlier step\n" + md


def test_a_package_named_like_a_module_of_ci_is_really_imported(tmp_path):
    """The probe ran by path, so `ci/` was first on sys.path: a broken package named `cache` or
    `errors` imported ci's module of that name instead and reported "ok"."""
    from tests._wheels import build_wheel
    wheel = build_wheel(tmp_path / "w", name="cache", files={"cache/__init__.py": "raise ImportError('broken on purpose')\n"},
                        requires=("torch==2.13.0",))
    proc = run_stage("ci.verify", wheel, "--torch-site", cpu_torch_site(), "--json")
    checks = json.loads(proc.stdout)["result"]["checks"]
    assert proc.returncode == 1 and checks["import cache"].startswith("FAILED") and "broken on purpose" in checks["import cache"]


def test_a_relative_torch_site_works(cpu_build, tmp_path):
    """The .pth layering the verify venv over torch held the path as given: relative, it resolved
    against the venv's site-packages and every check failed."""
    import os
    site = cpu_torch_site()
    rel = os.path.relpath(site, tmp_path)
    proc = run_stage("ci.verify", cpu_build.wheel, "--torch-site", rel, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_root_modules_and_namespace_packages_are_imported_and_loaded(tmp_path):
    """Only directories with __init__.py were imported: a broken root-level extension module
    (flash-attn's layout), a root .py module or a namespace package passed verify untouched."""
    from tests._wheels import build_wheel
    good = {"demo/__init__.py": "", "ns/ok/__init__.py": "VALUE = 1\n"}
    broken = {
        "demo_cuda.cpython-311-x86_64-linux-gnu.so": b"\x7fELF not really a library",
        "helper.py": "raise RuntimeError('root module broken')\n",
        "ns/bad/__init__.py": "raise RuntimeError('namespace package broken')\n",
    }
    wheel = build_wheel(tmp_path / "w", files={**good, **broken}, requires=("torch==2.13.0",))
    proc = run_stage("ci.verify", wheel, "--torch-site", cpu_torch_site(), "--json")
    checks = json.loads(proc.stdout)["result"]["checks"]
    assert proc.returncode == 1
    assert checks["import demo"] == "ok" and checks["import ns.ok"] == "ok"
    for name in ("demo_cuda", "helper", "ns.bad"):
        assert checks[f"import {name}"].startswith("FAILED"), (name, checks)
    assert checks["load demo_cuda.cpython-311-x86_64-linux-gnu.so"].startswith("FAILED")


def test_pips_progress_never_reaches_stdout_on_a_terminal(tmp_path):
    """On a terminal, creating the torch environment let pip print on stdout, ahead of a stage's
    --json document. pip's lines go to stderr; stdout stays the stage's."""
    import os
    import subprocess
    import sys
    master, slave = os.openpty()  # stderr is a terminal: pip runs without --quiet
    code = ("from wheelci.compile.hostenv import TorchSpec, ensure_env\n"
            "ensure_env(TorchSpec('0.0.0', None, None, False))\n")
    env = dict(os.environ, WHEELCI_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    try:
        proc = _proc.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=slave, env=env,
                         cwd=tmp_path, timeout=300)
    finally:
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        os.close(master)
    assert proc.returncode != 0  # no torch 0.0.0 anywhere: pip fails after printing its progress
    assert proc.stdout == b"", proc.stdout
    assert b"torch==0.0.0" in seen


def test_test_requirements_install_once_and_a_damaged_layer_is_made_again(cpu_build, tmp_path):
    """pip installed pytest into every verify venv (about 4 s a run, asking the index each time). The test
    requirements are now a layer kept in the cache: the second run installs nothing and reports the same
    checks, and a layer that lost a file or a whole distribution is made again, never used."""
    env = {"WHEELCI_CACHE_DIR": str(tmp_path / "cache")}  # a layer of this test's own

    def verify():
        r = run_stage("ci.verify", cpu_build.wheel, "--torch-site", cpu_torch_site(), "--project", ROOT, "--json",
                      env=env)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout)["checks"], "installing the test requirements once" in r.stderr

    (first, installed), (second, again) = verify(), verify()
    assert installed and not again
    assert first["torch_ops"] == ["softmax_ext"] and first[OPS] == "ok"
    assert {k: v for k, v in first.items() if k != "test_command"} == {k: v for k, v in second.items()
                                                                        if k != "test_command"}
    (stamp,) = (tmp_path / "cache" / "test-layers").glob("*/.complete.json")
    site = Path(json.loads(stamp.read_text())["site"])
    (site / "_pytest" / "__init__.py").unlink()
    assert verify()[1]
    import shutil
    for gone in (*site.glob("pluggy"), *site.glob("pluggy-*.dist-info")):
        shutil.rmtree(gone)
    assert verify()[1]


PYTEST = "python -m pytest -q -p no:cacheprovider"
WRITE_OK_COPY = ("python -c \"import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], "
                 "'checked', '__init__.py').write_text('')\" && " + PYTEST + " {project}/tests")
BROKEN = "raise ImportError('the wheel is broken')\n"
# case -> (the package's __init__.py in the wheel, the test command, the project's extra files)
HIDING = {
    "a source tree first on sys.path": (BROKEN, f"cd {{project}} && {PYTEST} tests", {"checked/__init__.py": ""}),
    "a conftest imported it first": (BROKEN, f"{PYTEST} {{project}}/tests",
                                     {"tests/conftest.py": "import pathlib, sys\n"
                                      "sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / 'src'))\n"
                                      "import checked\n", "src/checked/__init__.py": ""}),
    "a conftest stubs what it imports": ("import triton\n", f"{PYTEST} {{project}}/tests",
                                         {"tests/conftest.py": "import sys\nfrom unittest import mock\n"
                                          "sys.modules.setdefault('triton', mock.MagicMock())\n"}),
    "a test requirement it does not declare": ("import iniconfig\n", f"{PYTEST} {{project}}/tests", {}),
    "a PYTHONPATH of the test command": ("import vendored\n",
                                         f"PYTHONPATH={{project}}/vendor {PYTEST} {{project}}/tests",
                                         {"vendor/vendored.py": ""}),
    "a variable of the test command": ("import os\nos.environ['CHECKED_HOME']\n",
                                       f"CHECKED_HOME=/x {PYTEST} {{project}}/tests", {}),
    "a test requirement by path, beside the wheel": ("import iniconfig\n", f"{PYTEST} {{project}}/tests",
                                                     {"req/pyproject.toml": '[project]\nname = "req"\nversion = "1"\n'
                                                      'dependencies = ["iniconfig"]\n', "req/req.py": ""}),
    "the test command installs it": ("import iniconfig\n", f"python -m pip install -q iniconfig && {PYTEST} "
                                     "{project}/tests", {}),
    "tests that repair the venv": (BROKEN, WRITE_OK_COPY, {}),
}


@pytest.mark.parametrize("case", HIDING)
def test_nothing_of_the_tests_hides_a_broken_wheel(tmp_path, case):
    """The import checks run first, in the venv as the wheel's install left it, with `python -I`: a source
    tree, a conftest, a test requirement, the test command's variables or what it installs never make a
    wheel that cannot import on its own pass. (Running them inside the tests' pytest, to import torch once,
    was tried: each case here, and more, got through or changed what the tests saw.)"""
    from tests._wheels import build_wheel

    init, command, files = HIDING[case]
    wheel = build_wheel(tmp_path / "w", name="checked", files={"checked/__init__.py": init},
                        requires=("torch==2.13.0",))
    project = tmp_path / "project"
    for name, text in {"tests/test_it.py": "def test_nothing():\n    pass\n", **files}.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    requires = ["pytest", *([str(project / "req")] if "req/req.py" in files else [])]
    (project / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "1"\n[tool.wheelci]\n'
                                            f'test-command = {json.dumps(command)}\n'
                                            f'test-requires = {json.dumps(requires)}\n')
    r = run_stage("ci.verify", wheel, "--torch-site", cpu_torch_site(), "--project", project, "--json")
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    checks = json.loads(r.stdout)["result"]["checks"]
    assert checks["import checked"].startswith("FAILED") and checks["requires_torch"] == "ok", checks
    assert checks["test_command"].startswith("ok"), checks  # the tests themselves passed: only the check caught it


def test_a_cuda_wheel_verified_without_a_gpu_says_its_kernels_did_not_run(tmp_path):
    """It said "passed": a GPU-less verify of a CUDA wheel checks imports and loads, never a kernel."""
    from tests._wheels import build_wheel
    from wheelci.compile.hostenv import TorchSpec, ensure_env

    src = tmp_path / "kern.c"  # a library with the section nvcc writes its device code into
    src.write_text('__attribute__((section(".nv_fatbin"), used)) const unsigned char fatbin[256] = {1};\n'
                   "int kern(void) { return fatbin[0]; }\n")
    lib = tmp_path / "libkern.so"
    _proc.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    wheel = build_wheel(tmp_path / "w", name="gpukit", files={"gpukit/__init__.py": "", "gpukit/libkern.so":
                        lib.read_bytes()}, requires=("torch==2.13.0",))
    site = ensure_env(TorchSpec("2.13.0", "13.0", None, True)).site  # PyPI's CUDA torch
    proc = run_stage("ci.verify", wheel, "--torch-site", site, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    checks = json.loads(proc.stdout)["checks"]
    assert checks["load gpukit/libkern.so"] == "ok"
    if Path("/dev/nvidia0").exists():
        assert checks["gpu"].startswith("ok ("), checks["gpu"]
    else:
        assert checks["gpu"] == "skipped: no GPU: CUDA kernels not run", checks["gpu"]
        r = report.BuildReport(plan={"cuda": "13.0"}, verify=checks,
                               steps=[{"name": "verify", "status": "ok", "seconds": 9.0, "outputs": []}])
        assert "Verify **passed (no GPU: CUDA kernels not run)**" in report.to_markdown(r)


def test_a_cuda_wheel_verified_over_a_cpu_torch_names_that_torch(tmp_path):
    """A cu130 wheel over a CPU torch failed with "cannot open libcublasLt.so.13" and no word about the torch."""
    from tests._elfbuild import NVIDIA_WHEELS, cached_install, cached_wheel
    from tests._wheels import build_wheel

    cublas = cached_install(cached_wheel("nvidia-cublas", NVIDIA_WHEELS["nvidia-cublas"])) / "nvidia" / "cu13" / "lib"
    src = tmp_path / "kern.c"  # device code, and a NEEDED that a CUDA torch's nvidia-cublas wheel provides
    src.write_text('__attribute__((section(".nv_fatbin"), used)) const unsigned char fatbin[256] = {1};\n')
    lib = tmp_path / "libkern.so"
    _proc.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src), "-Wl,--no-as-needed", f"-L{cublas}",
               "-l:libcublasLt.so.13"], check=True, capture_output=True)
    wheel = build_wheel(tmp_path / "w", name="gpukit", files={"gpukit/__init__.py": "", "gpukit/libkern.so":
                        lib.read_bytes()}, requires=("torch==2.13.0",))
    proc = run_stage("ci.verify", wheel, "--torch-site", cpu_torch_site(), "--json")
    assert proc.returncode == 1, proc.stderr[-2000:]
    load = json.loads(proc.stdout)["result"]["checks"]["load gpukit/libkern.so"]
    assert load.startswith("FAILED") and "libcublasLt.so.13" in load, load
    assert load.endswith("(torch 2.13.0+cpu is a CPU build, without the CUDA libraries this CUDA wheel needs: "
                         "verify it over a CUDA torch)"), load
