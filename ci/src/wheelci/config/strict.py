"""Config tables take only the keys they know: a typo (`on_pypy = true`) is refused with the closest
known key, never read as an absent optional value. Stdlib only (it imports inside build images)."""

from __future__ import annotations

import difflib
from typing import Any, Iterable

from wheelci.errors import CiError


def check_keys(table: Any, known: Iterable[str], where: str) -> dict[str, Any]:
    """`table` as a dict whose keys are all in `known`; CiError naming `where` and the nearest key."""
    if not isinstance(table, dict):
        raise CiError(f"{where} must be a table, not {type(table).__name__}")
    known = list(known)
    for key in table:
        if key not in known:
            close = difflib.get_close_matches(str(key).replace("_", "-"), known, n=1, cutoff=0.6) or \
                difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
            raise CiError(f"unknown key {key!r} in {where}{hint}")
    return table
