"""`wheelci bench`: the benchmarks parse their own arguments (wheelci.bench dispatches to each)."""

from __future__ import annotations

from wheelci.bench import main

__all__ = ["main"]
