"""Every matrix row and torch yields a sound plan, and cibuildwheel's own parser reads it as meant."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from wheelci.config import matrix as mx
from wheelci import plan as pl
from wheelci import cibw
from wheelci.workflowmatrix import workflow_matrix
from wheelci.config import constraints
from wheelci.config.releases import TorchIndex
from wheelci.errors import CiError
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
COMBOS = [(r, t) for r in mx.rows() for t in r.torch]
BUILT = [r.version for r in mx.rows() if r.default_torch]  # rows with a torch of their own (the rest: test_releases)
REQUIRED_KEYS = {"cuda", "torch", "torch_index_url", "image", "manylinux", "arch_list", "python", "identifiers",
                 "environment", "engine"}


def plan_for(cuda, torch=None, **kw) -> pl.Plan:
    kw.setdefault("engine", "docker")
    run = pl.RunSettings(**{k: kw.pop(k) for k in ("build_env", "excludes") if k in kw})
    given = {k: kw.pop(k) for k in ("env", "facts") if k in kw}
    return pl.make_plan(pl.Request(cuda=cuda, torch=torch, **kw), project_dir=ROOT, run=run, **given)


def cibw_options(plan: pl.Plan):
    """cibuildwheel's own option resolution (options.py) over pyproject + the plan's CIBW_* variables."""
    from cibuildwheel.options import CommandLineArguments, compute_options

    args = dataclasses.replace(CommandLineArguments.defaults(), platform="linux", package_dir=ROOT)
    cwd = os.getcwd()
    os.chdir(ROOT)  # cibuildwheel reads pyproject.toml from the working directory
    try:
        return compute_options("linux", args, dict(plan.environment))
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("row,build", COMBOS, ids=[f"cu{r.version}-torch{t.version}" for r, t in COMBOS])
def test_every_row_and_torch_gives_a_consistent_plan(row: mx.CudaRow, build: mx.TorchBuild):
    line = mx.load().torch_line(build.version)
    py = [p for p in line.python if p in ("3.10", "3.11", "3.12")][:1]
    plan = plan_for(row.version, build.version, python=py)
    # the image is one of the row's, of a policy no older than torch's, able to emit torch's ABI
    image = next(i for i in row.images if pl._image_ref(mx.load(), i, {}) == plan.image)
    assert mx.POLICIES.index(image.manylinux) >= mx.POLICIES.index(line.manylinux)
    assert image.cxx11_abi or not line.cxx11_abi
    assert image.gcc <= plan.gcc_max == row.gcc_max
    assert plan.manylinux == image.manylinux
    # the torch pin, its index and the cuDNN pin reach before-build, as cibuildwheel will run it
    bo = cibw_options(plan).build_options(plan.identifiers[0])
    cmds = [shlex.split(c) for c in bo.before_build.split("&&")]
    torch_cmd = next(c for c in cmds if f"torch=={build.version}" in c)
    assert torch_cmd[torch_cmd.index("--index-url") + 1] == row.torch_index_url == plan.torch_index_url
    assert any(build.cudnn in c for c in cmds)
    assert plan.cudnn_requirement == build.cudnn
    assert bo.manylinux_images["x86_64"] == plan.image
    assert bo.container_engine.name == "docker"
    assert any(a.endswith(":/ccache") for a in bo.container_engine.create_args)
    # the arch list and nvcc flags arrive in the container environment, valid for this nvcc
    env = bo.environment.as_dictionary({"PATH": "/usr/bin"}, executor=lambda cmd, env: "")
    assert env["TORCH_CUDA_ARCH_LIST"] == plan.arch_list
    assert mx.check_arch_list(row.version, env["TORCH_CUDA_ARCH_LIST"])
    assert env["CUDAFLAGS"].split() == plan.nvcc_flags == list(row.nvcc_flags)
    assert env["PATH"].startswith("/usr/local/cuda/bin:") and env["CUDA_HOME"] == "/usr/local/cuda"
    assert f"check_image.sh {row.version} {row.gcc_max}" in bo.before_all  # the image is checked before compiling
    assert plan.torch_on_pypi == build.on_pypi


@pytest.mark.parametrize("cuda", BUILT)
def test_cibuildwheel_prints_the_plans_identifiers(cuda):
    pythons = [p for p in mx.load().torch_line(mx.load().row(cuda).default_torch).python if int(p[2:]) >= 10]
    plan = plan_for(cuda, python=[pythons[0], pythons[-1]])  # the project itself requires >= 3.10
    r = _proc.run([sys.executable, "-m", "cibuildwheel", "--print-build-identifiers", "--platform", "linux"],
                  cwd=ROOT, env={**os.environ, **plan.environment}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = [f"cp3{p.split('.')[1]}-manylinux_x86_64" for p in (pythons[0], pythons[-1])]
    assert r.stdout.split() == plan.identifiers == want


def test_default_python_comes_from_pyproject():
    plan = plan_for("13.0")
    r = _proc.run([sys.executable, "-m", "cibuildwheel", "--print-build-identifiers", "--platform", "linux"],
                  cwd=ROOT, env={k: v for k, v in os.environ.items() if not k.startswith("CIBW_")},
                  capture_output=True, text=True, check=True)
    assert plan.identifiers == r.stdout.split()


def test_cu118_torch_27_takes_our_manylinux_2_28_image():
    plan = plan_for("11.8", "2.7.1")
    assert plan.image_origin == "ours" and plan.manylinux == "manylinux_2_28"
    assert plan.image.endswith("manylinux_2_28_x86_64_cuda_11.8")
    assert any("cxx11 ABI" in n and "sameli/manylinux2014" in n for n in plan.notes)
    assert any("ABI trap" in n for n in plan.notes)
    assert plan.cudnn_requirement == "nvidia-cudnn-cu11==9.1.0.70"


def test_cu118_torch_25_takes_amelis_manylinux2014_image():
    plan = plan_for("11.8", "2.5.1")
    assert plan.image == "sameli/manylinux2014_x86_64_cuda_11.8"
    assert plan.manylinux == "manylinux2014" and plan.image_origin == "ameli"


def test_public_image_wins_where_one_fits():
    plan = plan_for("12.9")
    assert plan.image == "quay.io/manylinux_cuda/manylinux_2_28_x86_64_cuda12_9"


def test_registry_prefixes_our_images():
    env = {"WHEELCI_IMAGE_REGISTRY": "ghcr.io/acme/"}
    assert plan_for("11.8", "2.7.1", env=env).image == "ghcr.io/acme/cuda-wheel-ci/manylinux_2_28_x86_64_cuda_11.8"
    assert plan_for("11.8", "2.5.1", env=env).image == "sameli/manylinux2014_x86_64_cuda_11.8"


def test_the_plan_reads_the_environment_it_is_given_never_the_process_one(monkeypatch, tmp_path):
    """make_plan is a function of its inputs: the process's variables change nothing, the given ones do."""
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    given = {"WHEELCI_IMAGE_REGISTRY": "ghcr.io/acme", "CCACHE_DIR": str(tmp_path / "cc")}
    before = plan_for("11.8", "2.7.1")
    for name, value in {**given, "SSL_CERT_FILE": str(ca)}.items():
        monkeypatch.setenv(name, value)
    assert plan_for("11.8", "2.7.1") == before
    plan = plan_for("11.8", "2.7.1", env=given, facts=pl.Facts(ca_bundle=str(ca)))
    assert plan.image.startswith("ghcr.io/acme/") and plan.ccache_dir == str(tmp_path / "cc")
    create = plan.environment["CIBW_CONTAINER_ENGINE"]
    assert f"--volume={tmp_path / 'cc'}:/ccache" in create and f"--volume={ca}:" in create
    cpu = pl.make_plan(pl.Request(cuda=None, engine="host"), project_dir=ROOT, env={"PATH": "/x:/y", "CUDA_HOME": "/c"}, facts=pl.Facts(nvcc_dirs=("/x",)))
    assert (cpu.cpu_view.nvcc_dirs, cpu.cpu_view.unset) == (["/x"], ["CUDA_HOME"])


def test_cpu_plan():
    plan = pl.make_plan(pl.Request(cuda=None), project_dir=ROOT)
    assert (plan.torch, plan.torch_index_url, plan.manylinux, plan.engine) == (
        "2.13.0", "https://download.pytorch.org/whl/cpu", "manylinux_2_28", "host")
    assert plan.cudnn_requirement is None and plan.image is None and plan.arch_list == ""
    assert plan.environment["CIBW_MANYLINUX_X86_64_IMAGE"] == "manylinux_2_28"
    assert cibw_options(plan).build_options(plan.identifiers[0]).manylinux_images["x86_64"].startswith(
        "quay.io/pypa/manylinux_2_28_x86_64")


def test_arch_list_override_is_validated_and_used():
    plan = plan_for("12.8", arch_list="8.0 9.0+PTX")
    assert plan.arch_list == "8.0;9.0+PTX"
    assert "TORCH_CUDA_ARCH_LIST='8.0;9.0+PTX'" in plan.environment["CIBW_ENVIRONMENT_LINUX"]


def test_host_engine_sets_no_container_engine():
    plan = plan_for("13.0", engine="host")
    assert plan.engine == "host" and "CIBW_CONTAINER_ENGINE" not in plan.environment


def test_project_name_comes_from_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other-ext"\nrequires-python = ">=3.12"\n')
    with pytest.raises(CiError, match=r"other-ext requires Python >=3\.12: not 3\.11"):
        pl.make_plan(pl.Request(cuda="13.0", python=["3.11"], engine="docker"), project_dir=tmp_path)


@pytest.mark.parametrize("kw,message", [
    (dict(cuda="11.9"), r"unsupported CUDA version '11\.9' \(supported: 11\.8, 12\.6, 12\.8, 12\.9, 13\.0"),
    (dict(cuda="11.8", torch="2.8.0"), r"torch 2\.8\.0 has no CUDA 11\.8 build \(torch 2\.8\.0 is built for CUDA 12\.6"),
    (dict(cuda="13.0", torch="2.5.1"), r"torch 2\.5\.1 has no CUDA 13\.0 build"),
    (dict(cuda="13.0", torch="1.0.0"), r"torch 1\.0\.0 is not on file://\S+ \(newest there: none\)"),
    (dict(cuda="13.0", arch_list="5.0;8.6"), r"nvcc 13\.0 rejects arch 5\.0"),
    (dict(cuda="13.0", python=["3.9"]), r"requires Python >=3\.10: not 3\.9"),
    (dict(cuda="11.8", torch="2.4.1", python=["3.13"]), r"torch 2\.4\.1 has no wheels for Python 3\.13"),
    (dict(cuda="13.0", python=["311"]), r"bad --python '311'"),
    (dict(cuda="13.0", python=["3.11\n"]), r"bad --python '3\.11\\n'"),  # `$` passed a trailing newline
    (dict(cuda=None, torch="2.13.0\n"), r"bad torch version '2\.13\.0\\n'"),
    (dict(cuda="13.0", engine="lxc"), r"unknown engine 'lxc'"),
    (dict(cuda=None, torch="9.9.9"), r"torch 9\.9\.9 is not on file://"),
    (dict(cuda=None, arch_list="8.0"), r"--arch-list needs --cuda"),
])
def test_refused_with_the_reason(kw, message, tmp_path):
    """A torch the matrix does not list is looked up on the index: here an index with no torch at all."""
    (tmp_path / "simple" / "torch").mkdir(parents=True)
    (tmp_path / "simple" / "torch" / "index.html").write_text("<html><body></body></html>")
    index = TorchIndex((tmp_path / "simple").as_uri(), tmp_path / "cache")
    kw.setdefault("engine", "docker")
    with pytest.raises(CiError, match=message):
        pl.make_plan(pl.Request(**kw), project_dir=ROOT, index=index)


def test_missing_pyproject(tmp_path):
    with pytest.raises(CiError, match="neither pyproject.toml nor setup.py: not a Python project"):
        pl.make_plan(pl.Request(cuda="13.0", engine="docker"), project_dir=tmp_path)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return _proc.run([sys.executable, "-m", "ci.plan", *args], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.parametrize("cuda", BUILT)
def test_cli_json_has_the_contract_keys(cuda):
    r = run_cli("--cuda", cuda, "--engine", "docker", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert REQUIRED_KEYS <= data.keys()
    assert data["cuda"] == cuda and data["identifiers"] and data["environment"]["CIBW_BUILD"]


def test_cli_text_summary():
    r = run_cli("--cuda", "11.8", "--torch", "2.7.1", "--engine", "docker")
    assert r.returncode == 0
    assert re.search(r"^image\s+cuda-wheel-ci/manylinux_2_28_x86_64_cuda_11\.8 \[manylinux_2_28\]$", r.stdout, re.M)
    assert "note: cu118 ABI trap" in r.stdout


@pytest.mark.parametrize("args", [["--cuda", "10.2"], ["--cuda", "11.8", "--torch", "2.9.1"],
                                  ["--cuda", "13.0", "--arch-list", "5.0"], ["--engine", "lxc"],
                                  ["--cuda", "13.0", "--python", "3.x"]])
def test_cli_bad_input_is_one_line_exit_2(args):
    r = run_cli(*args)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("python -m ci.plan: error: ")


def test_py3_wheel_notes_that_one_build_serves_every_python():
    plan = plan_for("13.0", python=["3.12", "3.10"])
    assert plan.python == ["3.10", "3.12"]
    assert any("builds it once, for Python 3.10, and reuses it for 3.12" in n for n in plan.notes)


def test_before_build_installs_the_no_isolation_build_and_repair_tools():
    """`build --no-isolation` and `python -m ci.repair` (which runs auditwheel) both use the build venv;
    their versions come from the mounted constraints file, not from rewritten requirements."""
    plan = plan_for("12.8")
    torch_step, rest = plan.environment["CIBW_BEFORE_BUILD_LINUX"].split(" && ")
    words = shlex.split(rest)
    assert words[:4] == ["pip", "install", "-c", cibw.CONTAINER_CONSTRAINTS]
    named = {re.split(r"[<>=!~\[]", w, maxsplit=1)[0] for w in words[4:]}
    assert {"cmake", "ninja", "auditwheel", "pyelftools", "scikit-build-core", "build"} <= named
    assert "scikit-build-core>=0.10" in words  # the project's own requirement, as written
    pins = constraints.read()
    assert plan.tool_constraints == [f"{n}=={v}" for n, v in pins.items()]
    assert not any(w.startswith("torch") for w in words) and "torch==" in torch_step  # torch first, from its index
    mount = f"--volume={constraints.file_for(plan.tool_constraints)}:{cibw.CONTAINER_CONSTRAINTS}:ro"
    assert mount in plan.environment["CIBW_CONTAINER_ENGINE"]


def test_no_fitting_image_is_refused_with_the_reason():
    """A row whose only image is a manylinux2014 devtoolset one cannot build a cxx11-ABI torch."""
    text = mx.MATRIX_FILE.read_text()
    m = mx.parse(text)
    row = m.row("11.8")
    only_2014 = dataclasses.replace(row, images=tuple(i for i in row.images if i.manylinux == "manylinux2014"))
    with pytest.raises(CiError, match=r"no build image for CUDA 11\.8 \+ torch 2\.7\.1: it needs a manylinux_2_28 "
                                      r"image with GCC <= 11 that emits the cxx11 ABI; sameli/manylinux2014_x86_64_"
                                      r"cuda_11\.8 passed over: its manylinux2014 devtoolset cannot emit"):
        pl.pick_image(m, only_2014, m.torch_line("2.7.1"), "2.7.1")
    hot = dataclasses.replace(row, gcc_max=9)
    with pytest.raises(CiError, match=r"its GCC 10 is above what nvcc 11\.8 accepts \(9\)"):
        pl.pick_image(m, hot, m.torch_line("2.5.1"), "2.5.1")


def _run_before_all_script(command: str) -> subprocess.CompletedProcess:
    """Run a before-all step here as sh runs it in the container, from this checkout's ci/resources."""
    script = command.replace(cibw.CONTAINER_SCRIPTS, str(ROOT / "ci/src/wheelci/resources/container"))
    env = {k: v for k, v in os.environ.items() if k not in ("CUDAHOSTCXX", "CUDA_HOME")}  # as the image's defaults
    return _proc.run(["sh", "-c", script], capture_output=True, text=True, env=env)


def test_before_all_checks_run_in_a_real_shell(tmp_path):
    """Run the image check here, against this machine's own toolkit and compiler, as sh runs it there
    (a machine with no toolkit at /usr/local/cuda fails every row's nvcc check, as an image would)."""
    from wheelci.engine import nvcc_version

    toolkit = Path("/usr/local/cuda/bin/nvcc")
    have = nvcc_version(toolkit) if toolkit.exists() else None
    gcc = int(_proc.run(["g++", "-dumpversion"], capture_output=True, text=True).stdout.split(".")[0])
    for row in (mx.load().row(v) for v in BUILT):
        steps = plan_for(row.version).environment["CIBW_BEFORE_ALL_LINUX"].split(" && ")
        assert steps[0] == f"sh {cibw.CONTAINER_SCRIPTS}/check_image.sh {row.version} {row.gcc_max}"
        assert steps[1].startswith(f"sh {cibw.CONTAINER_SCRIPTS}/ensure_ccache.sh") and len(steps) == 2, steps
        r = _run_before_all_script(steps[0])
        if row.version != have:
            assert r.returncode == 1 and f"build image does not have CUDA {row.version}:" in r.stdout, r.stdout
        elif gcc > row.gcc_max:
            assert r.returncode == 1, r.stdout
            assert f"build image GCC {gcc} is above what nvcc {row.version} accepts ({row.gcc_max})" in r.stdout
        else:
            assert r.returncode == 0 and r.stdout == "", r.stdout
    cpu = pl.make_plan(pl.Request(cuda=None), project_dir=ROOT).environment["CIBW_BEFORE_ALL_LINUX"]
    assert cpu == f"sh {cibw.CONTAINER_SCRIPTS}/ensure_ccache.sh"
    assert _run_before_all_script(f"{cpu} {tmp_path}").returncode == 0  # its CXX shim here, not where the image has it
    assert (tmp_path / "cache").read_text() == '#!/bin/sh\nexec ccache "$@"\n' and os.access(tmp_path / "cache", os.X_OK)
    assert (tmp_path / "c++").read_text() == f'#!/bin/sh\nexec {tmp_path}/cache c++ "$@"\n' and os.access(tmp_path / "c++", os.X_OK)


def test_the_image_check_names_a_too_new_gcc(tmp_path):
    """The compiler half of the check, with this machine's g++ and a ceiling below it. The toolkit half must
    pass first: an image's nvcc banner (`release 13.0,`), from a toolkit directory of the test's own."""
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    check = f"CUDA_HOME={tmp_path / 'cuda'} sh {cibw.CONTAINER_SCRIPTS}/check_image.sh 13.0"
    assert _run_before_all_script(f"{check} 99").returncode == 0
    gcc = int(_proc.run(["g++", "-dumpversion"], capture_output=True, text=True).stdout.split(".")[0])
    r = _run_before_all_script(f"{check} {gcc - 1}")
    assert r.returncode == 1
    assert r.stdout.strip() == f"build image GCC {gcc} is above what nvcc 13.0 accepts ({gcc - 1})"
    broken = _run_before_all_script(f"CUDAHOSTCXX=/nonexistent/g++ {check} 99")
    assert broken.returncode == 1
    assert broken.stdout.strip() == "build image has no working host compiler (/nonexistent/g++ -dumpversion gave '')"


@pytest.mark.parametrize("value", ["BUILD_RUNNER=ON", "a b", "it's", 'say "hi"', "x;y&z|w", "", "$HOME/lib", "a\\b", "it's a\\b"])
def test_project_env_survives_cibuildwheels_parser(value):
    """[tool.wheelci] env / --env reach the container as cibuildwheel itself reads them (its own parser)."""
    from cibuildwheel.environment import parse_environment

    plan = pl.make_plan(pl.Request(cuda=None, engine="docker"), run=pl.RunSettings(build_env={"MY_VALUE": value, "OTHER": "1"}))
    env = parse_environment(plan.environment["CIBW_ENVIRONMENT_LINUX"]).as_dictionary({"HOME": "/root"})
    assert env["MY_VALUE"] == value.replace("$HOME", "/root") and env["OTHER"] == "1"


@pytest.mark.parametrize("patterns", [["libfoo*.so*"], ["lib bar.so", "it's*.so", "x;rm -rf y"]])
def test_excludes_reach_the_containers_repair_as_cibuildwheel_runs_it(patterns):
    """The container's repair command was a fixed string: --exclude and [tool.wheelci] exclude were
    dropped, and auditwheel grafted what the host build would have left out."""
    import shlex
    from cibuildwheel.util.helpers import prepare_command

    plan = pl.make_plan(pl.Request(cuda=None, engine="docker"), run=pl.RunSettings(excludes=patterns))
    cmd = prepare_command(plan.environment["CIBW_REPAIR_WHEEL_COMMAND_LINUX"], wheel="/tmp/w.whl", dest_dir="/out")
    argv = shlex.split(cmd)
    assert argv[argv.index("wheelci.repair"):argv.index("wheelci.repair") + 4] == ["wheelci.repair", "-w", "/out", "/tmp/w.whl"]
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--exclude"] == patterns


def test_dry_run_shows_the_projects_excludes_in_the_repair_command(tmp_path):
    from tests.test_settings import project_with
    project = project_with(tmp_path, 'exclude = "libfoo*.so*"')
    from tests._wheels import run_stage
    r = run_stage("ci.build", project, "--cpu", "--engine", "docker", "--exclude", "libbar.so*", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "--exclude 'libfoo*.so*' --exclude 'libbar.so*'" in r.stdout


def test_find_links_keeps_the_index_the_host_installs_torch_from(tmp_path):
    """D4: with --find-links the container's pip takes torch from pip's sources (find-links first), but the
    host's environments (the build's, verify's) still need the index the release lives on; the plan
    said None and verify failed with "torch 2.7.1 for CUDA 11.8 is only on None"."""
    from wheelci.compile.host import torch_spec

    row = mx.load().row("11.8")
    plan = pl.make_plan(pl.Request(cuda="11.8", torch="2.7.1", engine="docker", find_links=tmp_path), project_dir=ROOT)
    assert plan.torch_index_url == row.torch_index_url
    assert torch_spec(plan).index_url == row.torch_index_url
    before = plan.environment["CIBW_BEFORE_BUILD_LINUX"]
    assert "torch==2.7.1" in before and "--index-url" not in before.split("&&")[0]  # the container: find-links
    given = pl.make_plan(pl.Request(cuda="11.8", torch="2.7.1", engine="docker", find_links=tmp_path, torch_index_url="https://mirror.example/whl/cu118"), project_dir=ROOT)
    assert given.torch_index_url == "https://mirror.example/whl/cu118"
    cpu = pl.make_plan(pl.Request(cuda=None, engine="host", find_links=tmp_path), project_dir=ROOT)
    assert cpu.torch_index_url == mx.load().cpu_index_url


def test_a_variant_set_is_every_job_with_variant_and_the_plain_cpu_wheel():
    """A release with PEP 825 variants needs its plain wheel (a machine without a GPU installs it), so the
    CPU job is in even when --cuda names only CUDA versions; every job builds with --variant."""
    jobs = workflow_matrix(None, ["13.0"], variants=True)["include"]
    assert [(j["name"], j["args"], j["engine"]) for j in jobs] == [
        ("cpu", "--cpu --variant", "host"), ("cuda13.0", "--cuda 13.0 --variant", "docker")]
    everything = workflow_matrix(None, None, variants=True)["include"]
    assert everything[0]["name"] == "cpu" and len(everything) == len(BUILT) + 1  # rows with a torch of their own
    assert all(j["args"].endswith(" --variant") for j in everything)
    assert [j["name"] for j in workflow_matrix(None, None)["include"]] == [f"cuda{v}" for v in BUILT]


def test_make_plan_takes_a_request_and_derived_values_are_computed_once():
    """make_plan takes the request, the run's settings and the machine (not a parameter per option), and
    what the plan derives (the stable-ABI flags, a CPU build's view of the toolkit) is read from the Plan,
    never computed again by the compile."""
    import ast
    import inspect

    assert len(inspect.signature(pl.make_plan).parameters) <= 8
    package = ROOT / "ci" / "src" / "wheelci"
    callers = {str(path.relative_to(package)) for path in package.rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("stable_flags", "cpu_view")}
    assert callers == {"plan.py"}
    plan = plan_for(None, engine="host", stable_abi="2.10", env={"PATH": os.environ["PATH"]})
    assert plan.stable_flags["CI_STABLE_ABI"] == "2.10" and plan.cpu_view is not None


def test_the_dry_run_says_a_build_environment_is_reused_only_when_one_is_there(tmp_path):
    """It said "the cached build environment of this torch" with none cached: the build then spent
    minutes making one. What it claims is reused is checked as the build checks it, and nothing is made."""
    from tests._wheels import run_stage
    from wheelci.compile.hostenv import STAMP

    cache = tmp_path / "cache"
    r = run_stage("ci.build", "--cpu", "--engine", "host", "--dry-run", env={"WHEELCI_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stderr
    (row,) = [line for line in r.stdout.splitlines() if line.startswith("torch ")]
    assert "none cached yet: this build makes one at " in row and "reused" not in row and "cached build" not in row
    assert not cache.exists()  # the dry run made nothing
    root = cache / "envs" / f"torch-2.13.0-cpu-py{sys.version_info.major}{sys.version_info.minor}"
    site = root / "lib" / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to(sys.executable)
    (root / STAMP).write_text(json.dumps({"site": str(site), "version": "2.13.0+cpu", "cuda": None, "requires": []}))
    r = run_stage("ci.build", "--cpu", "--engine", "host", "--dry-run", env={"WHEELCI_CACHE_DIR": str(cache)})
    (row,) = [line for line in r.stdout.splitlines() if line.startswith("torch ")]
    assert f"the cached build environment {root} (torch 2.13.0+cpu), reused" in row


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_setup_py_only_project_is_refused_at_once_for_a_container_build(tmp_path, dry_run):
    """With an engine there, the README's CUDA command spent minutes on a project without pyproject.toml,
    then stopped with "no pyproject.toml" and no next step. Refused in the plan, before anything is made."""
    import shutil
    from tests._wheels import run_stage

    project = tmp_path / "legacy"
    shutil.copytree(ROOT / "tests" / "fixtures" / "tiny_ext", project)
    (project / "pyproject.toml").unlink()
    cache, out = tmp_path / "cache", tmp_path / "out"
    args = ["--dry-run"] if dry_run else ["-w", out]
    r = run_stage("ci.build", project, "--cuda", "13.0", "--engine", "docker", *args,
                  env={"WHEELCI_CACHE_DIR": str(cache)})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "setup.py without a pyproject.toml" in r.stderr and "--engine host" in r.stderr, r.stderr
    assert "[build-system] requires lists setuptools and torch" in r.stderr and "Traceback" not in r.stderr
    assert not cache.exists() and not out.exists() and not r.stdout  # nothing made, no plan printed
    assert not (project / "pyproject.toml").exists() and not (project / "build").exists()


def test_the_container_environment_is_made_once_from_the_plan_s_fields(tmp_path):
    """cibuildwheel's variables are a function of the finished plan's fields: a stable-ABI plan with
    excludes, build variables and a given image gets the same environment when it is made again from
    those fields, and the fields say what the shell text says (the cuDNN floor, the torch index)."""
    plan = plan_for("13", excludes=["libx.so*"], build_env={"A": "1"}, stable_abi="2.10",
                    image="localhost/mine:1")
    machine = pl.Machine({}, pl.Facts(), Path(plan.ccache_dir), Path(constraints.file_for(plan.tool_constraints)),
                         TorchIndex.from_env({}))
    assert cibw.container_environment(pl.container_inputs(plan, machine)) == plan.environment
    before = plan.environment["CIBW_BEFORE_BUILD_LINUX"]
    assert plan.cudnn_requirement and plan.cudnn_requirement in before
    assert f"--index-url {plan.container_index}" in before
    assert plan.environment[cibw.image_variable("x86_64")] == "localhost/mine:1" == plan.images["x86_64"]
    assert "--exclude 'libx.so*'" in plan.environment["CIBW_REPAIR_WHEEL_COMMAND_LINUX"]
    assert plan.environment["CIBW_ENVIRONMENT_LINUX"].endswith("A='1'")


@pytest.mark.parametrize("backend,cuda,torch", [("setuptools", "13.0", "2.11.0"), ("setuptools", None, "2.9.1"),
                                                ("setuptools", "13.0", "2.13.0"), ("scikit-build-core", "13.0", "2.11.0"),
                                                ("meson-python", None, "2.9.1")])
def test_the_container_puts_ccache_in_front_of_the_compilers_as_the_backend_takes_it(backend, cuda, torch):
    """Read as cibuildwheel reads it: CMake gets launchers; a setuptools build against a torch that does not
    put ccache in front of its compilers itself (before 2.13) the one-word CXX that ensure_ccache.sh writes
    and ccache before nvcc, against a newer one nothing (torch's own); Meson neither; pip byte-compiles nothing."""
    from wheelci.config.compilecache import torch_finds_ccache

    from cibuildwheel.environment import parse_environment

    from wheelci.engine import Engine

    inputs = cibw.ContainerInputs(engine=Engine("docker"), images={"x86_64": "img"}, identifiers=["cp311-manylinux_x86_64"],
                                  torch_requirement="torch==2.13.0", torch_index=None, cudnn=None, build_requires=[],
                                  cuda=cuda, arch_list="9.0", nvcc_flags=[], tools=Path("/t"), ccache=Path("/c"),
                                  backend=backend, torch_finds_ccache=torch_finds_ccache(torch))
    env = parse_environment(cibw.container_environment(inputs)["CIBW_ENVIRONMENT_LINUX"]).as_dictionary({"PATH": "/bin"})
    launchers = {k for k in env if k.endswith("_COMPILER_LAUNCHER")}
    assert env["PIP_COMPILE"] == "false" and "CCACHE_BASEDIR" not in env  # relative paths would change the wheel
    if backend == "scikit-build-core":
        assert launchers == {"CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_CUDA_COMPILER_LAUNCHER"}
        assert "CXX" not in env
    elif backend == "setuptools" and torch != "2.13.0":
        assert not launchers and env["CXX"] == cibw.CONTAINER_CXX and env["TORCH_NO_COMPILER_WRAPPER"] == "1"
        script = cibw.container_environment(inputs)["CIBW_BEFORE_ALL_LINUX"].split(" && ")[-1]
        assert script == f"sh {cibw.CONTAINER_SCRIPTS}/ensure_ccache.sh /usr/local/lib/wheelci-ccache"
        assert env.get("PYTORCH_NVCC") == (f"ccache {cibw.CONTAINER_CUDA_HOME}/bin/nvcc" if cuda else None)
    else:
        assert not launchers and "CXX" not in env and "TORCH_NO_COMPILER_WRAPPER" not in env


@pytest.mark.parametrize("backend,torch", [("setuptools", "2.11.0"), ("setuptools", "2.13.0"),
                                           ("scikit-build-core", "2.13.0")])
def test_a_narrowed_container_build_sends_every_nvcc_call_through_the_narrowing_first(backend, torch):
    """--arch-list in a container, read as cibuildwheel reads it: CMake's CUDA launcher, cpp_extension's
    PYTORCH_NVCC (the ninja path) and CUDA_HOME's nvcc (its one-file path, a root narrowing.sh makes after
    the image is checked) each run resources/nvcc_targets.py in front of the cache; not narrowed, none."""
    from cibuildwheel.environment import parse_environment

    from wheelci.config.compilecache import torch_finds_ccache
    from wheelci.engine import Engine

    def env_of(narrow: bool) -> tuple[dict[str, str], list[str]]:
        inputs = cibw.ContainerInputs(engine=Engine("docker"), images={"x86_64": "img"}, identifiers=["cp311-manylinux_x86_64"],
                                      torch_requirement=f"torch=={torch}", torch_index=None, cudnn=None, build_requires=[],
                                      cuda="13.0", arch_list="8.0;9.0+PTX", nvcc_flags=[], tools=Path("/t"), ccache=Path("/c"),
                                      backend=backend, torch_finds_ccache=torch_finds_ccache(torch), narrow=narrow)
        made = cibw.container_environment(inputs)
        return (parse_environment(made["CIBW_ENVIRONMENT_LINUX"]).as_dictionary({"PATH": "/bin"}),
                made["CIBW_BEFORE_ALL_LINUX"].split(" && "))

    front = ["python", "-I", "-S", cibw.CONTAINER_NARROW, "8.0,9.0+PTX", "--"]
    env, before_all = env_of(True)
    if backend == "scikit-build-core":
        assert env["CMAKE_CUDA_COMPILER_LAUNCHER"].split(";") == [*front, "ccache"]
        assert env["CUDA_HOME"] == cibw.CONTAINER_CUDA_HOME and not any("narrowing.sh" in s for s in before_all)
    else:
        assert shlex.split(env["PYTORCH_NVCC"]) == [*front, "ccache", f"{cibw.CONTAINER_CUDA_HOME}/bin/nvcc"]
        assert env["CUDA_HOME"] == cibw.CONTAINER_NARROW_ROOT and env["PATH"] == f"{cibw.CONTAINER_NARROW_ROOT}/bin:/bin"
        # after the image's check (which reads the image's own nvcc), with ccache inside only where torch
        # does not put its own in front of CUDA_HOME's nvcc
        assert before_all[0].startswith(f"sh {cibw.CONTAINER_SCRIPTS}/check_image.sh ")
        launcher = ["ccache"] if torch == "2.11.0" else []
        assert before_all[-1] == f"sh {cibw.CONTAINER_SCRIPTS}/narrowing.sh " + shlex.join(
            [cibw.CONTAINER_NARROW_ROOT, "8.0,9.0+PTX", *launcher]), before_all
    plain, before_all = env_of(False)
    assert cibw.CONTAINER_NARROW not in " ".join([*plain.values(), *before_all])
    assert plain["CUDA_HOME"] == cibw.CONTAINER_CUDA_HOME


def test_the_library_builds_from_typed_options_and_prints_no_plan(capsys):
    """The library's entry: build(Options, Project) -> BuildResult, no dict of parsed arguments, and the
    printing (the plan, the JSON) is the command's: a dry run through the library returns the plan only."""
    from wheelci import build
    from wheelci.config.options import Options

    with build.opened(ROOT / "tests" / "fixtures" / "tiny_ext") as project:
        result = build.build(Options(cuda=None, dry_run=True, json=True), project)
    assert isinstance(result, build.BuildResult) and result.report is None and result.wheels == ()
    assert result.plan.cuda is None and result.plan.project == "tiny-ext"
    assert capsys.readouterr().out == ""


def test_an_sdist_builds_with_its_own_time(tmp_path):
    """An sdist has no git commit: its SOURCE_DATE_EPOCH is its newest member's time (kept by the
    extraction), the same on every rebuild and machine, not "now"; the variable still wins."""
    import io
    import tarfile

    sdist = tmp_path / "tiny_ext-0.1.0.tar.gz"
    source = ROOT / "tests" / "fixtures" / "tiny_ext"
    with tarfile.open(sdist, "w:gz") as tar:
        for i, path in enumerate(sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts)):
            info = tar.gettarinfo(str(path), f"tiny_ext-0.1.0/{path.relative_to(source)}")
            info.mtime = 1_700_000_000 + i
            with path.open("rb") as f:
                tar.addfile(info, f)
        pkg = b"Metadata-Version: 2.1\nName: tiny_ext\nVersion: 0.1.0\n"
        info = tarfile.TarInfo("tiny_ext-0.1.0/PKG-INFO")
        info.size, info.mtime = len(pkg), 1_690_000_000
        tar.addfile(info, io.BytesIO(pkg))
    newest = 1_700_000_000 + i
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    for extra, want in (({}, newest), ({"SOURCE_DATE_EPOCH": "1234567890"}, 1234567890)):
        r = _proc.run([sys.executable, "-m", "wheelci", "plan", str(sdist), "--cpu", "--json"],
                      capture_output=True, text=True, env={**env, **extra}, timeout=300)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["source_date_epoch"] == want
