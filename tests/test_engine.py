"""Engine detection through the real docker CLI (against a loopback Docker API, a closed port, or no CLI),
the `auto` fallback to the host, and the one-line refusal of `--engine docker` where no daemon answers."""

from __future__ import annotations

import http.server
import os
import json
import socket
import sys
import threading
from pathlib import Path

import pytest

from wheelci import engine
from wheelci.compile import container
from wheelci.config import matrix as mx
from wheelci import plan as pl
from wheelci.errors import CiError
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent


class _DockerAPI(http.server.BaseHTTPRequestHandler):
    """The two endpoints `docker version` touches: /_ping (API negotiation) and /version."""

    ping_status = 200
    version_status = 200

    def do_HEAD(self):  # noqa: N802
        self.do_GET()

    def do_GET(self):  # noqa: N802
        if self.path.endswith("/version") and self.version_status != 200:
            body, ctype, status = b'{"message": "broken"}', "application/json", self.version_status
        elif self.path.endswith("/version"):
            info = {"ApiVersion": "1.45", "MinAPIVersion": "1.24", "Version": "27.0.0", "Os": "linux",
                    "Arch": "amd64"}
            body, ctype, status = json.dumps(info).encode(), "application/json", 200
        elif self.path.endswith("/_ping"):
            body, ctype, status = b"OK", "text/plain", self.ping_status
        else:
            body, ctype, status = b'{"message": "not here"}', "application/json", 404
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Api-Version", "1.45")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def docker_cli() -> Path:
    """The real docker client (Debian's docker.io), installed by the suite where it is missing."""
    from tests._servers import ensure_debian_package

    return Path(ensure_debian_package("docker", "docker.io"))


@pytest.fixture
def docker_api(monkeypatch, docker_cli):
    """A Docker API on 127.0.0.1 that answers pings; DOCKER_HOST points the docker CLI at it."""
    handler = type("Handler", (_DockerAPI,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{server.server_address[1]}")
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    yield handler
    server.shutdown()
    server.server_close()


@pytest.fixture
def no_engine(monkeypatch, tmp_path, docker_cli):
    """A docker CLI with no daemon behind DOCKER_HOST (a closed loopback port), and no podman on PATH."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
    (tmp_path / "docker").symlink_to(docker_cli)
    monkeypatch.setenv("PATH", str(tmp_path))


def test_detect_answers_none_here(no_engine):
    why = engine.docker_responds()
    assert why.startswith("Docker does not respond (`docker version`: ") and "127.0.0.1" in why, why
    assert "\n" not in why
    assert engine.podman_responds() == "podman is not installed"
    assert engine.detect() is None


def test_no_docker_cli_is_not_docker(monkeypatch, tmp_path, docker_api):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert engine.docker_responds() == "docker is not installed"


def test_a_hung_daemon_is_bounded(monkeypatch, docker_cli):
    """A port that accepts and never answers: the probe gives up after its timeout, not the CLI's."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{s.getsockname()[1]}")
        why = engine.docker_responds(timeout=1)
    assert why == "Docker does not respond (`docker version` did not answer within 1 s)"


def test_detect_finds_a_docker_api(docker_api):
    assert engine.docker_responds() is None
    assert engine.detect() == "docker"
    engine.require("docker")


def test_a_failing_server_is_not_an_engine(docker_api):
    docker_api.version_status = 500
    assert "Docker does not respond" in engine.docker_responds()


def test_detect_on_this_machine_agrees_with_the_probes():
    """Whatever this machine has, detect() is the first probe that answers (none on our build boxes)."""
    answers = {name: probe() is None for name, probe in engine.PROBES.items()}
    assert engine.detect() == next((n for n, ok in answers.items() if ok), None)


def test_detect_facts_asks_the_engine_only_for_an_auto_cuda_plan(docker_api):
    assert engine.detect_facts(os.environ, engine="auto", cuda="11.8").engine == "docker"
    assert engine.detect_facts(os.environ, engine="auto", cuda=None).engine is None  # a CPU build: the host
    assert engine.detect_facts(os.environ, engine="podman", cuda="11.8").engine is None


def test_auto_picks_the_responding_engine():
    """The plan reads the probed facts, never the machine: no engine runs here, the facts say docker does."""
    plan = pl.make_plan(pl.Request(cuda="11.8", torch="2.7.1"), project_dir=ROOT, facts=engine.Facts(engine="docker"))
    assert plan.engine == "docker" and plan.engine_requested == "auto"
    assert plan.environment["CIBW_CONTAINER_ENGINE"].startswith("docker;")
    assert "engine auto: docker responds" in plan.notes


def test_auto_falls_back_to_the_host_when_it_can_build(no_engine, monkeypatch):
    # Some row always can: the host nvcc's, or 13.0 from NVIDIA's nvcc wheel.
    cuda = next(r.version for r in mx.rows() if engine.host_cannot_build(r) is None)
    facts = engine.detect_facts(os.environ, engine="auto", cuda=cuda)
    assert facts.engine is None
    plan = pl.make_plan(pl.Request(cuda=cuda), project_dir=ROOT, facts=facts)
    assert plan.engine == "host"
    assert [n for n in plan.notes if n.startswith("engine auto:")] == [
        f"engine auto: no container engine responds; building CUDA {cuda} on the host"]
    assert "CIBW_CONTAINER_ENGINE" not in plan.environment


def test_cpu_auto_is_host(no_engine):
    assert pl.make_plan(pl.Request(cuda=None), project_dir=ROOT).engine == "host"


def test_auto_without_engine_names_the_engine_needed(no_engine, tmp_path):
    # Some row never can: a host has at most one nvcc, and the 11.8/12.x nvcc wheels hold only ptxas.
    other = next(r.version for r in mx.rows() if engine.host_cannot_build(r))
    plan = pl.make_plan(pl.Request(cuda=other), project_dir=ROOT, facts=engine.detect_facts(os.environ, engine="auto", cuda=other))
    assert plan.engine == "docker"
    assert any(f"CUDA {other} needs docker or podman" in n for n in plan.notes)
    out = tmp_path / "wheels"
    with pytest.raises(CiError) as e:
        container.compile(plan, out, ROOT)
    assert f"CUDA {other} needs docker or podman" in str(e.value) and "\n" not in str(e.value)
    assert not out.exists() or not any(out.iterdir())


def test_engine_docker_fails_with_one_clear_line(no_engine, tmp_path):
    plan = pl.make_plan(pl.Request(cuda="11.8", torch="2.5.1", engine="docker"), project_dir=ROOT)
    out = tmp_path / "wheels"
    with pytest.raises(CiError) as e:
        container.compile(plan, out, ROOT)
    msg = str(e.value)
    assert msg.startswith("--engine docker: Docker does not respond") and "\n" not in msg
    assert not out.exists() or not any(out.iterdir())


def test_engine_podman_fails_with_one_clear_line(no_engine, tmp_path):
    plan = pl.make_plan(pl.Request(cuda="12.9", engine="podman"), project_dir=ROOT)
    with pytest.raises(CiError, match=r"^--engine podman: podman is not installed; start it, or use"):
        container.compile(plan, tmp_path / "w", ROOT)


def test_build_cli_engine_docker_one_line(no_engine, tmp_path):
    """Through the pipeline's entry point: exit 2, one stderr line, nothing written."""
    out = tmp_path / "out"
    r = _proc.run([sys.executable, "-m", "ci.build", "--cuda", "11.8", "--torch", "2.5.1", "--engine", "docker",
                   "-w", str(out)], cwd=ROOT, capture_output=True, text=True,
                  env={"PATH": str(tmp_path), "DOCKER_HOST": __import__("os").environ["DOCKER_HOST"],
                       "HOME": str(Path.home())})
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Docker does not respond" in r.stderr
    assert not out.exists() or not any(out.iterdir())


def test_host_build_needs_that_nvcc_or_an_nvcc_wheel_with_nvcc():
    from wheelci.engine import host_nvcc, nvcc_version

    nvcc = host_nvcc()
    cuda = nvcc_version(nvcc) if nvcc else None
    for row in mx.rows():
        why = engine.host_cannot_build(row)
        if row.version == cuda or row.nvcc_wheel_has_nvcc:
            assert why is None or why.startswith("host GCC"), why
        else:
            assert why == (f"host nvcc is CUDA {cuda}" if cuda else "no host nvcc") + \
                f", not {row.version}, and NVIDIA's nvcc wheel for {row.version} ships only ptxas"
    assert engine.host_cannot_build_cuda(None) is None


def test_engine_cli_reports_none_here(no_engine):
    r = _proc.run([sys.executable, "-m", "ci.engine", "--json"], cwd=ROOT, capture_output=True, text=True,
                  env={**__import__("os").environ})
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["engine"] is None and data["probes"]["podman"] == "podman is not installed"
    assert data["probes"]["docker"].startswith("Docker does not respond")
    assert set(data["host_cannot_build"]) == set(mx.load().versions)


def test_the_engine_is_a_type_the_plan_and_the_steps_read():
    """What differs between engines is data on the Engine (no `engine == "host"` branches): where the
    compile runs, what its containers need, where torch comes from; and it reads as the name typed."""
    import json

    from wheelci.engine import PODMAN_ULIMITS, Engine
    from wheelci.plan import ENGINES

    assert ENGINES == ("auto", "host", "docker", "podman")
    assert [e.container for e in Engine] == [False, True, True]
    assert Engine.PODMAN.create_args == tuple(f"--ulimit={u}" for u in PODMAN_ULIMITS)
    assert Engine.DOCKER.create_args == () == Engine.HOST.create_args
    assert "made on first use" in Engine.HOST.torch_source and "image" in Engine.DOCKER.torch_source
    assert f"{Engine.HOST}" == str(Engine.HOST) == "host" == Engine("host")
    assert json.dumps({"engine": Engine.PODMAN}) == '{"engine": "podman"}'


def test_cibuildwheels_engine_setting_gets_the_runs_label():
    """The label a stopped build removes its containers by (wheelci.engine.containers_of_this_run) goes
    into cibuildwheel's create_args, before the plan's own."""
    assert engine.with_label("docker; create_args: --network=host '--volume=/a b:/c'", "--label=x=1") == \
        "docker; create_args: --label=x=1 --network=host '--volume=/a b:/c'"
    assert engine.with_label("podman", "--label=x=1") == "podman; create_args: --label=x=1"
