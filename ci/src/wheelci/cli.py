"""Shared command-line plumbing: one-line errors, exit codes, --debug, --json and paths. The command line
is a layer of its own: this module, the commands (wheelci.commands, one per subcommand) and the console
script (wheelci.__main__); the library never imports it, nor sees an argparse.Namespace.

Exit codes (the contract every stage keeps): 0 success, 1 a finding, 2 bad usage or bad input,
130 on Ctrl-C and 128+N on SIGTERM/SIGHUP (which clean up like Ctrl-C: no partial output is left).
An exception no stage anticipated is reported the same way, as one line with exit 2 (never a
traceback with exit 1, which would read as a finding). --debug prints the traceback first and keeps
the exit code: a script running with --debug must still tell bad input from a finding.

With --json, stdout holds one JSON document: the stage's result on success, and on any failure (bad
usage included) `{"ok": false, "error": ..., "exit_code": ..., "stage": ...}`, the error being the stderr
line's text, plus the stage's result under "result" when it had one (the sizes of a wheel over the limit).
Path arguments (those parsed as Path) are made absolute against the directory the command ran from
before the stage sees them: a tool the stage runs in another directory gets the user's path.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path, PurePath
from typing import Any, Callable, NoReturn, Sequence

from wheelci.errors import CiError
from wheelci.util import log, output, secret, variables
from wheelci.util.interrupt import TERMINATING, Terminated, terminate_like_ctrl_c
from wheelci.util.invocation import command, invoked_as
from wheelci.util.output import emit_json
from wheelci.util.output import shown as _shown
from wheelci.util.untrusted import cut

ERROR_WIDTH = 1000  # characters of an error line at most: a value echoed in it is never a 2 MB line


def shown(text: object) -> str:
    """An error's text as its one line says it: redacted first (escaping or cutting a secret would hide it
    from the redaction), made safe to print, and bounded (ERROR_WIDTH)."""
    return cut(_shown(secret.redact(str(text))), ERROR_WIDTH)
from wheelci.util.proc import system_error

# What the library shares with the command line, named here too: the commands import them from here
__all__ = ["Parser", "UsageExit", "parser", "run", "command", "invoked_as", "emit_json", "shown", "system_error",
           "Terminated", "TERMINATING"]


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (`prog: error: ...`) and exits 2, and takes
    options only as spelled: an abbreviation (`--cu` for `--cuda`) would change meaning the day a
    second option starts the same way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        text = shown(message)
        sys.stderr.write(f"{self.prog}: error: {text}\n")
        raise UsageExit(text)


class UsageExit(SystemExit):
    """argparse's exit 2 on bad usage, carrying the error's text for the --json failure document."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message


def parser(stage: str, description: str) -> Parser:
    """A stage's parser, its prog the stage as the user invoked it (invoked_as): `check` is `wheelci check`
    through the console script, `python -m wheelci.check` through that, `python -m ci.check` here."""
    p = Parser(prog=invoked_as(stage), description=description)
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    p.add_argument("--verbose", action="store_true", help="echo each command run, as `+ cmd` (or WHEELCI_VERBOSE=1)")
    return p


def run(p: argparse.ArgumentParser, main: Callable[[argparse.Namespace], int | None],
        argv: Sequence[str] | None = None) -> NoReturn:
    """Parse argv, call main, turn CiError into one stderr line and its exit code (and, with --json,
    into the failure document on stdout). Everything the stage prints passes through the secret
    redaction (wheelci.util.secret): the credentials of the environment and of the arguments are
    registered before anything is parsed or printed."""
    argv = sys.argv[1:] if argv is None else list(argv)
    secret.add_environ(os.environ)
    for word in argv:
        secret.add_text(word)
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = secret.RedactingStream(sys.stdout), secret.RedactingStream(sys.stderr)
    try:
        _run(p, main, argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = streams


def _run(p: argparse.ArgumentParser, main: Callable[[argparse.Namespace], int | None],
         argv: list[str]) -> NoReturn:
    stage = _stage_name(p)
    try:
        args = p.parse_args(argv)
    except UsageExit as e:
        if _asks_json(p, argv):
            _emit_failure(stage, e.message, 2, [])
        raise
    for name, value in vars(args).items():
        setattr(args, name, _absolute(value))
    log.configure(p.prog.removeprefix("python -m "))
    for line in variables.deprecations(os.environ):
        log.warning(line)
    if getattr(args, "verbose", False):
        log.VERBOSE = True
    as_json = bool(getattr(args, "json", False))
    held: list[Any] = []
    output.held = held if as_json else None
    error: str | None = None  # the failure's text, as the stderr line says it
    try:
        with terminate_like_ctrl_c():
            code = main(args) or 0
        output.held = None
        if code == 0:
            for obj in held:
                output.write_json(obj)
        else:
            error = f"failed with exit status {code}"
    except CiError as e:
        _traceback_if(args)
        error, code = shown(e), e.exit_code
        print(f"{p.prog}: error: {error}", file=sys.stderr)
    except Terminated as e:
        error, code = f"terminated by {signal.Signals(e.signum).name}", 128 + e.signum
        print(f"{p.prog}: {error}", file=sys.stderr)
    except KeyboardInterrupt:
        error, code = "interrupted", 130
        print(f"{p.prog}: {error}", file=sys.stderr)
    except BrokenPipeError:  # output piped into `head`: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    except (OSError, subprocess.SubprocessError) as e:  # the machine's or a tool's answer, not a bug
        _traceback_if(args)
        error, code = shown(system_error(e)), 2
        print(f"{p.prog}: error: {error}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001  last resort: an input no check anticipated
        _traceback_if(args)
        where = e.__traceback__
        while where is not None and where.tb_next is not None:
            where = where.tb_next
        at = f" at {Path(where.tb_frame.f_code.co_filename).name}:{where.tb_lineno}" if where else ""
        error, code = (f"unexpected {type(e).__name__}{at}: {shown(str(e).splitlines()[0]) if str(e) else ''} "
                       "(an input this stage does not handle yet; --debug shows the traceback)"), 2
        print(f"{p.prog}: error: {error}", file=sys.stderr)
    finally:
        output.held = None
    if as_json and error is not None:
        _emit_failure(stage, error, code, held)
    sys.exit(code)


def _emit_failure(stage: str, error: str, code: int, results: list[Any]) -> None:
    """The --json failure document on stdout; a stdout that is gone (a closed pipe) gets nothing."""
    doc: dict[str, Any] = {"ok": False, "error": error, "exit_code": code, "stage": stage}
    if results:
        doc["result"] = results[0] if len(results) == 1 else results
    try:
        output.write_json(doc)
        sys.stdout.flush()
    except OSError:
        pass


def _stage_name(p: argparse.ArgumentParser) -> str:
    """`check` from `wheelci check`, `python -m wheelci.check`, `python -m ci.check` or `ci.check`."""
    return p.prog.split()[-1].rsplit(".", 1)[-1]


def _asks_json(p: argparse.ArgumentParser, argv: Sequence[str]) -> bool:
    """Whether argv, which did not parse, asked for --json of a parser that has it: the options are
    read up to `--`, after which everything is an operand."""
    options = argv[:argv.index("--")] if "--" in argv else argv
    return "--json" in options and _has_json(p)


def _has_json(p: argparse.ArgumentParser) -> bool:
    for action in p._actions:
        if "--json" in action.option_strings:
            return True
        if isinstance(action, argparse._SubParsersAction) and any(_has_json(s) for s in action.choices.values()):
            return True
    return False


PROJECT_HELP = ("a project directory, an sdist (.tar.gz), or a requirement (NAME, NAME==VERSION) whose sdist is "
                "fetched from the index (PIP_INDEX_URL, else PyPI); default: the current directory")


def project_argument(text: str) -> Path | str:
    """The project argument: a path, or, where it names no file and reads as no path (no slash, no
    leading dot: pip's rule), the words of a requirement, kept as given (never made absolute)."""
    if os.path.lexists(text) or "/" in text or text.startswith(".") or text.endswith((".tar.gz", ".zip")):
        return Path(text)
    return text


def _absolute(value: Any) -> Any:
    """A Path argument (or a list of them) made absolute against the current directory; the rest as is.
    absolute(), not resolve(): `link/..` keeps meaning what the kernel makes of it."""
    if isinstance(value, PurePath):
        return Path(value).absolute()
    if isinstance(value, list) and value and all(isinstance(v, PurePath) for v in value):
        return [Path(v).absolute() for v in value]
    return value


def _traceback_if(args: argparse.Namespace) -> None:
    """With --debug, the traceback of the exception being handled (the exit code stays the same)."""
    if getattr(args, "debug", False):
        traceback.print_exc()
