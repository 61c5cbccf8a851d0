"""How the user runs the tool: `wheelci STAGE`, `python -m wheelci.STAGE` or `python -m ci.STAGE`.

Every message that tells the user to run a stage names it through command(), so the command it gives is
one they can type. The command line (wheelci.__main__) sets COMMAND; the library only reads it.
"""

from __future__ import annotations

import sys

COMMAND: str | None = None  # `wheelci STAGE` when the console script runs the stage


def command(stage: str) -> str:
    """Any stage (`index`, `bench`) named the way the user runs the tool now: `wheelci index` under the
    console script, `python -m wheelci.index` when a `python -m wheelci.X` runs, else `python -m ci.index`
    (this repository, whose `ci` package is wheelci under the design's stage names)."""
    if COMMAND is not None:
        return f"wheelci {stage}"
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name.startswith("wheelci."):
        return f"python -m wheelci.{stage}"
    return f"python -m ci.{stage}"


def invoked_as(stage: str) -> str:
    """The running stage as the user invoked it: command()'s rule, for the stage given by its name
    (`check`) or by its name in this repository (`ci.check`, `python -m ci.check`)."""
    return command(stage.split()[-1].rsplit(".", 1)[-1])
