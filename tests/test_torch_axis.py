"""The torch axis of a matrix: `--torch` as one release, latest, a range or last:N, expanded over the
releases an index lists (a real index on disk, PEP 691 with PEP 658 metadata, and PyPI itself in the
network tier) and the CUDA builds each has; `--skip-published` against an index on loopback that holds
part of the matrix; `verify --require-gpu`'s outcome."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tests import _proc
from tests._servers import GuardedServer
from wheelci.config import matrix as mx
from wheelci.config.releases import TorchIndex
from wheelci.config.torchaxis import parse, project_bound
from wheelci.errors import CiError
from wheelci.publish.published import Identity, skipped
from wheelci.verify import gpu_outcome
from wheelci.workflowmatrix import torch_matrix

ROOT = Path(__file__).resolve().parent.parent
TORCH_13_2 = "2.16.0"  # a release the matrix does not list, built on CUDA 13.2 as its metadata says


@pytest.mark.parametrize("text, picked", [
    ("2.13.0", ["2.13.0"]),                                     # one release, as written (need not be listed)
    ("latest", ["2.16.0"]),
    (">=2.14", ["2.14.0", "2.14.1", "2.15.0", "2.16.0"]),       # patch releases too: a wheel pins torch==X.Y.Z
    ("2.12-2.14", ["2.12.0", "2.13.0", "2.14.0", "2.14.1"]),    # both minors whole
    (">=2.12,<2.14", ["2.12.0", "2.13.0"]),
    ("~=2.14.0", ["2.14.0", "2.14.1"]),
    ("last:2", ["2.15.0", "2.16.0"]),
    (" LAST:3 ", ["2.14.0", "2.14.1", "2.15.0", "2.16.0"]),
])
def test_the_axis_names_releases(text, picked):
    releases = ["2.12.0", "2.13.0", "2.14.0", "2.14.1", "2.15.0", "2.16.0"]
    assert parse(text).select(releases) == picked


@pytest.mark.parametrize("text, words", [
    ("2.13", "bad --torch '2.13' (want a release such as 2.13.0, latest, a range"),
    ("2.14-2.12", "the range runs from 2.14 down to 2.12: give the lower first"),
    ("last:0", "give last:1 to last:24"),
    ("===2.13.0", "bad --torch"),       # an arbitrary-equality string is no range of releases
    (">=2.x", "bad --torch"),
    ("2.13.0\n", None),                 # surrounding blanks are no part of it: one release
    ("", "bad --torch ''"),             # blank: no range of every release
    ("  ", "bad --torch ''"),
])
def test_a_bad_axis_is_one_line(text, words):
    if words is None:
        assert parse(text).single
        return
    with pytest.raises(CiError) as e:
        parse(text)
    assert words in str(e.value) and "\n" not in str(e.value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_text_is_an_axis_or_one_line(text):
    try:
        axis = parse(text)
    except CiError as e:
        assert "\n" not in str(e) and len(str(e)) < 400
        return
    assert axis.select(["2.12.0", "2.13.0"]) is not None


@pytest.mark.parametrize("requires, bound", [
    (["torch>=2.4,<2.14", "ninja"], "<2.14,>=2.4"),
    (["Torch >= 2.10"], ">=2.10"),
    (["torch", "numpy"], None),                     # no specifier: no bound
    (['torch<2.8; python_version < "3.9"'], None),  # only under a marker: not the build's
    (["not a requirement ((", "torch<3"], "<3"),
])
def test_the_project_bound_is_its_torch_specifier(requires, bound):
    assert project_bound(requires) == bound


# --- the expansion over an index ----------------------------------------------------------------


def local_index(root: Path, releases: dict[str, str | None]) -> TorchIndex:
    """A PEP 691 torch page on disk with PEP 658 metadata: each release's Linux wheel, its metadata pinning
    that CUDA's toolkit (None: a CPU build)."""
    page = root / "torch"
    page.mkdir(parents=True)
    files = []
    for version, cuda in releases.items():
        name = f"torch-{version}-cp311-cp311-manylinux_2_28_x86_64.whl"
        pins = f"Requires-Dist: cuda-toolkit[cudart]=={cuda}.1\nRequires-Dist: nvidia-cudnn-cu13==9.30.0.1\n" if cuda else ""
        (page / f"{name}.metadata").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
                                               f"Requires-Python: >=3.11\n{pins}")
        files.append({"filename": name, "url": name, "hashes": {}, "core-metadata": True})
    (page / "index.json").write_text(json.dumps({"meta": {"api-version": "1.1"}, "name": "torch", "files": files}))
    return TorchIndex(root.as_uri(), root / "cache")


def names(jobs: dict) -> list[tuple[str, str]]:
    return [(row["name"], row["torch"]) for row in jobs["include"]]


def test_each_release_gets_the_cuda_builds_it_has(tmp_path):
    """A release the matrix lists: the matrix's CUDA rows of it; one it does not: the CUDA its metadata pins
    (what the build then reads), every release with CPU. What was named and has no build is a note."""
    matrix = mx.load()
    index = local_index(tmp_path / "index", {"2.13.0": "13.0", TORCH_13_2: "13.2"})
    jobs, notes = torch_matrix(parse(">=2.14"), index, None, ["cpu", "13.0", "13.2"])
    listed = sorted({t.version for r in matrix.rows for t in r.torch if tuple(map(int, t.version.split("."))) >= (2, 14)},
                    key=lambda v: tuple(map(int, v.split("."))))
    expected = []
    for version in [*listed, TORCH_13_2]:
        expected.append(("cpu", version))
        expected += [(f"cuda{c}", version) for c in ("13.0", "13.2")
                     if (matrix.row(c).torch_build(version) or (version == TORCH_13_2 and c == "13.2"))]
    assert names(jobs) == expected
    assert f"no CUDA 13.0 build of torch {listed[-1]}, {TORCH_13_2}: no job of those" in notes, notes
    assert all(row["torch"] for row in jobs["include"])


def test_the_day_a_release_lands_only_its_rows_are_new(tmp_path):
    """The same caller (last:2) before and after torch 2.16.0 reaches the index: the second plan holds
    every job of the first that 2.16.0 did not push out of the newest two minors, plus 2.16.0's own."""
    before = torch_matrix(parse(">=2.15"), local_index(tmp_path / "a", {"2.15.0": "13.2"}), None, ["cpu", "13.2"])
    after = torch_matrix(parse(">=2.15"), local_index(tmp_path / "b", {"2.15.0": "13.2", TORCH_13_2: "13.2"}),
                         None, ["cpu", "13.2"])
    new = [j for j in names(after.jobs) if j not in names(before.jobs)]
    assert names(before.jobs) == [("cpu", "2.15.0"), ("cuda13.2", "2.15.0")]
    assert new == [("cpu", TORCH_13_2), ("cuda13.2", TORCH_13_2)]


def test_a_stable_abi_project_collapses_to_one_job_per_variant(tmp_path):
    index = local_index(tmp_path / "index", {TORCH_13_2: "13.2"})
    jobs, notes = torch_matrix(parse(">=2.9"), index, "2.10", None)
    assert [row["name"] for row in jobs["include"]] == ["stable-cpu", "stable-cu12", "stable-cu13"]
    # each against the newest release named that its variant's row builds (a stable build's rows are the
    # matrix's: a release it does not list yet waits for its row)
    assert [row["torch"] for row in jobs["include"]] == ["2.15.0", "2.10.0", "2.14.1"]
    assert any("before the stable-ABI floor 2.10" in n and "2.9.1" in n for n in notes), notes


def test_last_n_counts_the_minors_within_the_projects_bound(tmp_path):
    """A project capped below the newest torch: last:2 is its newest two minors, not the index's, and the
    releases past its cap are a note (its daily run keeps building within the cap)."""
    index = local_index(tmp_path / "index", {TORCH_13_2: "13.2"})
    jobs, notes = torch_matrix(parse("last:2"), index, None, ["cpu"], bound="<2.15")
    assert names(jobs) == [("cpu", "2.13.0"), ("cpu", "2.14.0"), ("cpu", "2.14.1")]
    assert f"torch 2.15.0, {TORCH_13_2}: outside the project's own torch<2.15: no job" in notes, notes


def test_a_stable_abi_latest_is_the_newest_its_rows_build(tmp_path):
    """latest the day a torch the matrix does not list lands: the stable variants still build (against the
    newest release their rows list), since each serves every torch from the floor on."""
    index = local_index(tmp_path / "index", {TORCH_13_2: "13.2"})
    jobs, notes = torch_matrix(parse("latest"), index, "2.10", None)
    assert [row["name"] for row in jobs["include"]] == ["stable-cpu", "stable-cu12", "stable-cu13"]
    assert any(TORCH_13_2 in n and "not in the matrix yet" in n for n in notes), notes


def test_a_release_without_the_jobs_python_builds_with_one_it_has(tmp_path):
    """Without --python a job builds with Python 3.11; a release with no 3.11 wheels gets a job with the
    lowest newer Python it has, and a note, not a job its build refuses."""
    page = tmp_path / "index"
    index = local_index(page, {TORCH_13_2: "13.2"})
    torch_dir = page / "torch"
    data = json.loads((torch_dir / "index.json").read_text())
    (entry,) = data["files"]
    metadata = (torch_dir / f"{entry['filename']}.metadata").read_text()
    data["files"] = []
    for py in ("cp312", "cp313"):  # 2.16.0's wheels for 3.12 and 3.13 only
        name = entry["filename"].replace("cp311-cp311", f"{py}-{py}")
        (torch_dir / f"{name}.metadata").write_text(metadata)
        data["files"].append({**entry, "filename": name, "url": name})
    (torch_dir / "index.json").write_text(json.dumps(data))
    jobs, notes = torch_matrix(parse("latest"), index, None, ["cpu"])
    assert jobs["include"][0]["python"] == "3.12" and jobs["include"][0]["name"] == "cpu-py3.12"
    assert f"torch {TORCH_13_2}: no Python 3.11 wheels, or the project does not allow it: its jobs build with " \
        "Python 3.12" in notes, notes
    # and the project's requires-python chooses among the Pythons the release has
    jobs, notes = torch_matrix(parse("latest"), index, None, ["cpu"], requires_python=">=3.13")
    assert jobs["include"][0]["python"] == "3.13"
    with pytest.raises(CiError, match="no wheels for a Python the project allows"):
        torch_matrix(parse("latest"), index, None, ["cpu"], requires_python="<3.12")


def test_without_a_torch_each_job_keeps_within_the_projects_bound(tmp_path):
    """No --torch (a push's matrix) for a project capped at torch<2.8: each CUDA row's newest release inside
    the cap instead of its default, the rows with none left out, each said."""
    index = local_index(tmp_path / "index", {})
    jobs, notes = torch_matrix(None, index, None, None, bound="<2.8")
    assert {row["torch"] for row in jobs["include"]} == {"2.7.1"}
    assert [row["name"] for row in jobs["include"]] == ["cuda11.8", "cuda12.6", "cuda12.8"]
    assert "CUDA 13.0: no release it builds is within the project's own torch<2.8: no job" in notes, notes
    assert any(n.startswith("CUDA 12.6: torch 2.7.1, the newest it builds within") for n in notes), notes


def test_a_release_the_matrix_does_not_list_is_planned_from_its_index(tmp_path):
    """--torch 2.16.0 alone: its CPU job and the CUDA its metadata pins, as a range of one."""
    index = local_index(tmp_path / "index", {TORCH_13_2: "13.2"})
    jobs, _ = torch_matrix(parse(TORCH_13_2), index, None, ["cpu", "13.2"])
    assert names(jobs) == [("cpu", TORCH_13_2), ("cuda13.2", TORCH_13_2)]
    with pytest.raises(CiError, match="before the stable-ABI floor 2.12"):
        torch_matrix(parse("2.11.9"), index, "2.12", ["13"])


def test_pythons_a_release_lacks_are_left_out_with_a_note(tmp_path):
    index = local_index(tmp_path / "index", {})
    jobs, notes = torch_matrix(parse("2.14-2.15"), index, None, ["cpu"], python=["3.10", "3.15"])
    assert names(jobs) == [("cpu-py3.10", "2.14.0"), ("cpu-py3.10", "2.14.1"), ("cpu-py3.15", "2.15.0")]
    assert "torch 2.15.0 has no wheels for Python 3.10: no job of those" in notes


@pytest.mark.parametrize("args, words", [
    (dict(axis=">=9.0"), "--torch >=9.0: no torch release on the index is in it"),
    (dict(axis=">=2.14", bound="<2.14"), "no job: torch 2.14.0, 2.14.1, 2.15.0: outside the project's own torch<2.14"),
    (dict(axis="last:1", bound="<2.4"), "no job: torch 2.15.0: outside the project's own torch<2.4"),
    (dict(axis=">=2.14", cuda=["12.8"]), "no job is left (no CUDA 12.8 build of torch"),
    (dict(axis="last:2", variants=True), "with --variant: a release's variant wheels name no torch"),
    (dict(axis="last:2", cuda=["99.0"]), "--cuda 99.0: no such CUDA version in the matrix"),
])
def test_an_axis_that_leaves_no_job_is_one_line(tmp_path, args, words):
    index = local_index(tmp_path / "index", {})
    with pytest.raises(CiError) as e:
        torch_matrix(parse(args.pop("axis")), index, None, args.pop("cuda", None), **args)
    assert words in str(e.value), e.value


def plan(*args: str, env: dict[str, str] | None = None, project: Path = ROOT) -> subprocess.CompletedProcess:
    return _proc.run([sys.executable, "-m", "wheelci", "plan", *args, "--project-dir", str(project)],
                     capture_output=True, text=True, cwd=ROOT, env={**os.environ, **(env or {})})


def test_the_project_bound_and_the_dry_run_table(tmp_path):
    """A project capped at torch<2.14 gets no job of 2.14 or later, and the plan says why; without
    --workflow-matrix the plan prints the jobs as a table."""
    project = tmp_path / "capped"
    project.mkdir()
    (project / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools", "torch>=2.12,<2.14"]\n'
                                            '[project]\nname = "capped"\nversion = "1.0"\n')
    index = local_index(tmp_path / "index", {})
    env = {"WHEELCI_TORCH_INDEX": index.url}
    r = plan("--workflow-matrix", "--torch", ">=2.13", "--cuda", "cpu", env=env, project=project)
    assert r.returncode == 0, r.stderr
    assert names(json.loads(r.stdout)) == [("cpu", "2.13.0")]
    assert "note: torch 2.14.0, 2.14.1, 2.15.0: outside the project's own torch<2.14,>=2.12: no job" in r.stderr
    table = plan("--torch", ">=2.13", "--cuda", "cpu", env=env, project=project)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == ["job", "torch", "python", "runner", "arguments"]
    assert table.stdout.splitlines()[-1] == "1 job(s)"
    built = _proc.run([sys.executable, "-m", "wheelci", "build", str(project), "--cpu", "--torch", ">=2.13"],
                      capture_output=True, text=True, cwd=ROOT)
    assert built.returncode == 2 and "a build is against one torch release" in built.stderr
    assert len(built.stderr.splitlines()) == 1


# --- only what is missing -------------------------------------------------------------------------

PROJECT = Identity("softmax-ext", "0.3.0")


def row(name: str, args: str, torch: str, python: str | None = None, runner: str = "ubuntu-latest") -> dict:
    r = {"name": name, "args": args, "engine": "host", "kind": "cpu" if "--cpu" in args else "cuda",
         "torch": torch, "runner": runner}
    return {**r, "python": python} if python else r


CU130 = row("cuda13.0", "--cuda 13.0", "2.13.0")


@pytest.mark.parametrize("published, job, py_api, found", [
    ("softmax_ext-0.3.0+pt2.13.0.cu130-py3-none-manylinux_2_28_x86_64.whl", CU130, "py3", True),
    ("softmax_ext-0.3.0+pt2.13.0.cu130-py3-none-manylinux_2_28_x86_64.whl", row("cuda13.0", "--cuda 13.0", "2.14.0"), "py3", False),
    ("softmax_ext-0.3.0+pt2.13.0.cu130-py3-none-manylinux_2_28_x86_64.whl", row("cpu", "--cpu", "2.13.0"), "py3", False),
    ("softmax_ext-0.2.0+pt2.13.0.cpu-py3-none-manylinux_2_28_x86_64.whl", row("cpu", "--cpu", "2.13.0"), "py3", False),  # an older version
    ("softmax_ext-0.3.0+pt2.13.0.cpu-py3-none-manylinux_2_28_x86_64.whl",
     row("cpu-aarch64", "--cpu --archs aarch64", "2.13.0", runner="ubuntu-24.04-arm"), "py3", False),  # another machine
    # the tags the project's wheel.py-api makes of the job's Python, on a manylinux platform
    ("softmax_ext-0.3.0+pt2.13.0.cpu-cp312-cp312-manylinux_2_28_x86_64.whl", row("cpu-py3.11", "--cpu", "2.13.0", "3.11"), "", False),
    ("softmax_ext-0.3.0+pt2.13.0.cpu-cp311-cp311-manylinux_2_28_x86_64.whl", row("cpu-py3.11", "--cpu", "2.13.0", "3.11"), "", True),
    ("softmax_ext-0.3.0+pt2.13.0.cpu-cp310-abi3-manylinux_2_28_x86_64.whl", row("cpu-py3.12", "--cpu", "2.13.0", "3.12"), "cp310", True),
    ("softmax_ext-0.3.0+pt2.13.0.cpu-cp39-abi3-manylinux_2_28_x86_64.whl", row("cpu-py3.12", "--cpu", "2.13.0", "3.12"), "cp310", False),
    ("softmax_ext-0.3.0+pt2.13.0.cu130-py3-none-musllinux_1_2_x86_64.whl", CU130, "py3", False),
    ("softmax_ext-0.3.0+pt2.13.0.cu130-py3-none-linux_x86_64.whl", CU130, "py3", False),
    ("softmax_ext-0.3.0+pt2.13.0.cu130-cp311-cp311-manylinux_2_28_x86_64.whl", CU130, "py3", False),
    ("softmax_ext-0.3.0+pt2.13.0.cu130-py3-none-any.whl", CU130, "py3", False),
    ("softmax_ext-0.3.0+pt2.13.0.cu130-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", CU130, "py3", True),
    # only the label the job gives: a CUDA-only or unlabelled file may be another build's (a plain CPU wheel)
    ("softmax_ext-0.3.0+cu130-py3-none-manylinux_2_28_x86_64.whl", CU130, "py3", False),
    ("softmax_ext-0.3.0-py3-none-manylinux_2_28_x86_64.whl", CU130, "py3", False),
    ("softmax_ext-0.3.0-py3-none-manylinux_2_28_x86_64.whl", row("cpu", "--cpu", "2.13.0"), "py3", False),
    ("softmax_ext-0.3.0+cu13-py3-none-manylinux_2_28_x86_64.whl",
     row("stable-cu13", "--cuda 13 --stable-abi 2.10", "2.15.0"), "py3", True),
    ("softmax_ext-0.3.0-py3-none-manylinux_2_28_x86_64-cu130.whl", row("cuda13.0", "--cuda 13.0 --variant", "2.13.0"), "py3", True),
    ("softmax_ext-0.3.0-py3-none-manylinux_2_28_x86_64-cu128.whl", row("cuda13.0", "--cuda 13.0 --variant", "2.13.0"), "py3", False),
    ("softmax_ext-0.3.0-py3-none-manylinux_2_28_x86_64.whl", row("cpu", "--cpu --variant", "2.13.0"), "py3", True),
    ("Softmax.Ext-0.3.0+pt2.13.0.cpu-py3-none-manylinux_2_28_x86_64.whl", row("cpu", "--cpu", "2.13.0"), "py3", True),  # normalized
    ("softmax_ext-0.3.0+pt2.13.0.cpu.tar.gz", row("cpu", "--cpu", "2.13.0"), "py3", False),
])
def test_a_job_is_published_when_its_wheel_is(published, job, py_api, found):
    kept, notes = skipped([job], [published], PROJECT, py_api)
    assert (kept == []) is found
    if found:
        assert notes == [f"{job['name']} (torch {job['torch']}): {published} is already published: not built again"]


def test_a_local_version_named_by_the_user_is_its_label():
    job = row("cpu", "--cpu", "2.13.0")
    name = "softmax_ext-0.3.0+{}-py3-none-manylinux_2_28_x86_64.whl"
    assert skipped([job], [name.format("internal.7")], PROJECT, "py3", local_version="internal.7")[0] == []
    assert skipped([job], [name.format("pt2.13.0.cpu")], PROJECT, "py3", local_version="internal.7")[0] == [job]


def simple_page(root: Path, name: str, files: list[str]) -> None:
    page = root / "simple" / name
    page.mkdir(parents=True)
    (page / "index.html").write_text("".join(f'<a href="../../packages/{f}">{f}</a>\n' for f in files))


def test_skip_published_against_an_index_holding_part_of_the_matrix(tmp_path):
    """A private index on loopback (Basic auth on every path) holds torch 2.13.0's wheels: the plan drops
    those jobs, names each file, and keeps 2.14's; the credentials come from TWINE_USERNAME/PASSWORD as
    the upload's do and appear nowhere; a wrong one is one line."""
    user, token = "publisher", secrets.token_hex(16)
    project = tmp_path / "p"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "softmax-ext"\nversion = "0.3.0"\n'
                                            '[tool.scikit-build]\nwheel.py-api = "py3"\n')
    held = ["softmax_ext-0.3.0+pt2.13.0.cpu-py3-none-manylinux_2_28_x86_64.whl",
            "softmax_ext-0.3.0+pt2.13.0.cu130-py3-none-manylinux_2_28_x86_64.whl"]
    simple_page(tmp_path / "srv", "softmax-ext", held)
    env = {"WHEELCI_TORCH_INDEX": local_index(tmp_path / "index", {}).url,
           "TWINE_USERNAME": user, "TWINE_PASSWORD": token}
    with GuardedServer(tmp_path / "srv", user, token) as server:
        args = ["--workflow-matrix", "--torch", "2.13-2.14", "--cuda", "cpu,13.0", "--skip-published"]
        r = plan(*args, server.url + "simple/", env=env, project=project)
        assert r.returncode == 0, r.stderr
        assert names(json.loads(r.stdout)) == [("cpu", "2.14.0"), ("cuda13.0", "2.14.0"), ("cpu", "2.14.1"),
                                               ("cuda13.0", "2.14.1")]
        assert [line for line in r.stderr.splitlines() if "already published" in line] == [
            f"wheelci plan: note: cpu (torch 2.13.0): {held[0]} is already published: not built again",
            f"wheelci plan: note: cuda13.0 (torch 2.13.0): {held[1]} is already published: not built again"]
        # `upload`: the upload's own index (TWINE_REPOSITORY_URL), its simple pages where the upload reads them
        again = plan(*args, "upload", env={**env, "TWINE_REPOSITORY_URL": server.url}, project=project)
        assert again.returncode == 0 and again.stdout == r.stdout, again.stderr
        # every job published: nothing to build, said so; an empty matrix, which the workflow runs no job for
        only = plan("--workflow-matrix", "--torch", "2.13.0", "--cuda", "cpu,13.0", "--skip-published",
                    server.url + "simple/", env=env, project=project)
        assert json.loads(only.stdout) == {"include": []}
        assert "note: every job's wheel is already published: nothing to build" in only.stderr
        wrong = plan(*args, server.url + "simple/", env={**env, "TWINE_PASSWORD": "not-" + token}, project=project)
        assert wrong.returncode == 2 and wrong.stdout == "" and len(wrong.stderr.splitlines()) == 1, wrong.stderr
        assert "401" in wrong.stderr
        for out in (r, again, only, wrong):
            assert token not in out.stdout + out.stderr
    assert all(token not in str(seen) or "Authorization" in seen[2] for seen in server.seen)


def test_a_project_the_index_does_not_have_yet_skips_nothing(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "brand-new"\nversion = "0.1"\n')
    (tmp_path / "srv" / "simple").mkdir(parents=True)
    env = {"WHEELCI_TORCH_INDEX": local_index(tmp_path / "index", {}).url}
    with GuardedServer(tmp_path / "srv") as server:
        r = plan("--workflow-matrix", "--torch", "2.13.0", "--cuda", "cpu", "--skip-published",
                 server.url + "simple/", env=env, project=project)
    assert r.returncode == 0, r.stderr
    assert names(json.loads(r.stdout)) == [("cpu", "2.13.0")]


def test_a_dynamic_version_cannot_be_matched(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "dyn"\ndynamic = ["version"]\n')
    r = plan("--workflow-matrix", "--cuda", "cpu", "--skip-published", "http://127.0.0.1:9/simple/", project=project)
    assert r.returncode == 2 and "dyn's version is known only once it is built" in r.stderr, r.stderr


# --- proven on a GPU ------------------------------------------------------------------------------


@pytest.mark.parametrize("checks, device, outcome", [
    ({"gpu": "ok (NVIDIA H200)", "test_command": "ok (3 passed in 2s)", "test a::b": "ok", "test a::c": "skipped: x"},
     True, "ok: NVIDIA H200, 1 of 2 tests ran"),
    # a command that reports no tests (unittest, `true`): not known to have run a kernel
    ({"gpu": "ok (NVIDIA H200)", "test_command": "ok"}, True,
     "FAILED: --require-gpu: the test command reported no tests (pytest reports each one), so no CUDA test is known to have run"),
    ({"gpu": "none: no CUDA device (torch for CUDA 13.0)", "test_command": "ok"}, True,
     "FAILED: --require-gpu: no GPU ran its kernels (none: no CUDA device (torch for CUDA 13.0))"),
    ({"gpu": "none: a CPU torch", "test_command": "ok"}, True, "FAILED: --require-gpu: no GPU ran its kernels (none: a CPU torch)"),
    ({"gpu": "ok (NVIDIA H200)", "test_command": "skipped: none given"}, True,
     "FAILED: --require-gpu: no test command passed (skipped: none given): no CUDA test ran"),
    ({"gpu": "ok (NVIDIA H200)", "test_command": "ok", "test a::b": "skipped: needs CUDA"}, True,
     "FAILED: --require-gpu: every one of its 1 tests was skipped: no CUDA test ran"),
    ({"gpu": "ok (NVIDIA H200)", "test_command": "ok"}, False,
     "FAILED: --require-gpu: the wheel holds no device code, so no GPU can run any of it"),
])
def test_require_gpu_fails_where_no_kernel_ran(checks, device, outcome):
    assert gpu_outcome(checks, device) == outcome


@pytest.mark.network
def test_the_axis_over_the_real_index():
    """torch >= 2.12 as PyPI serves it today, with cpu, 12.8 and 13.0 asked: every release from 2.12.0 to
    2.15.0 gets its CPU job; 13.0 those built on it (the matrix's, and 2.12.1, which the matrix does not
    list: its own metadata pins CUDA 13.0); 12.8 none (PyPI's torch left it at 2.10)."""
    index = TorchIndex()
    jobs, notes = torch_matrix(parse(">=2.12"), index, None, ["cpu", "12.8", "13.0"])
    got = names(jobs)
    for version in ("2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0"):
        assert ("cpu", version) in got
    assert [v for n, v in got if n == "cuda13.0"][:5] == ["2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1"]
    assert ("cuda13.0", "2.15.0") not in got and not [n for n, _ in got if n == "cuda12.8"]
    assert any(n.startswith("no CUDA 12.8 build of torch 2.12.0, 2.12.1") for n in notes), notes


@pytest.mark.parametrize("args, torch, words", [
    (["--cpu"], "2.7.1", "note: torch 2.7.1: the newest release within the project's own torch<2.8"),
    (["--cuda", "12.6"], "2.7.1", "note: torch 2.7.1: the newest release within"),
    (["--cuda", "13.0"], None, "the project wants torch<2.8 (its pyproject.toml's requirements), and CUDA 13.0 has no release of it"),
    (["--cpu", "--torch", "2.13.0"], None, "--torch 2.13.0: outside the project's own torch<2.8"),
])
def test_a_build_keeps_within_the_projects_torch_bound(tmp_path, args, torch, words):
    """A project capped at torch<2.8 is planned against the newest release within its cap, not the
    default 2.13.0; one asked outside it, or a CUDA with none within it, is one line."""
    (tmp_path / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools", "torch<2.8"]\n'
                                             'build-backend = "setuptools.build_meta"\n[project]\nname = "capped"\n'
                                             'version = "1.0"\n')
    r = _proc.run([sys.executable, "-m", "wheelci", "plan", str(tmp_path), *args, "--json"], capture_output=True,
                  text=True, cwd=ROOT)
    if torch is None:
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
        return
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["torch"] == torch and any(n.startswith(words.removeprefix("note: ")) for n in plan["notes"]), plan["notes"]
