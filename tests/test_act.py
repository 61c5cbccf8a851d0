"""The real workflow files (wheels.yml calling build.yml) run under act, jobs on this host: a push plans
the jobs; a manual run builds the example's CPU wheel on this host and publishes it to a pypiserver on
loopback; bad input fails in the plan job with one line. Offline stand-ins replace the marketplace
actions (tests/_act.py); act runs in a copy of the checkout.

And as another repository uses it: a project of its own calls acme/wheelci/.github/workflows/build.yml
by tag (a throwaway git copy of this checkout, tagged, given to act with --local-repository), with no
wheelci release on any index and no wheelci input, and its CPU wheel is built with the tool from that
repository's tagged commit."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import tomllib
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

import wheelci
from tests._act import WORKFLOWS, ActRun, Standins, commit_tree, copy_checkout, run_act, write_standins
from tests._servers import PypiServer
from wheelci.config.project import read_settings
from wheelci.errors import CiError
from wheelci.workflowmatrix import workflow_matrix
from tests import _proc

pytestmark = [pytest.mark.act, pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parent.parent
CLEANUP_STEP = "Free disk space (GitHub-hosted runners only)"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return copy_checkout(tmp_path_factory.mktemp("repo"))


@pytest.fixture
def standins(tmp_path) -> Standins:
    return write_standins(tmp_path / "standins", tmp_path / "artifacts", tmp_path / "caches")


def the_matrix(run: ActRun) -> dict:
    return json.loads(run.outputs("plan")["matrix"])


def guarded_paths() -> list[str]:
    """What the cleanup step would delete, read from build.yml itself."""
    text = (WORKFLOWS / "build.yml").read_text()
    script = text[text.index(CLEANUP_STEP):text.index("- uses:", text.index(CLEANUP_STEP))]
    rm = script[script.index("rm -rf"):script.index("docker system prune")]
    paths = re.findall(r"(/[\w./-]+)", rm)
    assert "/opt/hostedtoolcache" in paths, rm
    return paths


def machine_state() -> set[str]:
    """What a cleanup run on this machine would delete: the guarded directories present, Docker's images
    (when an engine answers). Others may add to it meanwhile; nothing of it may go."""
    state = {p for p in guarded_paths() if os.path.exists(p)}
    try:
        images = _proc.run(["docker", "images", "-q", "--no-trunc"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return state
    return state | ({f"docker image {i}" for i in images.stdout.split()} if images.returncode == 0 else set())


def test_push_runs_the_plan_job(checkout, standins, tmp_path):
    run = run_act(checkout, tmp_path, standins, "push")
    assert run.returncode == 0, run.summary()
    assert run.job_result("plan") == "success"
    # the matrix the tool computes for this repository's example, every CUDA job in a container
    settings = read_settings(ROOT)
    expected = workflow_matrix(settings.stable_abi, None, settings.variants)
    assert the_matrix(run) == expected and expected["include"]
    assert {row["engine"] for row in expected["include"]} == {"docker"}
    # a push to main publishes nothing, so no secret is asked for
    assert "Check the publish secrets" in run.skipped_steps("plan")
    assert "publish" not in run.jobs()
    # container jobs are left out here (--matrix engine:host): none of their steps ran
    assert "wheels" not in run.jobs()


def test_dispatch_builds_on_this_host_and_publishes(checkout, standins, tmp_path):
    """A manual run as the scheduled one runs: a torch range, only what the private index lacks, published.
    Run again, it builds nothing and says so."""
    user, token = f"publisher-{secrets.token_hex(6)}", secrets.token_hex(24)
    before = machine_state()
    with PypiServer(tmp_path / "index", user, token) as index:
        values = {"PRIVATE_INDEX_URL": index.url, "PRIVATE_INDEX_USER": user, "PRIVATE_INDEX_TOKEN": token}
        inputs = {"cuda": "cpu", "publish": "true", "torch": ">=2.13,<2.14", "skip-published": "true"}
        run = run_act(checkout, tmp_path / "run", standins, "workflow_dispatch", inputs=inputs, secrets=values)
        assert run.returncode == 0, run.summary()
        assert [run.job_result(j) for j in ("plan", "wheels", "publish")] == ["success"] * 3
        assert the_matrix(run) == workflow_matrix(None, ["cpu"])

        # the wheels job built on this host and stored its wheel and report as an artifact
        assert "Build" in run.started("wheels")
        (row,) = the_matrix(run)["include"]  # one job; its artifact is named with the torch it builds against
        artifact = f"wheels-{row['name']}-torch{row['torch']}"
        assert sorted(p.name for p in standins.artifacts.iterdir()) == ["index", artifact]
        stored = standins.artifacts / artifact
        (wheel,) = stored.glob("*.whl")
        assert {p.name for p in stored.iterdir()} == {wheel.name, "report.json", "report.md"}
        assert json.loads((stored / "report.json").read_text())
        # the publish job indexed the release it uploads (the static index, kept as an artifact)
        page = (standins.artifacts / "index" / "simple" / "softmax-ext" / "index.html").read_text()
        assert wheel.name in page

        # the publish job put that very file on the index
        with urllib.request.urlopen(index.url + "simple/softmax-ext/", timeout=30) as page:
            assert wheel.name in page.read().decode()
        with urllib.request.urlopen(index.url + "packages/" + wheel.name, timeout=60) as served_file:
            served = served_file.read()
        assert hashlib.sha256(served).hexdigest() == hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert "- cpu (torch 2.13.0)" in run.printed("plan")  # the summary: what this run built

        # the next run finds the wheel published: no job, no publish, and the plan says why
        again = run_act(checkout, tmp_path / "again", standins, "workflow_dispatch", inputs=inputs, secrets=values)
        assert again.returncode == 0, again.summary()
        assert again.outputs("plan")["jobs"] == "0" and {"wheels", "publish"}.isdisjoint(again.jobs())
        printed = "\n".join(again.printed("plan"))
        assert f"note: cpu (torch 2.13.0): {wheel.name} is already published: not built again" in printed, printed
        assert "None: nothing new to build." in printed
        assert sorted(p.name for p in (tmp_path / "index" / "packages").iterdir()) == [wheel.name]

        # and pip installs it from there into a fresh venv
        venv = tmp_path / "venv"
        _proc.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        pip = _proc.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--isolated", "--no-cache-dir",
                         "--no-deps", "--index-url", index.url + "simple/", "softmax-ext"],
                        capture_output=True, text=True, env=env)
        assert pip.returncode == 0, pip.stdout + pip.stderr
        version = _proc.run([str(venv / "bin" / "python"), "-c",
                             "import importlib.metadata as m; print(m.version('softmax-ext'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
        assert wheel.name.startswith(f"softmax_ext-{version}-")

    # no secret value in any stored artifact file (wheel members read uncompressed) nor in act's output
    for value in values.values():
        assert value.encode() not in (run.log + again.log).encode(), "a secret shows in act's output"
        for path in (p for p in standins.artifacts.rglob("*") if p.is_file()):
            assert value.encode() not in path.read_bytes(), path
            if zipfile.is_zipfile(path):
                with zipfile.ZipFile(path) as z:
                    assert not [n for n in z.namelist() if value.encode() in z.read(n)], path

    # the machine-changing step never ran on this (self-hosted) machine, and nothing it deletes went
    assert CLEANUP_STEP in run.skipped_steps("wheels") and CLEANUP_STEP not in run.started("wheels")
    assert before <= machine_state(), before - machine_state()


def test_unknown_cuda_fails_in_the_plan_job(checkout, standins, tmp_path):
    run = run_act(checkout, tmp_path, standins, "workflow_dispatch", inputs={"cuda": "99.9"})
    assert run.returncode != 0
    assert run.job_result("plan") == "failure"
    with pytest.raises(CiError) as refused:
        workflow_matrix(None, ["99.9"])
    errors = [line for line in run.printed("plan") if "error" in line.lower()]
    assert errors == [f"wheelci plan: error: {refused.value}"], run.printed("plan")
    assert run.step_result("plan", "One job per CUDA version, or per variant for stable-ABI wheels") == "failure"
    assert not {"wheels", "publish"} & run.jobs()


def test_publish_without_secrets_fails_before_anything(checkout, standins, tmp_path):
    run = run_act(checkout, tmp_path, standins, "workflow_dispatch", inputs={"cuda": "cpu", "publish": "true"})
    assert run.returncode != 0
    assert run.job_result("plan") == "failure"
    assert run.started("plan") == ["Check the publish secrets"]
    assert run.step_result("plan", "Check the publish secrets") == "failure"
    said = [r["arg"] for r in run.of("plan") if r.get("command") == "error"]  # the ::error:: annotation
    assert len(said) == 1 and all(s in said[0] for s in ("PRIVATE_INDEX_URL", "PRIVATE_INDEX_USER",
                                                          "PRIVATE_INDEX_TOKEN")), said
    assert not {"wheels", "publish"} & run.jobs() and not any(standins.artifacts.glob("*"))


def test_a_version_tag_publishes(checkout, standins, tmp_path):
    """A pushed tag v* publishes (so it asks for the secrets first: none here, so it stops there)."""
    run = run_act(checkout, tmp_path, standins, "push", payload={"ref": "refs/tags/v0.5.0"})
    assert run.returncode != 0 and run.job_result("plan") == "failure"
    assert run.started("plan") == ["Check the publish secrets"]
    assert not {"wheels", "publish"} & run.jobs()


# ---- another repository calling build.yml by tag ----

TAG = f"v{wheelci.__version__}"
CALLED = f"acme/wheelci/.github/workflows/build.yml@{TAG}"
TOOL_STEP = "Choose the tool's source"
OUTSIDE_WORKFLOW = f"""\
name: wheels
on: [push, workflow_dispatch]
permissions:
  contents: read
jobs:
  wheels:
    uses: {CALLED}
    with:
      cuda: cpu
"""


@pytest.fixture(scope="module")
def tool_repository(tmp_path_factory) -> tuple[Path, str]:
    """A throwaway git copy of this checkout, tagged TAG: the repository acme/wheelci the outside
    project's workflow names. Its tag's commit."""
    repo = copy_checkout(tmp_path_factory.mktemp("wheelci"))
    _proc.run(["git", "-C", str(repo), "tag", TAG], check=True)
    sha = _proc.run(["git", "-C", str(repo), "rev-parse", f"{TAG}^{{commit}}"], capture_output=True, text=True,
                    check=True).stdout.strip()
    return repo, sha


@pytest.fixture(scope="module")
def outside_repository(tmp_path_factory) -> Path:
    """A project of its own (the tiny setuptools extension), with nothing of wheelci but its workflow's
    `uses:` line."""
    dest = tmp_path_factory.mktemp("outside") / "tiny-ext"
    shutil.copytree(ROOT / "tests" / "fixtures" / "tiny_ext", dest,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (dest / ".github" / "workflows").mkdir(parents=True)
    (dest / ".github" / "workflows" / "wheels.yml").write_text(OUTSIDE_WORKFLOW)
    requires = tomllib.loads((dest / "pyproject.toml").read_text())["build-system"]["requires"]
    assert not (dest / "ci").exists() and not any("wheelci" in r for r in requires)  # its [tool.wheelci] only
    return commit_tree(dest, "an extension of its own")


def test_the_outside_workflow_is_lint_clean(outside_repository):
    """What the test runs is a workflow GitHub would take (actionlint, the schema)."""
    from tests.test_workflow import check_schema, lint, ACTIONLINT

    path = outside_repository / ".github" / "workflows" / "wheels.yml"
    assert lint(ACTIONLINT, path) == [] and check_schema(path).returncode == 0


def test_another_repository_builds_its_cpu_wheel_with_the_tool_of_the_tag(outside_repository, tool_repository,
                                                                          standins, tmp_path):
    """No wheelci release on any index and no wheelci input: the tool comes from the called workflow's
    own repository at the tag's commit. act leaves the job context that names it (job.workflow_repository,
    job.workflow_sha) empty, so the runner names the same source, as a self-hosted runner or an older
    GitHub Enterprise Server would: WHEELCI_TOOL_SOURCE, through act's --env."""
    tool, sha = tool_repository
    source = f"git+file://{tool}@{sha}#subdirectory=ci"
    run = run_act(outside_repository, tmp_path, standins, "push", env={"WHEELCI_TOOL_SOURCE": source},
                  repositories={f"acme/wheelci@{TAG}": tool})
    assert run.returncode == 0, run.summary()
    assert [run.job_result(j) for j in ("plan", "wheels")] == ["success"] * 2
    assert "publish" not in run.jobs()
    # the plan job took the runner's source, the job context being empty here
    assert f"the tool from the runner's WHEELCI_TOOL_SOURCE: {source}" in run.printed("plan")
    (row,) = the_matrix(run)["include"]
    assert row == workflow_matrix(None, ["cpu"])["include"][0]

    # the wheels job's tool came from that git repository at the tag's commit (pip's own record of it)
    printed = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in run.printed("wheels")]  # pip's colours end before it
    (origin,) = [line for line in printed if line.startswith("wheelci ") and " installed from " in line]
    version, _, recorded = origin[len("wheelci "):].partition(" installed from ")
    direct_url = json.loads(recorded)
    assert version == wheelci.__version__
    assert direct_url["url"] == f"file://{tool}" and direct_url["subdirectory"] == "ci", direct_url
    assert direct_url["vcs_info"]["vcs"] == "git" and direct_url["vcs_info"]["commit_id"] == sha, direct_url

    # it built, verified and stored the project's CPU wheel and its report
    artifact = f"wheels-{row['name']}-torch{row['torch']}"
    assert sorted(p.name for p in standins.artifacts.iterdir()) == [artifact]
    stored = standins.artifacts / artifact
    (wheel,) = stored.glob("*.whl")
    assert wheel.name.startswith("tiny_ext-0.1.0+pt") and ".cpu-" in wheel.name, wheel.name
    assert {p.name for p in stored.iterdir()} == {wheel.name, "report.json", "report.md"}
    report = json.loads((stored / "report.json").read_text())
    assert report["passed"] is True and report["plan"]["cuda"] is None and report["plan"]["torch"] == row["torch"]
    assert report["verify"]["test_command"].startswith("ok ("), report["verify"]


def test_another_repository_without_a_source_for_the_tool_stops_in_the_plan_job(outside_repository,
                                                                                tool_repository, standins, tmp_path):
    """Neither the wheelci input, the job context (empty under act) nor the runner names the tool: the plan
    job stops at its first step with one line saying what to pass, before anything is checked out."""
    tool, _ = tool_repository
    run = run_act(outside_repository, tmp_path, standins, "push", repositories={f"acme/wheelci@{TAG}": tool})
    assert run.returncode != 0 and run.job_result("plan") == "failure"
    assert run.started("plan") == [TOOL_STEP] and run.step_result("plan", TOOL_STEP) == "failure"
    said = [r["arg"] for r in run.of("plan") if r.get("command") == "error"]  # the ::error:: annotation
    assert len(said) == 1 and said[0].startswith("no source for the tool: "), said
    assert "pass the input wheelci" in said[0] and "WHEELCI_TOOL_SOURCE" in said[0]
    assert not {"wheels", "publish"} & run.jobs() and not any(standins.artifacts.glob("*"))


# ---- the fan-out: compile-only jobs warm a shared compile cache for the job that builds the wheel ----

# tiny_ext with its device code free of torch's headers (cicc over them takes minutes a part on a loaded
# 2-core machine): the kernel and a launcher in the .cu file, the op and its registration in the .cpp
LIGHT_CUDA = """\
#include <cstdint>

namespace {
__global__ void add_one_kernel(const float* in, float* out, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = in[i] + 1.0f;
}
}  // namespace

void tiny_add_one_launch(const float* in, float* out, int64_t n) {
  const int threads = 256;
  add_one_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads>>>(in, out, n);
}
"""
LIGHT_CPP = """\
#include <torch/extension.h>

namespace {
at::Tensor add_one_cpu(const at::Tensor& x) { return x + 1; }
}  // namespace

TORCH_LIBRARY(tiny_ext, m) { m.def("add_one(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(tiny_ext, CPU, m) { m.impl("add_one", &add_one_cpu); }

#ifdef WITH_CUDA
void tiny_add_one_launch(const float* in, float* out, int64_t n);

namespace {
at::Tensor add_one_cuda(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "add_one: float32 on CUDA");
  auto in = x.contiguous();
  auto out = at::empty_like(in);
  if (in.numel() > 0) tiny_add_one_launch(in.data_ptr<float>(), out.data_ptr<float>(), in.numel());
  return out;
}
}  // namespace

TORCH_LIBRARY_IMPL(tiny_ext, CUDA, m) { m.impl("add_one", &add_one_cuda); }
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}
"""
LIGHT = "tests/fixtures/tiny_ext_light"


@pytest.fixture
def light_checkout(tmp_path) -> Path:
    """The checkout with LIGHT, tiny_ext of a cheap device compile, committed beside it; wheels.yml installs
    the tool editable from the copy's ci/, one path for every job. A store hit needs the compiler's
    arguments alike, and a build's nvcc and C++ flags name the tool's own glibc_compat header: where the
    workflow installs the tool, $RUNNER_TEMP/wheelci, is one path on every GitHub-hosted runner, but act
    gives each job a temporary directory of its own."""
    repo = copy_checkout(tmp_path / "repo-light")
    caller = repo / ".github" / "workflows" / "wheels.yml"
    assert caller.read_text().count("wheelci: ./ci\n") == 1
    caller.write_text(caller.read_text().replace("wheelci: ./ci\n", f"wheelci: --editable={repo / 'ci'}\n"))
    dest = repo / LIGHT
    shutil.copytree(ROOT / "tests" / "fixtures" / "tiny_ext", dest,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (dest / "csrc" / "tiny_cuda.cu").write_text(LIGHT_CUDA)
    (dest / "csrc" / "tiny.cpp").write_text(LIGHT_CPP)
    git = ["git", "-C", str(repo), "-c", "user.name=act test", "-c", "user.email=act@example.invalid",
           "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null"]
    _proc.run([*git, "add", "-A"], check=True)
    _proc.run([*git, "commit", "-q", "-m", "a tiny extension of a cheap device compile"], check=True)
    return repo


@pytest.mark.timeout(2400)  # CUDA compiles of a tiny extension, on a loaded machine
def test_arch_jobs_warm_the_compile_cache_for_the_wheels_job(light_checkout, standins, tmp_path):
    """arch-jobs 2 over the arch list 8.0;9.0, every job on this host (engine host: CUDA from the host's
    nvcc, torch from the tool cache's build environment), one Redis as the store: a warm job per arch
    compiles it into the store and nothing more; the wheels job then takes every device compile from the
    store, repairs, verifies and uploads. The store's password is a secret (COMPILE_CACHE_URL, which wins
    over the input naming the same Redis without it: a build that took the input would fail every read)."""
    from tests._servers import Redis

    password = secrets.token_hex(16)
    with Redis(tmp_path / "redis", password=password) as store:
        plain = f"redis://127.0.0.1:{store.port}"
        run = run_act(light_checkout, tmp_path / "run", standins, "workflow_dispatch",
                      inputs={"cuda": "13.0", "engine": "host", "project": LIGHT,
                              "arch-list": "8.0;9.0", "arch-jobs": "2", "compile-cache": plain},
                      secrets={"COMPILE_CACHE_URL": store.url},
                      # the build tree at one path in every job, as RUNNER_TEMP is on every GitHub-hosted
                      # runner (act gives each job a temporary directory of its own)
                      env={"WHEELCI_WORK_DIR": str(tmp_path / "tree")})
    assert run.returncode == 0, run.summary()
    assert [run.job_result(j) for j in ("plan", "warm", "wheels")] == ["success"] * 3, run.summary()
    assert "publish" not in run.jobs()
    warm_rows = json.loads(run.outputs("plan")["warm"])["include"]
    assert [(r["arch_list"], r["engine"]) for r in warm_rows] == [("8.0", "host"), ("9.0", "host")]
    (row,) = the_matrix(run)["include"]
    assert row["engine"] == "host" and row["args"] == "--cuda 13.0"

    # each warm job compiled its part into the store and kept no wheel: its arch's PTX and cubin are misses
    # (the device-side preprocessing, the same for every arch, is a hit in the part that runs second)
    stored = sorted(p.name for p in standins.artifacts.iterdir())
    artifact = f"wheels-{row['name']}-torch{row['torch']}"
    assert stored == sorted([artifact] + [f"compile-{r['name']}-torch{r['torch']}" for r in warm_rows]), stored
    for r in warm_rows:
        part = standins.artifacts / f"compile-{r['name']}-torch{r['torch']}"
        assert {p.name for p in part.iterdir()} == {"report.json", "report.md"}
        report = json.loads((part / "report.json").read_text())
        assert report["plan"]["arch_list"] == r["arch_list"], report["plan"]
        cache = report["compile_cache"]
        assert cache["used"] and cache["storage"] == f"redis {plain}" and cache["errors"] == 0, cache
        assert cache["device"]["misses"] >= 2, cache

    # the wheels job took every device compile of the full list from the store, and the .cpp file's host
    # compile; the .cu file's host half misses: it embeds the fatbinary of every arch, a list no warm job
    # compiled whole.
    wheels = standins.artifacts / artifact
    (wheel,) = wheels.glob("*.whl")
    report = json.loads((wheels / "report.json").read_text())
    assert report["plan"]["arch_list"] == "8.0;9.0", report["plan"]
    cache = report["compile_cache"]
    assert cache["used"] and cache["storage"] == f"redis {plain}" and cache["errors"] == 0, cache
    assert cache["device"]["misses"] == 0 and cache["device"]["hits"] >= 2, cache
    assert cache["host"]["hits"] >= 1, cache
    assert report["passed"] is True and report["verify"]["test_command"].startswith("ok ("), report["verify"]
    assert wheel.name.startswith("tiny_ext-0.1.0+pt") and ".cu130-" in wheel.name, wheel.name

    # the store's password shows nowhere: act's output, the artifacts (wheel members read uncompressed)
    assert password not in run.log
    for path in (p for p in standins.artifacts.rglob("*") if p.is_file()):
        assert password.encode() not in path.read_bytes(), path
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                assert not [n for n in z.namelist() if password.encode() in z.read(n)], path
