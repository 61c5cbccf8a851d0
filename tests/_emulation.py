"""aarch64 under QEMU for the suite: Debian's qemu-user-static registered in binfmt_misc, as the
aarch64 tests need it (a container engine runs arm64 images through it; cibuildwheel builds in them).

A fresh machine has neither the package nor binfmt_misc mounted: as root the suite installs the one
(scripts/bootstrap --system) and mounts the other, then enables the handler. Where that cannot be
done, the reason is returned and the tests that need it skip with it.
"""

from __future__ import annotations

import os

from wheelci import archs
from tests import _proc
from tests._servers import ensure_debian_package


def ensure(arch: str = "aarch64") -> str | None:
    """None once this kernel runs `arch` binaries through QEMU, else why not."""
    if arch == archs.machine() or arch in archs.emulated():
        return None
    ensure_debian_package(f"qemu-{arch}-static", "qemu-user-static")
    update = ensure_debian_package("update-binfmts", "binfmt-support")
    if os.geteuid() != 0:
        return "binfmt_misc needs root to register QEMU"
    if not (archs.BINFMT / "register").exists():
        r = _proc.run([ensure_debian_package("mount", "mount"), "-t", "binfmt_misc", "binfmt_misc", str(archs.BINFMT)],
                      capture_output=True, text=True)
        if r.returncode != 0:
            return f"cannot mount binfmt_misc: {r.stderr.strip()[-300:]}"
    _proc.run([update, "--enable", f"qemu-{arch}"], capture_output=True, text=True)
    if arch not in archs.emulated():
        return f"qemu-{arch} is not registered in binfmt_misc after update-binfmts --enable"
    return None
