"""Progress on stderr, in one voice for every stage: `ci.build: compiled in 41 s`.

Library code says what it does through info, warning and step, and never prints: stdout belongs to a
stage's result (`--json` must stay parseable). The CLI names the voice (configure). Under GitHub
Actions a step is a collapsible `::group::` and a warning a `::warning::` annotation, as cibuildwheel's
own log does. A step reports its time when it ends; a failed one says nothing more, since the error
line says it.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Iterator

_voice = "ci"
_open_steps = 0


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
    print(line, file=sys.stderr, flush=True)


def info(message: str) -> None:
    _emit(f"{_voice}: {message}")


def warning(message: str) -> None:
    if on_github_actions():
        _emit(f"::warning title={_command_data(_voice)}::{_command_data(message)}")
    else:
        info(f"warning: {message}")


@contextmanager
def step(title: str) -> Iterator[None]:
    """A stage's step: grouped on GitHub Actions (groups do not nest: only the outermost groups), and
    `title: N s` when it ends without an error."""
    global _open_steps
    group = on_github_actions() and _open_steps == 0
    if group:
        _emit(f"::group::{_command_data(title)}")
    _open_steps += 1
    start = time.monotonic()
    try:
        yield
    finally:
        _open_steps -= 1
        if group:
            _emit("::endgroup::")
    info(f"{title}: {time.monotonic() - start:.0f} s")


def progress(text: str) -> None:
    """A live status line on a terminal, overwritten by the next (a compiler's [n/N] steps); logs and CI,
    which would keep every one of them, get none."""
    if sys.stderr.isatty():
        sys.stderr.write("\r" + text.rstrip()[:120] + "\033[K")
        sys.stderr.flush()


def progress_done() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\n")
        sys.stderr.flush()
