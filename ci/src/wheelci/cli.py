"""Shared command-line plumbing: one-line errors, exit codes, --debug and --json.

Exit codes (the contract every stage keeps): 0 success, 1 a finding, 2 bad usage or bad input,
130 on Ctrl-C and 128+N on SIGTERM/SIGHUP (which clean up like Ctrl-C: no partial output is left).
An exception no stage anticipated is reported the same way, as one line with exit 2 (never a
traceback with exit 1, which would read as a finding). --debug prints the traceback first and keeps
the exit code: a script running with --debug must still tell bad input from a finding.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import errno
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from wheelci.errors import CiError


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (`prog: error: ...`) and exits 2, and takes
    options only as spelled: an abbreviation (`--cu` for `--cuda`) would change meaning the day a
    second option starts the same way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


COMMAND: str | None = None  # `wheelci STAGE` when the console script runs the stage


def parser(prog: str, description: str) -> Parser:
    """A stage's parser. `prog` is its name in this repository (`python -m ci.check`); run through the
    console script the stage is `wheelci check`, and through `python -m wheelci.check` it is that."""
    p = Parser(prog=invoked_as(prog), description=description)
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    p.add_argument("--verbose", action="store_true", help="echo each command run, as `+ cmd` (or CI_VERBOSE=1)")
    return p


def invoked_as(prog: str) -> str:
    if COMMAND is not None:
        return COMMAND
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name.startswith("wheelci."):
        return f"python -m {spec.name}"
    return prog


def run(p: argparse.ArgumentParser, main: Callable[[argparse.Namespace], int | None],
        argv: Sequence[str] | None = None) -> NoReturn:
    """Parse argv, call main, turn CiError into one stderr line and its exit code."""
    args = p.parse_args(argv)
    from wheelci.util import log

    log.configure(p.prog.removeprefix("python -m "))
    if getattr(args, "verbose", False):
        from wheelci.util import proc

        proc.VERBOSE = True
    try:
        with _terminate_like_ctrl_c():
            code = main(args) or 0
    except CiError as e:
        _traceback_if(args)
        print(f"{p.prog}: error: {shown(e)}", file=sys.stderr)
        code = e.exit_code
    except Terminated as e:
        print(f"{p.prog}: terminated by {signal.Signals(e.signum).name}", file=sys.stderr)
        code = 128 + e.signum
    except KeyboardInterrupt:
        print(f"{p.prog}: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:  # output piped into `head`: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    except (OSError, subprocess.SubprocessError) as e:  # the machine's or a tool's answer, not a bug
        _traceback_if(args)
        print(f"{p.prog}: error: {shown(system_error(e))}", file=sys.stderr)
        code = 2
    except Exception as e:  # noqa: BLE001  last resort: an input no check anticipated
        _traceback_if(args)
        where = e.__traceback__
        while where is not None and where.tb_next is not None:
            where = where.tb_next
        at = f" at {Path(where.tb_frame.f_code.co_filename).name}:{where.tb_lineno}" if where else ""
        print(f"{p.prog}: error: unexpected {type(e).__name__}{at}: {shown(str(e).splitlines()[0]) if str(e) else ''} "
              "(an input this stage does not handle yet; --debug shows the traceback)", file=sys.stderr)
        code = 2
    sys.exit(code)


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
    from wheelci.util import proc

    if isinstance(e, subprocess.CalledProcessError):
        return proc.failure(e.cmd, e)
    if isinstance(e, subprocess.TimeoutExpired):
        return f"{proc.tool_name(e.cmd)} did not finish within {e.timeout:g} s"
    if not isinstance(e, OSError):
        return str(e)
    what = e.strerror or str(e)
    if e.filename is not None:
        what += f": {str(e.filename)!r}"
    if e.filename2 is not None:
        what += f" -> {str(e.filename2)!r}"
    advice = _ADVICE.get(e.errno or 0)
    return what + (f" ({advice})" if advice else "")


TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP raised where the stage is, as Ctrl-C is: the same cleanup paths (atomic
    outputs, temporary directories, outputs of a half-done split) run instead of a silent death."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum: int, frame: object) -> None:
    for s in TERMINATING:  # a second signal must not cut the cleanup of the first short
        signal.signal(s, signal.SIG_IGN)
    raise Terminated(signum)


@contextlib.contextmanager
def _terminate_like_ctrl_c():
    """Install _raise_terminated for SIGTERM/SIGHUP while main runs (main thread only; a signal
    ignored on entry, as under nohup, stays ignored); the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in TERMINATING}
    for s, h in old.items():
        if h is not signal.SIG_IGN:
            signal.signal(s, _raise_terminated)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def shown(text: object) -> str:
    """Text from an input (member and file names, a server's words) made safe to print: control
    characters, line and paragraph separators escaped, so nothing can start a forged line (an `ok`,
    a `::error::` workflow command) or send a terminal escape sequence."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def _traceback_if(args: argparse.Namespace) -> None:
    """With --debug, the traceback of the exception being handled (the exit code stays the same)."""
    if getattr(args, "debug", False):
        import traceback
        traceback.print_exc()


def emit_json(obj: Any) -> None:
    """Print a machine-readable result on stdout (the --json contract)."""
    json.dump(obj, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")
