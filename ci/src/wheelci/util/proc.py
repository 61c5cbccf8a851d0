"""Running a tool for a purpose: one way to fail.

A failed tool is one error line that says what the run was for, which tool failed and its last line
of stderr (`creating the build environment: pip failed with exit status 1: No matching distribution
found for torch==9`), instead of a CalledProcessError each caller words differently. `WHEELCI_VERBOSE=1`
(or a stage's `--verbose`) echoes each command as `+ cmd` on stderr first, as `sh -x` does.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from collections import deque
from typing import IO, Any, Callable, Iterator, Literal, Sequence, overload

from wheelci.errors import CiError
from wheelci.util import secret
from wheelci.util import log as _log
from wheelci.util.log import passthrough

PR_SET_PDEATHSIG = 1  # linux/prctl.h


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, loaded before any fork (a child between fork and exec must not load a library)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def bound(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A preexec_fn that binds the child's life to this process: the kernel sends it `sig` when we die, however
    we die (SIGKILL, the OOM killer, a killed process group), so a helper (the compile cache's server, a
    compile in a session of its own) never outlives the build that started it. A parent already gone between
    fork and prctl is caught by the parent pid check."""
    parent, prctl = os.getpid(), _prctl()  # loaded here, before the fork (and not by `--help`)

    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(sig))
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return preexec


def tool_name(cmd: Sequence[object] | str) -> str:
    """The program a command runs, by name: `sh` for ['sh', '-c', ...]; `pip` for [python, -m, pip, ...]."""
    if isinstance(cmd, str):
        try:
            parts = shlex.split(cmd)
        except ValueError:  # an unbalanced quote: the first word is still the program
            parts = cmd.split()
    else:
        parts = [str(c) for c in cmd]
    if not parts:
        return "?"
    if len(parts) >= 3 and parts[1] == "-m":
        return parts[2]
    return Path(parts[0]).name


@overload
def run(cmd: Sequence[object], *, what: str, check: bool = ..., text: Literal[True],
        **kw: Any) -> subprocess.CompletedProcess[str]: ...
@overload
def run(cmd: Sequence[object], *, what: str, check: bool = ..., text: Literal[False] = ...,
        **kw: Any) -> subprocess.CompletedProcess[bytes]: ...
def run(cmd: Sequence[object], *, what: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[Any]:
    """subprocess.run for `what`; with check, a non-zero exit is a CiError naming the purpose, the tool
    and its last stderr line (stderr is captured for that unless the caller sends it elsewhere)."""
    argv = [str(c) for c in cmd]
    if _log.VERBOSE:
        print(f"+ {shlex.join(secret.redact(a) for a in argv)}", file=sys.stderr, flush=True)  # redacted before quoting
    if check and "stderr" not in kw and not kw.get("capture_output"):
        kw["stderr"] = subprocess.PIPE
    kw.setdefault("preexec_fn", bound(signal.SIGTERM))  # a tool never outlives the build (bound)
    try:
        proc = subprocess.run(argv, **kw)
    except FileNotFoundError as e:
        raise CiError(f"{what}: {tool_name(argv)} is not installed ({e.filename or argv[0]} not found)") from e
    if check and proc.returncode != 0:
        raise CiError(f"{what}: {failure(argv, proc)}")
    return proc


def stream(cmd: Sequence[object], *, what: str, log: IO[bytes] | None = None, check: bool = True,
           keep: int = 15, show: bool = True, on_line: Callable[[bytes], None] | None = None,
           **kw: Any) -> subprocess.CompletedProcess[bytes]:
    """Run a long tool (an image build, cibuildwheel, a compile) with its output in log as it comes (flushed
    line by line: a log someone follows, or keeps when the run is killed, is never behind), on stderr too
    with show, and each line to on_line (a progress count); the result's stdout holds its last `keep`
    non-blank lines, and with check a failure is a CiError naming the last of them, as run() does."""
    argv = [str(c) for c in cmd]
    if _log.VERBOSE:
        print(f"+ {shlex.join(secret.redact(a) for a in argv)}", file=sys.stderr, flush=True)  # redacted before quoting
    tail: deque[bytes] = deque(maxlen=keep)
    try:
        kw.setdefault("start_new_session", True)  # a group of its own, stopped whole (_stopped_with)
        kw.setdefault("preexec_fn", bound(signal.SIGTERM))  # and ended when we die, however (bound)
        with _log.tool_output(show), subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw) as p, \
                _stopped_with(p), _group_watched(p):
            assert p.stdout is not None, "stdout=PIPE gives the process a pipe"
            for line in p.stdout:
                if log is not None:
                    log.write(secret.redact_bytes(line))
                    log.flush()
                if show:  # a last line without its newline would swallow what comes next (a marker)
                    passthrough(line if line.endswith(b"\n") else line + b"\n")
                if on_line is not None:
                    on_line(line)
                if line.strip():
                    tail.append(line.rstrip())
    except FileNotFoundError as e:
        raise CiError(f"{what}: {tool_name(argv)} is not installed ({e.filename or argv[0]} not found)") from e
    done = subprocess.CompletedProcess(argv, p.returncode, b"\n".join(tail), b"\n".join(tail))
    if check and p.returncode != 0:
        raise CiError(f"{what}: {failure(argv, done)}")
    return done


# The watcher of a streamed tool's process group: told by the kernel when the build dies (bound), it stops
# the whole group, the tool's own children included (a compile's ninja and compilers, which the tool's
# parent-death signal alone would leave running, reparented to init). Standard library only, no site.
_WATCHER = """
import os, signal, sys, time
group, build = int(sys.argv[1]), int(sys.argv[2])
def stop(*_):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(2)
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, signal.SIG_IGN)
if os.getppid() != build:
    stop()
if sys.stdin.buffer.read(1) != b"x":  # the pipe closed without the build's word that its tool ended: it died
    stop()
"""


@contextlib.contextmanager
def _group_watched(p: subprocess.Popen[bytes]) -> Iterator[None]:
    """A watcher for the tool's group (_WATCHER) while it runs, where the platform has the parent-death
    signal; released (its pipe closed) when the tool is done."""
    if _prctl() is None or not hasattr(os, "killpg"):
        yield
        return
    try:
        watcher = subprocess.Popen([sys.executable, "-S", "-E", "-c", _WATCHER, str(p.pid), str(os.getpid())],
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   preexec_fn=bound(signal.SIGTERM))
    except OSError:
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            assert watcher.stdin is not None
            watcher.stdin.write(b"x")  # the tool ended: nothing to stop
            watcher.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            watcher.wait(timeout=10)


@contextlib.contextmanager
def _stopped_with(p: subprocess.Popen[bytes]) -> Iterator[None]:
    """Ctrl-C or SIGTERM while a tool streams: the tool is stopped too (TERM, then KILL), rather than
    waited for; a cancelled job must not sit out a compile."""
    try:
        yield
    except BaseException:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # the tool's whole group: a build backend's own children too
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            try:
                p.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        raise


def failure(cmd: Sequence[object] | str,
            proc: subprocess.CompletedProcess[str] | subprocess.CompletedProcess[bytes] | subprocess.CalledProcessError) -> str:
    """`tool failed with exit status N: its last stderr line`."""
    err = proc.stderr.decode(errors="replace") if isinstance(proc.stderr, bytes) else (proc.stderr or "")
    last = [line.strip() for line in err.strip().splitlines() if line.strip()][-1:]
    status = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
    return f"{tool_name(cmd)} failed with {status}" + (f": {last[0]}" if last else "")


# What to do about the errors the machine gives; the rest say what failed and on which path.
_ADVICE = {
    errno.ENOSPC: "free space, or point TMPDIR and the output directory at a larger disk",
    errno.EDQUOT: "free space, or point TMPDIR and the output directory at a larger disk",
    errno.EACCES: "check the permissions of that path",
    errno.EPERM: "check the permissions of that path",
    errno.EROFS: "write the output to a writable file system",
    errno.ENOTDIR: "a file is where a directory is needed: move it or pick another path",
    errno.EEXIST: "something is already at that path: move it or pick another path",
    errno.ENOENT: "check the path",
}


def system_error(e: OSError | subprocess.SubprocessError) -> str:
    """One line for an OS or tool failure: what failed, on which path, and what to do."""
    if isinstance(e, subprocess.CalledProcessError):
        return failure(e.cmd, e)
    if isinstance(e, subprocess.TimeoutExpired):
        return f"{tool_name(e.cmd)} did not finish within {e.timeout:g} s"
    if not isinstance(e, OSError):
        return str(e)
    what = e.strerror or str(e)
    if e.filename is not None:
        what += f": {str(e.filename)!r}"
    if e.filename2 is not None:
        what += f" -> {str(e.filename2)!r}"
    advice = _ADVICE.get(e.errno or 0)
    return what + (f" ({advice})" if advice else "")
