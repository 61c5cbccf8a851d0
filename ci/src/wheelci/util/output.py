"""What a stage prints for others to read: the --json document on stdout, and text from an input made
safe to print. The command line (wheelci.cli) holds the JSON result until the stage has succeeded."""

from __future__ import annotations

import json
import sys
from typing import Any

held: list[Any] | None = None  # while a --json stage runs under wheelci.cli: its result, printed once it succeeded


def emit_json(obj: Any) -> None:
    """Print a machine-readable result on stdout (the --json contract). Under the command line it is held
    until the stage has succeeded: a stage that fails after it (an upload after the build's report, a check
    over its limit) prints the failure document instead, with this result inside."""
    if held is not None:
        held.append(obj)
    else:
        write_json(obj)


def write_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def shown(text: object) -> str:
    """Text from an input (member and file names, a server's words) made safe to print: control
    characters, line and paragraph separators escaped, so nothing can start a forged line (an `ok`,
    a `::error::` workflow command) or send a terminal escape sequence."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))
