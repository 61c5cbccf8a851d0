"""Sizes as people write them ('100MiB', '3GB', 'pypi') and as we print them."""

from __future__ import annotations

from wheelci.errors import CiError

PROFILES = {"pypi": 100 * 2**20, "github": 2 * 2**30 - 1}


def parse_limit(text: str | int | None) -> int | None:
    """'pypi' | 'github' | '3GB' | bytes -> bytes (the largest allowed size)."""
    if text is None or isinstance(text, int):
        return text
    key = text.strip().lower()
    return PROFILES[key] if key in PROFILES else parse_size(text)


def parse_size(text: str) -> int:
    """'100MiB', '3GB', '120 MB', '2048' (bytes) -> bytes. Decimal units are powers of 1000."""
    units = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
             "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
             "tib": 2**40}
    s = text.strip().lower().replace(" ", "")
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(num):]
    try:
        value = float(num)
    except ValueError:
        raise CiError(f"not a size: {text!r} (try 100MiB, 3GB or a byte count)") from None
    if unit not in units or not (0 <= value * units[unit] < 2**63):  # also refuses nan and inf
        raise CiError(f"not a size: {text!r} (a number below 8 EiB with a unit: B, KB, MB, GB, TB, "
                      "KiB, MiB, GiB, TiB)")
    return int(value * units[unit])


def format_size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
