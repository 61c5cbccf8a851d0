"""Progress on stderr, in one voice for every stage: `ci.build: compiled in 41 s`.

Library code says what it does through info, warning and step, and never prints: stdout belongs to a
stage's result (`--json` must stay parseable). The CLI names the voice (configure). Under GitHub
Actions a step is a collapsible `::group::` and a warning a `::warning::` annotation, as cibuildwheel's
own log does. Every message may hold text from outside (a project's names and settings, a tool's output
tail): each of its lines is made safe here, the one place (`_safe_lines`): redacted, terminal escapes and
control characters gone, and every line starts with the voice, so none is a workflow command (`::error`)
of the text's choosing. A step reports its time when it ends; a failed one says nothing more, since the error
line says it. A long step that prints little (a compile) shows it is alive through a Ticker.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

from wheelci.errors import CiError
from wheelci.util import secret, untrusted, variables
from wheelci.util.atomic import atomic_path
from wheelci.util.cache import read_stamp

# --verbose or WHEELCI_VERBOSE=1: debug lines and each command run (util.proc) are shown
VERBOSE = variables.read(os.environ, variables.VERBOSE) not in ("", "0")

_voice = "ci"
_open_steps = 0
_lock = threading.Lock()  # a Ticker's thread and the step it watches write lines to the same stderr
HEARTBEAT = variables.HEARTBEAT  # seconds between a Ticker's lines in logs and CI (default HEARTBEAT_SECONDS)
HEARTBEAT_SECONDS = 60.0


def configure(voice: str) -> None:
    """Name the stage that speaks (`ci.build`): the CLI calls this once."""
    global _voice
    _voice = voice


def on_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def _command_data(text: str) -> str:
    """A workflow command's message, escaped as the runner unescapes it (a newline would end it)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _emit(line: str) -> None:
    with _lock:  # one write: a reader of the stream never sees half a line
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def passthrough(data: bytes) -> None:
    """A tool's own output, streamed as it comes (an image build, cibuildwheel): whole lines, never
    cut by a Ticker's line."""
    with _lock:
        sys.stderr.flush()
        sys.stderr.buffer.write(untrusted.terminal_bytes(data))
        sys.stderr.flush()


@contextmanager
def tool_output(show: bool = True) -> Iterator[None]:
    """Where a tool's own output streams (its build backend, the project's setup.py and tests): on GitHub
    Actions between `::stop-commands::` markers of a fresh token, so that no line of it is a workflow command."""
    if not (show and on_github_actions()):
        yield
        return
    off, on = untrusted.workflow_commands_off([])  # the markers of a fresh token, made where the plan's are
    _emit(off)
    try:
        yield
    finally:
        _emit(on)


def _safe_lines(message: object) -> list[str]:
    """A message's lines as they may be shown: redacted (before anything changes a secret's characters),
    each on one line without escapes or control characters; blank lines dropped, at least one line."""
    lines = [untrusted.one_line(ln) for ln in secret.redact(str(message)).splitlines()]
    return [ln for ln in lines if ln] or [""]


def info(message: str) -> None:
    _emit("\n".join(f"{_voice}: {line}" for line in _safe_lines(message)))


def debug(message: str) -> None:
    """A line only --verbose (or WHEELCI_VERBOSE=1) shows: where to look, beside a failure's one error line."""
    if VERBOSE:
        info(message)


def warning(message: str) -> None:
    if on_github_actions():
        _emit(f"::warning title={_command_data(_voice)}::{_command_data(chr(10).join(_safe_lines(message)))}")
    else:
        info(f"warning: {message}")


@contextmanager
def step(title: str) -> Iterator[None]:
    """A stage's step: grouped on GitHub Actions (groups do not nest: only the outermost groups), and
    `title: N s` when it ends without an error."""
    global _open_steps
    group = on_github_actions() and _open_steps == 0
    if group:
        _emit(f"::group::{_command_data(' '.join(_safe_lines(title)))}")
    _open_steps += 1
    start = time.monotonic()
    try:
        yield
    finally:
        _open_steps -= 1
        if group:
            _emit("::endgroup::")
    info(f"{' '.join(_safe_lines(title))}: {time.monotonic() - start:.0f} s")


def on_terminal() -> bool:
    """A person watches stderr: a status line may be redrawn in place. Logs and CI keep every line."""
    return sys.stderr.isatty() and not on_github_actions()


def duration(seconds: float) -> str:
    """`42 s`, `3 min 5 s`, `1 h 2 min`: how long a step has run, to the unit that matters."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def heartbeat_seconds(env: Mapping[str, str] = os.environ) -> float:
    """The interval of a Ticker's lines in logs and CI: WHEELCI_HEARTBEAT seconds, else one minute."""
    raw = variables.read(env, HEARTBEAT)
    if not raw:
        return HEARTBEAT_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise CiError(f"{HEARTBEAT}={raw!r}: not a number of seconds above 0")
    return seconds


class Ticker:
    """A long step that shows it is alive while it runs, from a timer of its own: a compiler can spend
    minutes on one file and print nothing (torch-cluster), and a CI log that stays silent that long
    looks hung, or is killed by a runner's no-output timeout.

    On a terminal one status line (`compiling, 1 min 12 s, 12 of 40 files, about 3 min left`) is redrawn every second and on
    each count; in logs and CI the same status is a line of its own every `interval` seconds (WHEELCI_HEARTBEAT,
    default 60). `live=False` leaves the terminal alone, for a step whose own output streams there."""

    def __init__(self, doing: str, *, interval: float | None = None, terminal: bool | None = None,
                 live: bool = True) -> None:
        self.doing = doing
        self.count: str | Callable[[], str] = ""  # the step's own progress (`3 of 12 files, about 9 min left`)
        self.terminal = on_terminal() if terminal is None else terminal
        self.silent = self.terminal and not live  # the step's own output is on the terminal already
        self.interval = 1.0 if self.terminal else (interval or heartbeat_seconds())
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"ticker: {doing}", daemon=True)

    def status(self) -> str:
        count = self.count() if callable(self.count) else self.count
        return ", ".join([self.doing, duration(time.monotonic() - self._start)] + ([count] if count else []))

    def update(self, count: str | Callable[[], str] | None) -> None:
        """The tool's newest count (None: this line held none), or what says it at each line drawn (a
        compile's Tracker: its estimate moves with the clock); a terminal shows it at once."""
        if count is None:
            return
        self.count = count
        if self.terminal:
            self._draw()

    def _draw(self) -> None:
        if self.silent:
            return
        if not self.terminal:
            info(self.status())
            return
        with _lock:
            sys.stderr.write("\r" + self.status()[:120] + "\033[K")
            sys.stderr.flush()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            self._draw()

    def __enter__(self) -> "Ticker":
        self._start = time.monotonic()
        if not self.silent:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.terminal and not self.silent:  # the status line goes: what follows says how it ended
            with _lock:
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()


LOG_CAP = 256 << 20  # a log larger than this is removed rather than redacted


def redact_file(path: Path) -> None:
    """A log a tool wrote itself (sccache's server, a container's) redacted in place: read only as a regular
    file (a planted link or FIFO is never followed), replaced by a new file rather than written through,
    removed when over LOG_CAP."""
    with contextlib.suppress(OSError):
        if not stat.S_ISREG((st := path.lstat()).st_mode):
            return
        if st.st_size > LOG_CAP:
            path.unlink()
            return
        data = read_stamp(path, LOG_CAP)
        if (clean := secret.redact_bytes(data)) != data:
            with atomic_path(path) as tmp:
                tmp.write_bytes(clean)


def redact_files(root: Path, names: Iterable[str]) -> None:
    """The logs a layout names under root (wheelci.util.layout: entries marked `log`), a directory's files
    one level down, redacted in place: what a build leaves holds no credential however it wrote it."""
    for name in names:
        entry = root / name
        if entry.is_symlink():
            continue
        children = sorted(entry.iterdir()) if entry.is_dir() else [entry]
        for path in children:
            redact_file(path)
