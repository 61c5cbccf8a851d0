"""Requirements (PEP 508), read one way: packaging's parser, names normalised by packaging.

Requires-Dist lines, `--add-requires`, a project's build requirements and our own pins all go through
here, so a name is never read by a pattern that disagrees with pip's (`torch[opt-einsum]>=1.1`,
`Torch_Foo @ https://...`, `torch ;python_version>"3"`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wheelci.errors import CiError
from wheelci.wheel.names import normalize

if TYPE_CHECKING:
    from packaging.requirements import Requirement


def parse_requirement(text: str, what: str = "requirement") -> "Requirement":
    """The requirement, or CiError naming `what` with packaging's first line of complaint."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(text)
    except InvalidRequirement as e:
        raise CiError(f"invalid {what} {text!r}: {str(e).splitlines()[0]}") from None


def read_requirement(text: str) -> "Requirement | None":
    """The requirement, or None where packaging cannot read it (whoever runs it reports it in its own words)."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def without_marker(text: str) -> str:
    """The requirement as written for this machine: `nvidia-cudnn-cu13==9.20.0.48` of torch's
    `nvidia-cudnn-cu13==9.20.0.48; platform_system == "Linux"`."""
    req = parse_requirement(text)
    req.marker = None
    return str(req)


def requirement_name(text: str) -> str | None:
    """The normalised project name a requirement names (`Torch[x]>=1` -> `torch`), None when packaging
    cannot read the line (pip reports it in its own words)."""

    req = read_requirement(text)
    return None if req is None else normalize(req.name)


def plain_install_requirement(line: str) -> "Requirement | None":
    """A Requires-Dist line as a packaging Requirement when it applies to a plain install (no extra
    asked for, this interpreter's markers), else None; None for a line packaging cannot read."""
    req = read_requirement(line)
    if req is None:
        return None
    return req if req.marker is None or req.marker.evaluate({"extra": ""}) else None
