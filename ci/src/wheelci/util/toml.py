"""The one TOML reader: tomllib, or on Python 3.10 (inside a build image, where ci.repair runs) the
same parser as pip vendors it."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from tomllib import TOMLDecodeError, loads
else:
    from pip._vendor.tomli import TOMLDecodeError, loads

__all__ = ["TOMLDecodeError", "loads"]
