"""`python -m ci.<stage>` in this repository: the wheelci package (ci/src/wheelci) under the stage names
the design gives. Nothing of this file ships: the installed tool is `wheelci`, which never imports `ci`."""

import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parent / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

import wheelci  # noqa: E402

__path__ = list(wheelci.__path__)
