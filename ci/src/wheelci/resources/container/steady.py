"""One modification time for the headers of a build environment, wherever it was installed.

GCC's `#pragma once` takes two headers of the same size, time and content for one file. torch ships identical
headers under several paths, and an install gives each file the time it was written, so which of them a compile
reads, and so the preprocessed source a compile cache hashes, depends on the second each landed in: two machines
that installed the same environment miss each other's every compile. With one time, every machine reads the same.
The standard library only: a container build's own Python runs it (sccache_server.py, beside it), and host builds
import it (wheelci.compile.host).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

STEADY_TIME = 946684800  # 2000-01-01: older than any object a build writes, so no rebuild follows


def steady_times(root: Path) -> int:
    """Every file and link inside an `include` directory below `root` (what compilers read; a link itself,
    never its target) given STEADY_TIME; returns how many needed it (an environment done before costs a walk
    of stats). A file hard-linked elsewhere (uv links its cache into the environments it makes) first gets a
    copy of its own, so nothing outside `root` changes."""
    changed = 0
    for folder, _, files in os.walk(root):
        if "include" not in Path(folder).relative_to(root).parts:
            continue
        for name in files:
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if st.st_mtime == STEADY_TIME:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                    own = path + ".steady-copy"
                    shutil.copyfile(path, own)
                    os.chmod(own, stat.S_IMODE(st.st_mode))
                    os.replace(own, path)
                os.utime(path, (STEADY_TIME, STEADY_TIME), follow_symlinks=False)
                changed += 1
    return changed
