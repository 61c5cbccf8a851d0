"""ABI check: which LibTorch ABI each library of a wheel uses, and whether the wheel says so.

A classic library (C++ symbols of c10/at/torch) loads only on the torch it was built against, so its
wheel must pin `torch==`. A stable-ABI wheel (`torch>=X.Y`) must hold only stable libraries, whose
newest shim function is no newer than X.Y, none linking libtorch_python; otherwise users meet
`undefined symbol` on the first older torch. An abi3-tagged wheel is also checked by abi3audit.
The shim functions' first versions come from the headers of a torch install (the build's).

    python -m ci.abi WHEEL [--torch-site DIR] [--json]
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from wheelci.errors import CiError
from wheelci.native.elf import imports
from wheelci.native.stable_abi import LibraryAbi, classify, problems, shim_versions, version_text
from wheelci.util import proc
from wheelci.wheel.metadata import get_headers
from wheelci.wheel.requirements import plain_install_requirement, requirement_name
from wheelci.wheel.zipread import WheelArchive


@dataclass
class AbiReport:
    wheel: str
    torch_requirement: str | None
    libraries: list[LibraryAbi] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        kinds = {lib.kind for lib in self.libraries} - {"none"}
        return "classic" if "classic" in kinds else ("stable" if kinds else "none")

    def to_json(self) -> dict[str, Any]:
        libs = [{**asdict(lib), "shims": len(lib.shims), "needs": version_text(lib.needs) if lib.needs else None}
                for lib in self.libraries]
        return {"wheel": self.wheel, "torch_requirement": self.torch_requirement, "kind": self.kind,
                "libraries": libs, "problems": self.problems, "passed": not self.problems}


def torch_include(site: Path | None) -> Path:
    """torch's include directory: under the given site-packages, else of the torch this Python imports."""
    if site is None:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            raise CiError("no torch here to read the stable-ABI headers from: pass --torch-site DIR")
        site = Path(list(spec.submodule_search_locations)[0]).parent
    include = site / "torch" / "include"
    if not (include / "torch").is_dir():
        raise CiError(f"{site}: no torch headers there (torch/include)")
    return include


def abi3_problems(wheel: Path) -> list[str]:
    """abi3audit's violations for an abi3-tagged wheel (Python symbols outside the limited API)."""
    audit = proc.run([sys.executable, "-m", "abi3audit", "--report", "--strict", wheel],
                     what=f"auditing {wheel.name}'s limited API", check=False, capture_output=True, text=True)
    try:
        report = json.loads(audit.stdout)
    except json.JSONDecodeError:
        tail = (audit.stderr.strip().splitlines() or ["no output"])[-1]
        raise CiError(f"abi3audit could not check {wheel.name}: {tail}") from None
    out = []
    for spec in report.get("specs", {}).values():
        for so in spec.get("wheel", []) if isinstance(spec.get("wheel"), list) else []:
            for v in so.get("result", {}).get("non_abi3_symbols", []):
                out.append(f"{so.get('name')} uses {v} outside the limited API, but the wheel is tagged abi3")
            computed, tagged = so.get("result", {}).get("computed"), so.get("result", {}).get("baseline")
            if computed and tagged and _py(computed) > _py(tagged):
                out.append(f"{so.get('name')} needs the abi3 of Python {computed}, but the wheel is tagged {tagged}")
    if audit.returncode != 0 and not out:
        tail = (audit.stderr.strip().splitlines() or ["no output"])[-1]
        out.append(f"abi3audit refused {wheel.name}: {tail}")
    return out


def _py(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def check_abi(wheel: Path, include: Path) -> AbiReport:
    with WheelArchive.open(wheel) as wa:
        requires = get_headers(wa.metadata, "Requires-Dist")
        abi = wa.name.abi
    # the requirement a plain `pip install` acts on (not one for an extra)
    torch, req = next(((r, q) for r in requires
                       if requirement_name(r) == "torch" and (q := plain_install_requirement(r))),
                      (None, None))
    table = shim_versions(include)
    libs = [classify(path, undefined, needed, table) for path, (undefined, needed) in imports(wheel).items()]
    found = problems(libs, f"torch{req.specifier}" if req else None)
    if "abi3" in abi.split("."):
        found += abi3_problems(wheel)
    return AbiReport(wheel.name, torch, libs, found)


if __name__ == "__main__":  # `python -m wheelci.abi` (`python -m ci.abi` here): the command line runs it
    import runpy

    runpy.run_module("wheelci.commands.abi", run_name="__main__")
