"""Generic checks for any extension wheel, run inside the verify venv (stdlib and torch only).

    python -I verify_probe.py SITE_PACKAGES '{"imports": [NAME...], "libraries": [PATH...]}'

Prints one JSON line: each name imported (after torch), each shared library loaded (paths relative to
SITE_PACKAGES), the torch it ran with, the torch.ops namespaces that importing them registered, and
whether a CUDA device is there to run kernels on.
Run with -I: this file's directory must not shadow what the wheel installs.
"""

import ctypes
import importlib
import json
import os
import sys
import traceback


def namespaces():
    import torch

    return {name.split("::")[0] for name in torch._C._dispatch_get_all_op_names()}


def gpu(torch):
    """Whether CUDA kernels can run here: a CPU torch, a CUDA torch without a device, or the device."""
    if torch.version.cuda is None:
        return "none: a CPU torch"
    if not torch.cuda.is_available():
        return f"none: no CUDA device (torch for CUDA {torch.version.cuda})"
    return f"ok ({torch.cuda.get_device_name(0)})"


def main(site, probe):
    import torch  # first, as a user of the extension would

    checks, before = {"torch": torch.__version__}, namespaces()
    for name in probe["imports"]:
        try:
            importlib.import_module(name)
            checks[f"import {name}"] = "ok"
        except BaseException as e:  # noqa: BLE001  (reported, not raised)
            last = traceback.format_exception_only(type(e), e)[-1].strip()
            checks[f"import {name}"] = f"FAILED: {last}"
    for rel in probe["libraries"]:
        try:
            ctypes.CDLL(os.path.join(site, rel))
            result = "ok"
        except OSError as e:
            result = f"FAILED: {e}"
        checks[f"load {rel}"] = result
    checks["torch_ops"] = sorted(namespaces() - before)
    checks["gpu"] = gpu(torch)
    print(json.dumps(checks))


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
