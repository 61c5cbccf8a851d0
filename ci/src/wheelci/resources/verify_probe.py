"""Generic checks for any extension wheel, run inside the verify venv (stdlib and torch only).

    python -I verify_probe.py SITE_PACKAGES '{"imports": [NAME...], "libraries": [PATH...]}'

Prints one JSON line: each name imported (after torch), each shared library loaded (paths relative to
SITE_PACKAGES), the torch it ran with, and the torch.ops namespaces that importing them registered.
Run with -I: this file's directory must not shadow what the wheel installs.

The same file is the verify venv's pytest plugin (ci.verifyenv.add_probe_plugin): the checks then run
once in the tests' own process, at the session's start, and write that JSON to the request's `out`.
It runs only where it finds what the script would: none of the wheel's modules imported before it (by a
conftest), and the venv's site-packages the first place on sys.path holding each of them (not a source
tree where the test command runs). Otherwise it writes nothing, and ci.verify runs the script.
"""

import ctypes
import importlib
import json
import os
import sys
import traceback
import warnings

REQUEST = "_wheelci_verify_probe.json"


def namespaces():
    import torch

    return {name.split("::")[0] for name in torch._C._dispatch_get_all_op_names()}


def probe(site, request):
    import torch  # first, as a user of the extension would

    checks, before = {"torch": torch.__version__}, namespaces()
    for name in request["imports"]:
        try:
            importlib.import_module(name)
            checks[f"import {name}"] = "ok"
        except BaseException as e:  # noqa: BLE001  (reported, not raised)
            last = traceback.format_exception_only(type(e), e)[-1].strip()
            checks[f"import {name}"] = f"FAILED: {last}"
    for rel in request["libraries"]:
        try:
            ctypes.CDLL(os.path.join(site, rel))
            result = "ok"
        except OSError as e:
            result = f"FAILED: {e}"
        checks[f"load {rel}"] = result
    checks["torch_ops"] = sorted(namespaces() - before)
    return checks


def _shadowed(name, site):
    """Something on sys.path ahead of the venv's site-packages holds the name's top-level module or
    package (a source tree in the directory pytest runs in, or one pytest put first for a conftest)."""
    from importlib.machinery import PathFinder

    top, root = name.split(".")[0], os.path.realpath(site)
    for entry in sys.path:
        if os.path.realpath(entry or os.curdir) == root:
            return False
        if PathFinder.find_spec(top, [entry]) is not None:
            return True
    return True  # the venv's site-packages is not on sys.path: not the venv's python


def pytest_sessionstart(session):
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), REQUEST)) as f:
            request = json.load(f)
    except (OSError, ValueError):
        return
    out, site = request["out"], request["site"]
    names = request["imports"]
    if os.path.exists(out) or any(n in sys.modules or _shadowed(n, site) for n in names):
        return
    with warnings.catch_warnings():  # the tests' warning filters (`error`) are not the probe's
        warnings.simplefilter("ignore")
        checks = probe(site, request)
    part = f"{out}.{os.getpid()}.part"
    with open(part, "w") as f:
        f.write(json.dumps(checks))
    os.replace(part, out)


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1], json.loads(sys.argv[2]))))
