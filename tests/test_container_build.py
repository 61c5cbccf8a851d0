"""`ci.build` through real cibuildwheel in a real container engine, Docker and Podman.

The image is the local stand-in (tests/_standin.py: Debian, /opt/python, CUDA 13.0 from NVIDIA's
wheels), since this kind of machine reaches no registry. Torch comes into the container from a
wheel directory mounted read-only (--find-links), not a fresh multi-GB download per build. Each wheel
is then checked, verified and reported on the host, as after a host build.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from wheelci.util.cache import cache_dir
from tests import _standin
from tests._wheels import run_stage
from tests import _proc

pytestmark = pytest.mark.container

ENGINES = ("docker", "podman")


def need(engines, name: str) -> None:
    why = engines.why_not.get(name)
    if why:
        pytest.fail(f"{name} should run on this machine but does not: {why}")


@pytest.fixture(scope="session")
def standin(engines) -> dict[str, str]:
    """The stand-in image, imported into every engine that responds."""
    return {name: _standin.ensure_image(name) for name, why in engines.why_not.items() if why is None}


@pytest.fixture(scope="session")
def cuda_find_links() -> Path:
    """torch 2.13.0 (PyPI's cu130 build) and its nvidia-* wheels, downloaded once into the cache."""
    house = cache_dir("wheelhouse")
    house.mkdir(parents=True, exist_ok=True)
    _proc.run([sys.executable, "-m", "pip", "download", "--isolated", "--quiet", "--only-binary", ":all:",
               "--python-version", "3.11", "torch==2.13.0", "-d", str(house)], check=True, timeout=3600)
    return house


def build(engine: str, image: str, find_links: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return run_stage("ci.build", "--engine", engine, "--image", image, "--find-links", find_links, *args,
                     "-w", out)


def wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        return z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()


# Each engine builds for real, each variant is built, and each project: three container builds, not six
# (a build is minutes here; the engines run the same cibuildwheel, the variants the same image).
@pytest.mark.parametrize("engine, variant", [("docker", "cu130"), ("podman", "cpu")])
def test_build_in_container(engines, standin, torch_cpu_wheel, cuda_find_links, tmp_path, engine, variant):
    """The example through cibuildwheel in the stand-in image, repaired inside by this package's
    ci.repair, verified on the host."""
    need(engines, engine)
    args = ["--cpu"] if variant == "cpu" else ["--cuda", "13.0", "--arch-list", "9.0"]
    links = torch_cpu_wheel.parent if variant == "cpu" else cuda_find_links
    out = tmp_path / "out"
    r = build(engine, standin[engine], links, out, *args)
    assert r.returncode == 0, r.stderr[-4000:]
    # cibuildwheel ran in the image, and ci.repair ran inside it
    assert "Building cp311-manylinux_x86_64 wheel" in r.stderr, r.stderr[-3000:]
    assert "sh -c 'PYTHONPATH=/opt/cuda-wheel-ci python -m wheelci.repair" in r.stderr and f"{engine} cp " in r.stderr
    (wheel,) = sorted(out.glob("*.whl"))
    assert f"+pt2.13.0.{variant}" in wheel.name and "-py3-none-manylinux_2_" in wheel.name
    meta = wheel_metadata(wheel)
    assert "Requires-Dist: torch==2.13.0" in meta
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] is True and report["plan"]["engine"] == engine
    assert report["plan"]["image"] == standin[engine]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert not [n for n in names if ".libs/" in n and ("torch" in n or "cuda" in n or "gomp" in n)], names
    if variant == "cu130":
        assert any(n.endswith("_preload.py") for n in names)
        assert "cudnn" in json.dumps(report).lower()


def error_lines(r: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in r.stderr.splitlines() if ln.startswith("python -m ci.build: error:")]


def test_failure_inside_the_container_names_the_log(engines, standin, tmp_path):
    """pip cannot get torch inside (no torch in the find-links directory, no index reachable from the
    container): exit 1, one error line with the log's path, the log's last lines shown, nothing in -w. (An
    index the user names is checked before the build: unreachable, it is bad input, exit 2.)"""
    need(engines, "docker")
    empty = tmp_path / "links"
    empty.mkdir()
    out = tmp_path / "out"
    r = build("docker", standin["docker"], empty, out, "--cpu")
    assert r.returncode == 1, r.stderr[-3000:]
    (line,) = error_lines(r)
    assert "cibuildwheel failed with exit status" in line and "full log: " in line
    log = Path(line.split("full log: ")[1].strip())
    assert log.is_file() and "torch" in log.read_text(errors="replace")
    assert "the last lines of cibuildwheel's log" in r.stderr and "Traceback" not in r.stderr
    assert not list(out.glob("*.whl")) and not list(out.glob(".wheelci-stage-*"))


@pytest.mark.parametrize("case", ["docker-stopped", "podman-missing", "auto-none", "image-missing"])
def test_engine_and_image_problems_are_one_line_exit_2(engines, standin, tmp_path, case):
    need(engines, "docker")
    env = None
    args = ["--cpu", "--engine", "docker", "--image", standin["docker"]]
    if case == "docker-stopped":
        env, words = {"DOCKER_HOST": "tcp://127.0.0.1:9"}, "--engine docker: Docker does not respond"
    elif case == "podman-missing":
        bare = tmp_path / "bin"
        bare.mkdir()
        env, words = {"PATH": str(bare)}, "--engine podman: podman is not installed"
        args = ["--cpu", "--engine", "podman"]
    elif case == "auto-none":
        bare = tmp_path / "bin"
        bare.mkdir()
        env = {"DOCKER_HOST": "tcp://127.0.0.1:9", "PATH": str(bare)}
        args, words = ["--cuda", "12.9", "--engine", "auto"], "no container engine responds, and CUDA 12.9 needs"
    else:
        args = ["--cpu", "--engine", "docker", "--image", "localhost:9/no-such-image:1"]
        words = "--image localhost:9/no-such-image:1: not in docker's store, and `docker pull` failed"
    out = tmp_path / "out"
    r = run_stage("ci.build", *args, "-w", out, env=env)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], r.stderr
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("engine", ["docker"])
def test_a_narrowed_container_builds_nvcc_calls_get_only_the_asked_target(engines, standin, tmp_path, engine):
    """--arch-list 9.0 in the image, as cibuildwheel's variables and before-all set it up (wheelci.cibw): a
    call naming the project's own sm_75 and sm_80 compiles sm_90 alone through each way a build reaches nvcc
    (cpp_extension's one-file path: CUDA_HOME's nvcc; its ninja path: PYTORCH_NVCC; CMake's CUDA launcher),
    run by the build's Python (a venv, as cibuildwheel's) from the read-only mount."""
    from cibuildwheel.environment import parse_environment

    from wheelci import cibw
    from wheelci.config.compilecache import torch_finds_ccache
    from wheelci.engine import Engine
    from wheelci.native.fatbin import read_library, summary

    need(engines, engine)

    def made(backend: str) -> tuple[dict[str, str], list[str]]:
        inputs = cibw.ContainerInputs(engine=Engine(engine), images={"x86_64": "img"}, identifiers=["cp311-manylinux_x86_64"],
                                      torch_requirement="torch==2.11.0", torch_index=None, cudnn=None, build_requires=[],
                                      cuda=_standin.CUDA, arch_list="9.0", nvcc_flags=[], tools=Path("/t"),
                                      ccache=Path("/c"), backend=backend, torch_finds_ccache=torch_finds_ccache("2.11.0"),
                                      narrow=True)
        variables = cibw.container_environment(inputs)
        env = parse_environment(variables["CIBW_ENVIRONMENT_LINUX"]).as_dictionary({"PATH": "/usr/bin:/bin"})
        return env, variables["CIBW_BEFORE_ALL_LINUX"].split(" && ")

    setuptools, before_all = made("setuptools")
    cmake, _ = made("scikit-build-core")
    (tmp_path / "k.cu").write_text("__global__ void twice(float *x) { x[threadIdx.x] *= 2.0f; }\n")
    flags = ("-shared -Xcompiler -fPIC -gencode=arch=compute_75,code=sm_75 -gencode=arch=compute_80,code=sm_80 "
             "k.cu -o")
    script = " && ".join([
        "python3 -m venv /tmp/build-env", "export PATH=/tmp/build-env/bin:$PATH", before_all[-1], "cd /work",
        f"$CUDA_HOME/bin/nvcc {flags} one-file.so", f'sh -c "$PYTORCH_NVCC {flags} ninja.so"',
        f'$(echo "$LAUNCHER" | tr ";" " ") {cibw.CONTAINER_CUDA_HOME}/bin/nvcc {flags} cmake.so'])
    root = Path(__file__).resolve().parent.parent
    r = _proc.run([engine, "run", "--rm", "--network=host", f"--volume={tmp_path}:/work",
                   f"--volume={root / 'ci' / 'src' / 'wheelci'}:{cibw.CONTAINER_TOOL}/wheelci:ro",
                   f"--env=CUDA_HOME={setuptools['CUDA_HOME']}", f"--env=PYTORCH_NVCC={setuptools['PYTORCH_NVCC']}",
                   f"--env=LAUNCHER={cmake['CMAKE_CUDA_COMPILER_LAUNCHER']}", "--env=CCACHE_DISABLE=1",
                   standin[engine], "sh", "-c", script], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("one-file", "ninja", "cmake"):
        with open(tmp_path / f"{name}.so", "rb") as f:
            assert summary(read_library(f)) == (["sm_90"], []), name


@pytest.mark.parametrize("engine", ["docker"])  # the example's CPU build is podman's (above)
def test_another_project_in_container(engines, standin, torch_cpu_wheel, tmp_path, engine):
    """The setuptools fixture through the same container path: this package's ci.repair mounted in,
    no build isolation, then installed and its own tests run on the host."""
    from tests.test_build_project import FIXTURE

    from tests.test_compile_cache import closed_port

    need(engines, engine)
    out = tmp_path / "out"
    # a remote compile cache on a closed port: the container compiles with ccache, said once, and succeeds
    dead = f"redis://ci:pa55-of-a-dead-store@127.0.0.1:{closed_port()}"
    r = build(engine, standin[engine], torch_cpu_wheel.parent, out, str(FIXTURE), "--cpu", "--compile-cache", dead)
    assert r.returncode == 0, r.stderr[-4000:]
    said = [ln for ln in r.stderr.splitlines() if "compiled locally" in ln or "compiling locally" in ln]
    assert len(said) == 1 and said[0].startswith("ci.build: warning: compile cache redis redis://127.0.0.1:"), said
    assert "pa55-of-a-dead-store" not in r.stdout + r.stderr
    assert "PYTHONPATH=/opt/cuda-wheel-ci python -m wheelci.repair" in r.stderr
    (wheel,) = sorted(out.glob("*.whl"))
    assert wheel.name.startswith("tiny_ext-0.1.0+pt2.13.0.cpu-cp311-cp311-manylinux_2_")
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] is True and report["verify"]["test_command"].startswith("ok (")
    assert report["verify"]["torch_ops"] == ["tiny_ext"]
    assert report["compile_cache"]["used"] is False and "compiled locally" in report["compile_cache"]["note"]
    assert not list(FIXTURE.glob("build")) and not list(FIXTURE.glob("*.egg-info"))


def cached_build(tmp_path: Path, name: str, image: str, find_links: Path, store: str) -> tuple[str, dict, str]:
    """A CPU build of the setuptools fixture in Docker with its own work directory, ccache and output: only
    the store is shared. Returns the wheel's sha256, report.json, and everything the build wrote where a
    user or CI could see it (its output, its logs, its reports)."""
    import hashlib

    from tests.test_build_project import FIXTURE

    own = tmp_path / name
    # the store's URL (its password) from the environment: a command line the harness may print holds none
    env = {"CCACHE_DIR": str(own / "ccache"), "SOURCE_DATE_EPOCH": "1767323045", "WHEELCI_COMPILE_CACHE": store}
    r = run_stage("ci.build", "--engine", "docker", "--image", image, "--find-links", find_links, FIXTURE,
                  "--cpu", "-w", own / "out", "--work-dir", own / "work", env=env, timeout=1500)
    assert r.returncode == 0, r.stderr[-4000:]
    (wheel,) = (own / "out").glob("*.whl")
    assert not [p for p in (own / "out").rglob("*") if "stats" in p.name or "sccache" in p.name]  # counts: outside -w
    assert not (own / "work" / "compile-cache.env").exists() and not list((own / "work" / "compile-cache").glob("*.json"))
    shown = r.stdout + r.stderr + "".join(p.read_text(errors="replace") for p in (own / "work").rglob("*.log"))
    shown += "".join(p.read_text(errors="replace") for p in (own / "out").glob("report.*"))
    return hashlib.sha256(wheel.read_bytes()).hexdigest(), json.loads((own / "out" / "report.json").read_text()), shown


@pytest.mark.timeout(3600)
def test_two_container_builds_share_only_the_remote_store(engines, standin, torch_cpu_wheel, tmp_path):
    """sccache in the container over a Redis store on loopback (a password on it): the first build fills the
    store, the second, with its own work directory and ccache, takes every compile from it and writes the
    first's bytes. The password goes in through the engine's --env-file only: never in the output, the logs
    or the reports. CPU builds: what is the container's here (the server, the env-file, one time on the
    installed headers, the counts read back) is the same for nvcc, whose per-architecture device entries the
    host builds' two-machine tests show (tests/test_compile_cache.py); a CUDA compile of torch's headers
    would add minutes a build."""
    from tests._servers import Redis

    need(engines, "docker")
    password = "pa55-of-the-container-store"
    with Redis(tmp_path / "redis", password=password) as store:
        filled_wheel, first, shown_first = cached_build(tmp_path, "first", standin["docker"], torch_cpu_wheel.parent,
                                                        store.url)
        warm, second, shown_second = cached_build(tmp_path, "second", standin["docker"], torch_cpu_wheel.parent,
                                                  store.url)
    filled, took = first["compile_cache"], second["compile_cache"]
    assert filled["storage"] == f"redis redis://127.0.0.1:{store.port}"
    assert filled["used"] and filled["host"]["misses"] > 0 and filled["host"]["hits"] == 0, filled
    assert took["used"] and took["host"]["hits"] >= filled["host"]["misses"], took
    assert took["host"]["misses"] == 0 and took["device"]["misses"] == 0 and took["errors"] == 0, took
    assert warm == filled_wheel
    assert "sccache" in shown_first and password not in shown_first + shown_second


@pytest.mark.parametrize("engine", ENGINES)
def test_image_builds_through_each_engine_cli(engines, standin, tmp_path, engine, monkeypatch):
    """ci.image's build path for real: the matrix-style build args reach the Dockerfile, the image lands
    in that engine's store and pushes to a real registry (loopback), and a failing step is one CiError
    naming the image and the step's last line."""
    from wheelci import image
    from wheelci.errors import CiError

    need(engines, engine)
    from tests._servers import Registry

    (tmp_path / "img.Dockerfile").write_text(
        "ARG BASE\nFROM ${BASE}\nARG CUDA_VERSION\nRUN echo \"cuda=${CUDA_VERSION}\" > /built-with\n")
    tag = f"localhost/cuda-wheel-ci-test:{engine}-{tmp_path.name}".lower()
    spec = image.ImageSpec("13.0", "manylinux_2_36", tag, "img.Dockerfile", str(tmp_path),
                           {"BASE": standin[engine], "CUDA_VERSION": "13.0.2"})
    image.check_build_args((tmp_path / "img.Dockerfile").read_bytes(), spec.buildargs, "test")
    try:
        image.build_spec(engine, spec, pull=False)  # a local base: nothing to pull
        assert image.exists(tag, engine)
        from wheelci.engine import PODMAN_ULIMITS

        limits = [f"--ulimit={u}" for u in PODMAN_ULIMITS] if engine == "podman" else []
        r = _proc.run([engine, "run", "--rm", "--network=host", *limits, tag, "cat", "/built-with"],
                      capture_output=True, text=True)
        assert r.stdout.strip() == "cuda=13.0.2", r.stderr
        with Registry(tmp_path / "registry") as registry:  # --push: tagged under the registry, then pushed
            if engine == "podman":  # plain http on loopback: Podman must be told, as a user's registries.conf would
                monkeypatch.setenv("CONTAINERS_REGISTRIES_CONF", str(registry.registries_conf()))
            pushed = image.push_spec(engine, spec, registry.host)
            assert pushed.tag == f"{registry.host}/{tag}"
            repository, _, version = tag.partition("/")[2].rpartition(":")
            assert registry.tags(f"{tag.partition('/')[0]}/{repository}") == [version]
            _proc.run([engine, "rmi", "-f", pushed.tag], capture_output=True)
        with pytest.raises(CiError) as e:  # nothing listens there
            image.push_spec(engine, spec, "127.0.0.1:9")
        assert str(e.value).startswith(f"pushing 127.0.0.1:9/{tag}: {engine} failed with exit status")
        assert "\n" not in str(e.value)
        _proc.run([engine, "rmi", "-f", f"127.0.0.1:9/{tag}"], capture_output=True)
    finally:
        _proc.run([engine, "rmi", "-f", tag], capture_output=True)
    assert not image.exists(tag, engine)

    (tmp_path / "img.Dockerfile").write_text("ARG BASE\nFROM ${BASE}\nRUN echo no-such-step >&2 && exit 3\n")
    bad = image.ImageSpec("13.0", "manylinux_2_36", tag, "img.Dockerfile", str(tmp_path), {"BASE": standin[engine]})
    with pytest.raises(CiError) as e:
        image.build_spec(engine, bad, pull=False)
    assert str(e.value).startswith(f"building {tag}: {engine} failed with exit status") and "\n" not in str(e.value)
    assert not image.exists(tag, engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_before_all_scripts_in_the_image(engines, standin, engine):
    """ci/resources/container/*.sh as cibuildwheel runs them: from the read-only mount of ci/, in the image.
    With no ccache and no yum or dnf, ensure_ccache.sh leaves a pass-through launcher that runs the compiler,
    and the one-word CXX of setuptools builds (wheelci.cibw.CONTAINER_CXX) runs c++ through that;
    check_image.sh accepts the image's own CUDA and refuses another."""
    from wheelci import cibw
    from wheelci.engine import PODMAN_ULIMITS

    need(engines, engine)
    root = Path(__file__).resolve().parent.parent
    limits = [f"--ulimit={u}" for u in PODMAN_ULIMITS] if engine == "podman" else []
    shims = str(Path(cibw.CONTAINER_CXX).parent)
    script = (f"rm $(command -v ccache) && sh {cibw.CONTAINER_SCRIPTS}/ensure_ccache.sh {shims} && command -v ccache "
              f"&& ccache g++ --version && {cibw.CONTAINER_CXX} --version "
              f"&& sh {cibw.CONTAINER_SCRIPTS}/check_image.sh {_standin.CUDA} 99 && echo image-ok "
              f"&& ! sh {cibw.CONTAINER_SCRIPTS}/check_image.sh 11.8 99")
    r = _proc.run([engine, "run", "--rm", "--network=host", *limits,
                   f"--volume={root / 'ci' / 'src' / 'wheelci'}:{cibw.CONTAINER_TOOL}/wheelci:ro", "--env=CUDA_HOME=/usr/local/cuda",
                   standin[engine], "sh", "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "/usr/local/bin/ccache" and lines[1].startswith("g++")  # the shim, running the compiler
    assert [x for x in lines if x.startswith("c++ ")] == ["c++ " + lines[1].split(" ", 1)[1]]  # CXX: c++, via ccache
    assert "image-ok" in lines and "build image does not have CUDA 11.8:" in lines
