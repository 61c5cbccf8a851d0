"""Our docker/ images and the container engine: Dockerfiles' ARGs fit the matrix, `ci.image` refuses
clearly without Docker, and (where an engine responds) a real cibuildwheel build in a container."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from wheelci import engine, image
from wheelci.compile import container, workdir
from wheelci.config import matrix as mx
from wheelci import plan as pl
from wheelci.errors import CiError
from wheelci.util.owned import MANIFEST
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILES = sorted(p for p in (ROOT / "docker").iterdir() if "Dockerfile" in p.name)
OURS = [(r, i) for r in mx.rows() for i in r.images if i.origin == "ours"]


@pytest.mark.parametrize("path", DOCKERFILES, ids=[p.name for p in DOCKERFILES])
def test_dockerfiles_declare_their_args(path: Path):
    declared = image.declared_args(path.read_bytes())
    assert declared and all(name.isidentifier() for name in declared)


@pytest.mark.parametrize("row,img", OURS, ids=[r.version for r, _ in OURS])
def test_our_images_fit_their_row(row: mx.CudaRow, img: mx.Image):
    s = image.spec(row.version, img.manylinux)  # checks the build args against the Dockerfile's ARGs
    assert s.buildargs["CUDA_VERSION"] == row.full_version
    assert s.buildargs["CUDA_PKG"] == row.version.replace(".", "-")
    assert int(s.buildargs["GCC_TOOLSET"]) == img.gcc <= row.gcc_max  # the image respects nvcc's ceiling
    assert s.buildargs["CUDNN_PKG"].endswith(f"-cuda-{row.version.split('.')[0]}")
    assert s.tag.endswith(img.name) and img.manylinux == "manylinux_2_28"


def test_cu118_abi_image_is_ours():
    """torch >= 2.7 on CUDA 11.8: manylinux_2_28 + gcc-toolset-11, built from docker/."""
    s = image.spec("11.8")
    assert s.manylinux == "manylinux_2_28" and s.buildargs["GCC_TOOLSET"] == "11"


def test_build_args_must_match_the_dockerfile():
    text = b"ARG BASE=x\nFROM ${BASE}\nARG NEED\nARG OPT=1\nARG EMPTY=\nRUN a \\\n  && b\nLABEL v=${NEED}\n"
    assert image.declared_args(text) == {"BASE": "x", "NEED": None, "OPT": "1", "EMPTY": ""}
    redeclared = b"ARG BASE=x\nFROM ${BASE}\nARG BASE\nARG A=1 B \"C=two words\"\n"
    assert image.declared_args(redeclared) == {"BASE": "x", "A": "1", "B": None, "C": "two words"}
    with pytest.raises(CiError, match=r"^Dockerfile line 2: ARG"):
        image.declared_args(b"FROM x\nARG A=\"open\n")
    image.check_build_args(text, {"NEED": "a"}, "t")
    with pytest.raises(CiError, match="missing NEED, undeclared none"):
        image.check_build_args(text, {"OPT": "2"}, "t")
    with pytest.raises(CiError, match="missing none, undeclared EXTRA"):
        image.check_build_args(text, {"NEED": "a", "EXTRA": "b"}, "t")


def test_build_command_is_the_same_for_both_engines():
    s = image.spec("11.8")
    for name in ("docker", "podman"):
        cmd = image.build_command(name, s)
        assert cmd[:3] == [name, "build", "--pull"] and cmd[-1] == s.context
        assert f"--file={s.context}/{s.dockerfile}" in cmd and f"--tag={s.tag}" in cmd
        assert sorted(c for c in cmd if c.startswith("--build-arg=")) == sorted(
            f"--build-arg={k}={v}" for k, v in s.buildargs.items())
    assert "--pull" not in image.build_command("docker", s, pull=False)


@pytest.fixture
def closed_docker(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
    return {**os.environ, "DOCKER_HOST": f"tcp://127.0.0.1:{port}"}


def run_image(*args: str, env=None) -> subprocess.CompletedProcess:
    return _proc.run([sys.executable, "-m", "ci.image", *args], cwd=ROOT, capture_output=True, text=True,
                     env=env)


def test_image_dry_run_json():
    r = run_image("build", "--cuda", "11.8", "--dry-run", "--json", "--push", "ghcr.io/acme")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["tag"] == "ghcr.io/acme/cuda-wheel-ci/manylinux_2_28_x86_64_cuda_11.8"
    assert data["buildargs"]["GCC_TOOLSET"] == "11" and data["dockerfile"] == "manylinux-cuda.Dockerfile"


def test_image_list():
    r = run_image("list", "--json")
    assert r.returncode == 0
    assert [d["cuda"] for d in json.loads(r.stdout)] == [r.version for r, _ in OURS]


@pytest.mark.parametrize("args,message", [
    (["build", "--cuda", "12.9", "--dry-run"], "CUDA 12.9 has no image of ours to build (it uses public images: quay.io"),
    (["build", "--cuda", "10.2", "--dry-run"], "unsupported CUDA version '10.2'"),
    (["build", "--cuda", "11.8", "--manylinux", "manylinux2014", "--dry-run"], "no image of ours for manylinux2014"),
    (["build", "--cuda", "11.8", "--engine", "docker"], "building images with docker: Docker does not respond"),
    (["build", "--cuda", "11.8", "--engine", "rkt"], "argument --engine: invalid choice: 'rkt'"),
    (["build"], "the following arguments are required: --cuda"),
])
def test_image_bad_input_is_one_line_exit_2(closed_docker, args, message):
    r = run_image(*args, env=closed_docker)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr, r.stderr


def test_compile_refuses_a_host_plan(tmp_path):
    plan = pl.make_plan(pl.Request(cuda=None, engine="host"), project_dir=ROOT)
    with pytest.raises(CiError, match="cannot run a host plan"):
        container.compile(plan, tmp_path, ROOT)


def test_cibuildwheel_command_runs_from_the_project():
    cmd = container.cibuildwheel_command(ROOT, Path("/out"))
    assert cmd[1:] == ["-m", "cibuildwheel", "--platform", "linux", "--output-dir", "/out", str(ROOT)]


# ------------------------------------------------------------------ end to end, where an engine responds

def _engine_or_skip() -> str:
    found = engine.detect()
    if found is None:
        reasons = "; ".join(f"{n}: {p()}" for n, p in engine.PROBES.items())
        pytest.skip(f"no container engine responds ({reasons})")
    return found


def _registry_or_skip(image: str) -> None:
    """Public images and our docker/ bases come from registries; where none is reachable (a closed
    network: the container builds then use the local stand-in image, test_container_build.py), skip."""
    from wheelci.compile.hostenv import reachable

    host = image.split("/")[0] if "." in image.split("/")[0] else "registry-1.docker.io"
    if not reachable(f"https://{host}/v2/"):
        pytest.skip(f"{host} is unreachable from here: its images cannot be pulled")


def _wheel_names(wheels: list[Path]) -> list[str]:
    return [w.name for w in wheels]


@pytest.mark.container
@pytest.mark.parametrize("cuda", [None, "12.9"], ids=["cpu", "cu129-public-image"])
def test_end_to_end_container_build(tmp_path, cuda):
    """cibuildwheel in a real container: wheels land in the wheel dir, repaired to the image's policy."""
    found = _engine_or_skip()
    project = pl.Project.read(ROOT)
    plan = pl.make_plan(pl.Request(cuda=cuda, engine=found), project_dir=ROOT)
    _registry_or_skip(plan.image or "quay.io/pypa/manylinux_2_28_x86_64")
    out = tmp_path / "wheelhouse"
    wheels = container.compile(plan, out, ROOT)
    assert wheels and all(w.parent == out and w.exists() for w in wheels)
    # no staging left behind; the record of what wheelci wrote there (wheelci.util.owned)
    assert sorted(p.name for p in out.iterdir() if p.name != MANIFEST) == sorted(_wheel_names(wheels))
    for w in wheels:
        assert w.name.startswith(project.name.replace("-", "_") + "-")
        assert f"{plan.manylinux}_x86_64" in w.name
        with zipfile.ZipFile(w) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            assert f"Requires-Dist: torch=={plan.torch}" in z.read(meta).decode()


def test_container_gets_the_project_without_venv_or_build_trees():
    files = {str(p) for p in workdir.project_files(ROOT)}
    assert {"pyproject.toml", "ci/src/wheelci/repair.py", "csrc/ops.cpp"} <= files
    assert not any(f.startswith((".venv/", ".git/", "build/")) or "__pycache__" in f for f in files)


def test_a_machine_without_git_stages_the_project_too(tmp_path, monkeypatch):
    """Slim images and chroots have no git: the project is listed without it (was a FileNotFoundError)."""
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no git on PATH
    files = {str(p) for p in workdir.project_files(ROOT)}
    assert {"pyproject.toml", "ci/src/wheelci/repair.py", "csrc/ops.cpp"} <= files
    assert not any(f.startswith((".venv/", ".git/", "build/")) or "__pycache__" in f for f in files)


def test_project_outside_git_is_staged_without_venv(tmp_path):
    src = tmp_path / "src"
    for rel in ("pyproject.toml", "ci/x.py", ".venv/bin/python", "build/cp311/a.o"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(rel)
    dest = workdir.stage_project(src, tmp_path / "dest")
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == ["ci/x.py", "pyproject.toml"]


@pytest.mark.container
def test_end_to_end_our_cu118_image_for_torch_27(tmp_path):
    """The ABI-trap path for real: build our manylinux_2_28 + CUDA 11.8 image, then a torch 2.7.1 wheel in it.

    Several GB of downloads and a long image build: it runs wherever an engine responds."""
    _registry_or_skip("quay.io/pypa/manylinux_2_28_x86_64")  # our Dockerfile's base
    found = _engine_or_skip()
    plan = pl.make_plan(pl.Request(cuda="11.8", torch="2.7.1", engine=found), project_dir=ROOT)
    assert plan.image_origin == "ours"
    wheels = container.compile(plan, tmp_path / "w", ROOT)  # builds the image on first use
    assert image.exists(plan.image, found)
    assert wheels and all("manylinux_2_28_x86_64" in w.name for w in wheels)
