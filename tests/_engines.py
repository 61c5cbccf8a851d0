"""Container engines for the suite: Docker and Podman from Debian's packages, started by the tests.

A fresh CI machine has neither. As root with apt, the suite installs them and starts dockerd itself
(no bridge, no iptables: containers use the host network, which is all this kind of machine allows),
and stops at the end only what it started. Podman needs no daemon.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from wheelci import engine as eng
from tests._servers import ensure_debian_package

DOCKERD_ARGS = ("--bridge=none", "--iptables=false", "--ip-masq=false")
START_TIMEOUT = 60.0


@dataclass
class Engines:
    """Which engines respond (name -> None) or why not (name -> reason), and what the suite started."""

    why_not: dict[str, str | None] = field(default_factory=dict)
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        for proc in self.started:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _start_dockerd(engines: Engines) -> str | None:
    dockerd = ensure_debian_package("dockerd", "docker.io")
    log = Path(tempfile.gettempdir()) / "cuda-wheel-ci-dockerd.log"
    with log.open("ab") as out:
        proc = subprocess.Popen([dockerd, *DOCKERD_ARGS], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    engines.started.append(proc)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:]
            return f"dockerd exited with {proc.returncode}: {tail[0] if tail else 'no output'} (log: {log})"
        if eng.docker_responds(timeout=2) is None:
            return None
        time.sleep(0.5)
    return f"dockerd did not answer within {START_TIMEOUT:g} s (log: {log})"


def start() -> Engines:
    """Install and start what is missing; every engine ends up responding or with its reason."""
    engines = Engines()
    if eng.docker_responds() is None:
        engines.why_not["docker"] = None
    else:
        engines.why_not["docker"] = _start_dockerd(engines)
    if eng.podman_responds() is not None:
        ensure_debian_package("podman", "podman")
    engines.why_not["podman"] = eng.podman_responds()
    return engines

