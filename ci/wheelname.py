"""Wheel file names per the binary distribution spec: 5 or 6 dash-separated parts.

A build tag must start with a digit; `triton-2.1.0-0-cp38-...whl` is project `triton`, version
`2.1.0`, build `0` (the parse pip2pi got wrong). Pure functions, stdlib only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ci.errors import CiError

_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?$")


def normalize(name: str) -> str:
    """PEP 503 normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def escape(name: str) -> str:
    """The distribution name as it appears in file and .dist-info names."""
    return re.sub(r"[-_.]+", "_", name)


@dataclass(frozen=True)
class WheelName:
    distribution: str  # as escaped in the file name
    version: str
    build: str | None
    python: str
    abi: str
    platform: str

    @classmethod
    def parse(cls, filename: str) -> "WheelName":
        if not filename.endswith(".whl"):
            raise CiError(f"not a wheel file name (no .whl suffix): {filename}")
        parts = filename[:-4].split("-")
        if len(parts) == 5:
            dist, version, py, abi, plat = parts
            build = None
        elif len(parts) == 6:
            dist, version, build, py, abi, plat = parts
            if not build[:1].isdigit():
                raise CiError(f"invalid wheel file name (build tag must start with a digit): {filename}")
        else:
            raise CiError(f"invalid wheel file name (want 5 or 6 dash-separated parts): {filename}")
        if not _NAME.match(dist) or not version or not all((py, abi, plat)):
            raise CiError(f"invalid wheel file name: {filename}")
        return cls(dist, version, build, py, abi, plat)

    @property
    def project(self) -> str:
        return normalize(self.distribution)

    @property
    def dist_info(self) -> str:
        return f"{self.distribution}-{self.version}.dist-info"

    @property
    def data_dir(self) -> str:
        return f"{self.distribution}-{self.version}.data"

    @property
    def tag(self) -> str:
        return f"{self.python}-{self.abi}-{self.platform}"

    @property
    def filename(self) -> str:
        build = f"-{self.build}" if self.build else ""
        return f"{self.distribution}-{self.version}{build}-{self.tag}.whl"

    def with_(self, **changes: str | None) -> "WheelName":
        return replace(self, **changes)
