"""A stopped build leaves no container running (wheelci.engine.containers_of_this_run), in each real engine.

A loaded run of the suite left an emulated aarch64 build's cibuildwheel container running for 85 minutes
after its test ended: SIGTERM ends cibuildwheel before its own cleanup, and a killed `docker run` client
leaves its container running. The containers a build starts carry the run's label, and a stopped run
removes them. The image is the smallest that runs: one static program that waits for a signal it never
gets (PID 1 ignores SIGTERM, as a build's shell does), imported from a tarball, no registry.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from wheelci.engine import RUN_LABEL, Engine, containers_of_this_run
from tests import _proc

pytestmark = pytest.mark.container


def sleeper_image(engine: str, tmp_path: Path) -> str:
    """`localhost/wheelci-test-sleeper:1`: /sleeper, a static binary that pauses forever."""
    src = tmp_path / "sleeper.c"
    src.write_text("#include <unistd.h>\nint main(void) { for (;;) pause(); }\n")
    binary = tmp_path / "sleeper"
    r = _proc.run(["gcc", "-static", "-O2", "-o", str(binary), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with tarfile.open(tmp_path / "root.tar", "w") as tar:
        tar.add(binary, arcname="sleeper")
    image = "localhost/wheelci-test-sleeper:1"
    r = _proc.run([engine, "import", str(tmp_path / "root.tar"), image], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return image


def started(engine: str, image: str, label: str) -> str:
    r = _proc.run([engine, "run", "-d", label, *Engine(engine).create_args, image, "/sleeper"], capture_output=True,
                  text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def present(engine: str, cid: str) -> bool:
    r = _proc.run([engine, "ps", "-aq", "--no-trunc"], capture_output=True, text=True, timeout=60)
    return any(cid.startswith(line) or line.startswith(cid) for line in r.stdout.split())


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_a_stopped_run_removes_its_containers_and_only_those(engines, engine, tmp_path):
    why = engines.why_not.get(engine)
    if why:
        pytest.fail(f"{engine} should run on this machine but does not: {why}")
    image = sleeper_image(engine, tmp_path)
    other = started(engine, image, f"--label={RUN_LABEL}=another-run")  # another build's: left alone
    try:
        with pytest.raises(KeyboardInterrupt), containers_of_this_run(engine) as label:
            assert label.startswith(f"--label={RUN_LABEL}=") and label != f"--label={RUN_LABEL}=another-run"
            ours = started(engine, image, label)
            assert present(engine, ours)
            raise KeyboardInterrupt  # Ctrl-C, or the Terminated a SIGTERM raises (wheelci.cli)
        assert not present(engine, ours)
        assert present(engine, other)
    finally:
        _proc.run([engine, "rm", "--force", other], capture_output=True, timeout=120)
        _proc.run([engine, "rmi", image], capture_output=True, timeout=120)

