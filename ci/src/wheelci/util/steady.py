"""One modification time for a build environment's installed files, wherever it was installed.

GCC's `#pragma once` takes two headers of the same size, time and content for one file. torch ships identical
headers under several paths, and an install gives each file the time it was written, so which of them a compile
reads, and so the preprocessed source a compile cache hashes, depends on the second each landed in: two machines
that installed the same environment miss each other's every compile. With one time, every machine reads the same.
The standard library only: a container build's own Python runs it too (resources/container/sccache_server.py).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

STEADY_TIME = 946684800  # 2000-01-01: older than any object a build writes, so no rebuild follows


def steady_times(root: Path) -> int:
    """Every entry below `root` (links themselves, never their targets) given STEADY_TIME; returns how many
    needed it (an environment done before costs a walk of stats)."""
    changed = 0
    for folder, dirs, files in os.walk(root):
        for name in (*files, *dirs):
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                if os.lstat(path).st_mtime != STEADY_TIME:
                    os.utime(path, (STEADY_TIME, STEADY_TIME), follow_symlinks=False)
                    changed += 1
    return changed
