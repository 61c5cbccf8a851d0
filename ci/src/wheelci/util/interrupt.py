"""SIGTERM and SIGHUP raised where the stage is, as Ctrl-C is: the same cleanup paths (atomic outputs,
temporary directories, the outputs of a half-done split) run instead of a silent death."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised as a KeyboardInterrupt that knows its signal (the exit status is 128+N)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum: int, frame: object) -> None:
    for s in TERMINATING:  # a second signal must not cut the cleanup of the first short
        signal.signal(s, signal.SIG_IGN)
    raise Terminated(signum)


@contextlib.contextmanager
def terminate_like_ctrl_c() -> Iterator[None]:
    """Install _raise_terminated for SIGTERM/SIGHUP inside (main thread only; a signal ignored on entry,
    as under nohup, stays ignored); the previous handlers come back after."""
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
