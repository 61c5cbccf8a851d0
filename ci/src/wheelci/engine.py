"""Which engine can build here: a running Docker or Podman, or the host's own toolchain.

Detection asks each engine's own CLI for its server (`docker version`, `podman info`): a docker binary on
PATH says nothing about a daemon behind it, and the CLI is what cibuildwheel drives, with the same
DOCKER_HOST, contexts and credentials. Each probe is bounded by a short timeout so `auto` never hangs.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping

from wheelci import archs as arch
from wheelci.config import matrix
from wheelci.errors import CiError
from wheelci.util import log, proc

if TYPE_CHECKING:
    from wheelci.config.matrix import CudaRow

PROBE_TIMEOUT = 5.0
PODMAN_ULIMITS = ("nofile=20000:20000", "nproc=32768:32768")


class Engine(str, enum.Enum):
    """Where a build compiles, as data the Plan, the dry run and the steps read instead of comparing names.

    The host's own toolchain: a cached venv with the Plan's torch, a CUDA root from NVIDIA's wheels, and
    our repair after the compile. Or cibuildwheel in a container engine: the image's toolchain, the repair
    run inside it. A str, so the Plan's JSON and every message say `host` as the user typed it."""

    HOST = "host"
    DOCKER = "docker"
    PODMAN = "podman"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def container(self) -> bool:
        """cibuildwheel in this container engine (its CLI is the command run), not the host's toolchain."""
        return self is not Engine.HOST

    @property
    def create_args(self) -> tuple[str, ...]:
        """What this engine's containers need beyond the mounts every container gets: Podman's rlimits."""
        return tuple(f"--ulimit={u}" for u in PODMAN_ULIMITS) if self is Engine.PODMAN else ()

    @property
    def torch_source(self) -> str:
        """Where the compile's torch comes from, as the dry run says it."""
        if self.container:
            return "the image's pip, in each build"
        return "a build environment of this torch (made on first use, then cached)"


# The question each engine's CLI answers only when its server (daemon, or podman's storage) works.
PROBE_COMMANDS = {"docker": ("version", "--format", "{{.Server.Version}}"),
                  "podman": ("info", "--format", "{{.Host.Arch}}")}
ENGINE_NAMES = {"docker": "Docker", "podman": "Podman"}


def responds(engine: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """None when the engine's CLI reaches its server, else why not (one line)."""
    exe = shutil.which(engine)
    if not exe:
        return f"{engine} is not installed"
    cmd = [exe, *PROBE_COMMANDS[engine]]
    asked = f"`{engine} {PROBE_COMMANDS[engine][0]}`"
    try:
        r = proc.run(cmd, what=f"asking {engine} for its server", check=False, capture_output=True, text=True,
                     timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"{ENGINE_NAMES[engine]} does not respond ({asked} did not answer within {timeout:g} s)"
    if r.returncode != 0 or not r.stdout.strip():
        last = ([ln.strip() for ln in r.stderr.splitlines() if ln.strip()] or [f"exit status {r.returncode}"])[-1]
        return f"{ENGINE_NAMES[engine]} does not respond ({asked}: {last})"
    return None


def docker_responds(timeout: float = PROBE_TIMEOUT) -> str | None:
    return responds("docker", timeout)


def podman_responds(timeout: float = PROBE_TIMEOUT) -> str | None:
    return responds("podman", timeout)


PROBES = {"docker": docker_responds, "podman": podman_responds}


def detect() -> str | None:
    """The first container engine that responds ("docker", then "podman"), or None."""
    return next((name for name, probe in PROBES.items() if probe() is None), None)


def require(engine: str) -> None:
    """CiError with the reason when the named container engine does not respond."""
    if engine not in PROBES:
        raise CiError(f"not a container engine: {engine!r} (choose docker or podman)")
    why = PROBES[engine]()
    if why:
        raise CiError(f"--engine {engine}: {why}; start it, or use --engine host or auto")


def tool_version(cmd: list[str], pattern: str) -> str | None:
    try:
        out = proc.run(cmd, what="asking a tool its version", check=False, capture_output=True, text=True,
                       timeout=30).stdout
    except (CiError, OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern, out)
    return m[1] if m else None


# --- nvcc: which toolkit the host has ------------------------------------------------------


def nvcc_version(nvcc: Path) -> str | None:
    """'13.0' from `nvcc --version`, None if it does not run."""
    try:
        done = proc.run([nvcc, "--version"], what="asking nvcc its version", check=False, capture_output=True,
                        text=True)
    except (CiError, OSError):
        return None
    if done.returncode != 0:
        return None
    out = done.stdout
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def real_nvcc(nvcc: Path) -> Path:
    """The nvcc binary behind wrappers and symlinks: nvcc reports its own directory as _HERE_."""
    try:
        dry = proc.run([nvcc, "--dryrun", "-E", "-x", "cu", os.devnull], what="asking nvcc where it is", check=False,
                       capture_output=True, text=True)
    except (CiError, OSError):
        return nvcc.resolve()
    m = re.search(r"^#\$ _HERE_=(.+)$", dry.stderr + dry.stdout, re.M)
    return Path(m.group(1).strip()) / "nvcc" if m else nvcc.resolve()


def host_nvcc(env: Mapping[str, str] = os.environ) -> Path | None:
    """nvcc from CUDA_HOME, PATH or /usr/local/cuda, in that order."""
    candidates = [Path(env[v]) / "bin" / "nvcc" for v in ("CUDA_HOME", "CUDA_PATH") if env.get(v)]
    if found := shutil.which("nvcc", path=env.get("PATH")):
        candidates.append(Path(found))
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    return next((c for c in candidates if c.exists()), None)


# --- facts: what a plan needs to know of this machine, probed once, at the edge -------------------


@dataclass(frozen=True)
class Facts:
    """This machine as a plan sees it. detect_facts probes it; ci.plan.make_plan only reads it, so a
    plan is a function of its inputs (and a test states a machine instead of faking one)."""

    engine: str | None = None  # the first container engine that responds (what --engine auto takes)
    nvcc: str | None = None  # the CUDA version of the host's nvcc
    gcc: int | None = None  # the major version of the host compiler nvcc would use
    ca_bundle: str | None = None  # the CA bundle file this machine's pip trusts (mounted into containers)
    nvcc_dirs: tuple[str, ...] = ()  # PATH entries holding an nvcc (a CPU host build hides them)
    machine: str = "x86_64"  # this machine's architecture (wheelci.archs)
    emulates: tuple[str, ...] = ()  # the architectures it runs under QEMU (binfmt_misc)


CA_VARIABLES = ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")


def nvcc_dirs(env: Mapping[str, str]) -> tuple[str, ...]:
    """The PATH entries holding an executable nvcc, as a shell finds programs."""
    def holds_nvcc(entry: str) -> bool:
        nvcc = os.path.join(entry, "nvcc")
        return os.path.isfile(nvcc) and os.access(nvcc, os.X_OK)

    entries = dict.fromkeys(e for e in env.get("PATH", "").split(os.pathsep) if e)
    return tuple(e for e in entries if holds_nvcc(e))


def detect_facts(env: Mapping[str, str], *, engine: str, cuda: str | None, archs: tuple[str, ...] = ()) -> Facts:
    """Probe what a plan for (engine, cuda, archs) will ask, and nothing else: a CPU plan for this machine
    never asks whether a container engine runs, a container plan never asks for the host's nvcc."""

    ca = next((env[v] for v in CA_VARIABLES if env.get(v) and Path(env[v]).is_file()), None)
    here = arch.machine()
    foreign = any(a != here for a in archs)
    found = detect() if engine == "auto" and (cuda is not None or foreign) else None
    nvcc = gcc = None
    if cuda is not None and engine in ("auto", "host") and found is None:
        path = host_nvcc(env)
        nvcc = nvcc_version(path) if path else None
        cxx = env.get("CUDAHOSTCXX") or shutil.which("g++", path=env.get("PATH")) or "g++"
        major = tool_version([cxx, "-dumpversion"], r"^(\d+)")
        gcc = int(major) if major else None
    return Facts(engine=found, nvcc=nvcc, gcc=gcc, ca_bundle=ca,
                 nvcc_dirs=nvcc_dirs(env) if cuda is None and engine in ("auto", "host") else (),
                 machine=here, emulates=arch.emulated() if foreign else ())


def cannot_build(row: CudaRow | None, facts: Facts) -> str | None:
    """Why the host cannot build this CUDA row (None: it can).

    It needs nvcc of that version: the host's, or NVIDIA's nvcc wheel where that wheel ships the nvcc
    driver (cu13; the cu11/cu12 wheels hold only ptxas), and a host GCC that nvcc accepts."""
    if row is None:
        return None
    if facts.nvcc != row.version and not row.nvcc_wheel_has_nvcc:
        host = f"host nvcc is CUDA {facts.nvcc}" if facts.nvcc else "no host nvcc"
        return f"{host}, not {row.version}, and NVIDIA's nvcc wheel for {row.version} ships only ptxas"
    if facts.gcc and facts.gcc > row.gcc_max:
        return f"host GCC {facts.gcc} is above what nvcc {row.version} accepts ({row.gcc_max}); set CUDAHOSTCXX"
    return None


def host_cannot_build(row: CudaRow | None, env: Mapping[str, str] = os.environ) -> str | None:
    """cannot_build, asking this machine."""
    if row is None:
        return None
    return cannot_build(row, detect_facts(env, engine="host", cuda=row.version))


def host_cannot_build_cuda(cuda: str | None) -> str | None:
    """host_cannot_build for a CUDA version string (None: a CPU build, which the host always can)."""
    if cuda is None:
        return None

    return host_cannot_build(matrix.load().row(cuda))




def matrix_rows() -> tuple[CudaRow, ...]:
    return matrix.load().rows






# Every container a build starts carries this label with the run's own value: a stopped build (Ctrl-C, the
# SIGTERM a CI cancel or a test's time limit sends) removes them, as neither cibuildwheel (its cleanup runs
# on Ctrl-C only) nor an engine's client (`docker run` killed leaves its container running) does.
RUN_LABEL = "io.wheelci.run"
REMOVE_TIMEOUT = 60.0


@contextlib.contextmanager
def containers_of_this_run(engine: str) -> Iterator[str]:
    """The `--label=...` argument for the containers started inside; every container carrying it is
    removed when the block ends, however it ends (one that ended as it should is gone already)."""
    value = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    try:
        yield f"--label={RUN_LABEL}={value}"
    finally:
        remove_labelled(engine, value)


def remove_labelled(engine: str, value: str) -> list[str]:
    """Remove (force: a running one too) every container labelled RUN_LABEL=value; their ids. Best effort:
    an engine that does not answer leaves them, said on a warning, never an error over the build's own."""
    try:
        found = proc.run([engine, "ps", "-aq", "--filter", f"label={RUN_LABEL}={value}"], what="listing containers",
                         check=False, capture_output=True, text=True, timeout=REMOVE_TIMEOUT)
        ids = found.stdout.split() if found.returncode == 0 else []
        if ids:
            log.info(f"removing the {len(ids)} container(s) this build started: {' '.join(ids)}")
            now = ["--time=0"] if engine == "podman" else []  # podman's --force waits 10 s on a SIGTERM first
            proc.run([engine, "rm", "--force", *now, *ids], what="removing containers", check=False, capture_output=True,
                     text=True, timeout=REMOVE_TIMEOUT)
        return ids
    except (CiError, OSError, subprocess.TimeoutExpired) as e:
        log.warning(f"the containers this build started (label {RUN_LABEL}={value}) may still run: {e}")
        return []


def with_label(container_engine: str, label: str) -> str:
    """cibuildwheel's CIBW_CONTAINER_ENGINE value with `label` added to its create_args."""
    if "create_args:" in container_engine:
        return container_engine.replace("create_args:", f"create_args: {label}", 1)
    return f"{container_engine}; create_args: {label}"


if __name__ == "__main__":  # `python -m wheelci.engine` (`python -m ci.engine` here): the command line runs it
    import runpy

    runpy.run_module("wheelci.commands.engine", run_name="__main__")
