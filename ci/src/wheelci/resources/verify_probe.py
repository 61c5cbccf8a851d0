"""Generic checks for any extension wheel, run inside the verify venv (stdlib and torch only).

    python -I verify_probe.py SITE_PACKAGES '{"imports": [NAME...], "libraries": [PATH...]}' RESULTS
    python -I verify_probe.py SITE_PACKAGES '{"load": PATH}' RESULTS

The first form imports each name (after torch), as a user of the package would, and says which of the
wheel's shared libraries (paths relative to SITE_PACKAGES) those imports loaded: the package's own
choice among alternatives (a `_x_cpu.so` and a `_x_cuda.so` registering the same operators, only the one
that fits loaded). The second loads one library the imports did not, after torch, in a process of its
own: two alternatives loaded into one process abort it, which says nothing about the wheel.
Each result is appended to RESULTS as one JSON line as soon as it is known (`{"started": CHECK}` before a
check that may abort the process), so a process that dies names the check it died in; stdout is the
package's own. The torch it ran with, the torch.ops namespaces registered, and whether a CUDA device is
there to run kernels on come last.
Run with -I: this file's directory must not shadow what the wheel installs.
"""

import ctypes
import importlib
import json
import os
import sys
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # string annotations, never evaluated: any Python the verify venv has
    from types import ModuleType
    from typing import Any, Callable

    Say = Callable[[dict[str, object]], None]  # one result to RESULTS


def namespaces() -> "set[str]":
    import torch

    return {name.split("::")[0] for name in torch._C._dispatch_get_all_op_names()}


def gpu(torch: "ModuleType") -> str:
    """Whether CUDA kernels can run here: a CPU torch, a CUDA torch without a device, or the device."""
    if torch.version.cuda is None:
        return "none: a CPU torch"
    if not torch.cuda.is_available():
        return f"none: no CUDA device (torch for CUDA {torch.version.cuda})"
    return f"ok ({torch.cuda.get_device_name(0)})"


def mapped() -> "set[str]":
    """The real paths of every file mapped into this process (what the dynamic loader has loaded)."""
    found = set()  # type: set[str]
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                path = parts[5].rstrip("\n")
                found.add(os.path.realpath(path[:-len(" (deleted)")] if path.endswith(" (deleted)") else path))
    return found


def failed(e: BaseException) -> str:
    return "FAILED: " + traceback.format_exception_only(type(e), e)[-1].strip()


def imports(site: str, names: "list[str]", libraries: "list[str]", say: "Say") -> None:
    for name in names:
        say({"started": f"import {name}"})
        try:
            importlib.import_module(name)
            say({f"import {name}": "ok"})
        except BaseException as e:  # noqa: BLE001  (reported, not raised)
            say({f"import {name}": failed(e)})
    loaded = mapped()
    say({"loaded": [rel for rel in libraries if os.path.realpath(os.path.join(site, rel)) in loaded]})


def load(site: str, rel: str, say: "Say") -> None:
    say({"started": f"load {rel}"})
    try:
        ctypes.CDLL(os.path.join(site, rel))
        say({f"load {rel}": "ok"})
    except OSError as e:
        say({f"load {rel}": f"FAILED: {e}"})


def main(site: str, probe: "dict[str, Any]", results: str) -> None:
    with open(results, "a", encoding="utf-8") as out:
        def say(result: "dict[str, object]") -> None:
            out.write(json.dumps(result) + "\n")
            out.flush()

        import torch  # first, as a user of the extension would

        before = namespaces()
        if "load" in probe:
            load(site, probe["load"], say)
        else:
            imports(site, probe["imports"], probe["libraries"], say)
        say({"torch": torch.__version__, "torch_ops": sorted(namespaces() - before), "gpu": gpu(torch)})


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3])
