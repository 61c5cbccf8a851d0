"""The one TOML reader: tomllib, or on Python 3.10 (inside a build image, where ci.repair runs) the
same parser as pip vendors it."""

from __future__ import annotations

try:
    from tomllib import TOMLDecodeError, loads
except ModuleNotFoundError:
    from pip._vendor.tomli import TOMLDecodeError, loads  # type: ignore[no-redef]

__all__ = ["TOMLDecodeError", "loads"]
