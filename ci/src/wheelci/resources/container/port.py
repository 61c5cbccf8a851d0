"""Whether a server listens on a loopback port: the host asks it of its sccache server, and so does the
container's script (sccache_server.py, beside this) of the one it starts. The standard library only."""

from __future__ import annotations

import socket


def listens(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            return False
    return True
