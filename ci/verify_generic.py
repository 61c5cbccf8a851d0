"""Generic checks for any extension wheel, run inside the verify venv (stdlib and torch only).

    python verify_generic.py SITE_PACKAGES PACKAGE...

Prints one JSON line: each top-level package imported (after torch), each of the wheel's shared
libraries loaded, the torch it ran with, and the torch.ops namespaces that importing the packages registered.
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


def main(site, packages):
    import torch  # first, as a user of the extension would

    checks, before = {"torch": torch.__version__}, namespaces()
    for pkg in packages:
        try:
            importlib.import_module(pkg)
            checks[f"import {pkg}"] = "ok"
        except BaseException as e:  # noqa: BLE001  (reported, not raised)
            last = traceback.format_exception_only(type(e), e)[-1].strip()
            checks[f"import {pkg}"] = f"FAILED: {last}"
    for pkg in packages:
        root = os.path.join(site, pkg)
        for dirpath, _, files in os.walk(root):
            for f in sorted(files):
                if ".so" in f and not f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    try:
                        ctypes.CDLL(path)
                        result = "ok"
                    except OSError as e:
                        result = f"FAILED: {e}"
                    checks[f"load {os.path.relpath(path, site)}"] = result
    checks["torch_ops"] = sorted(namespaces() - before)
    print(json.dumps(checks))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
