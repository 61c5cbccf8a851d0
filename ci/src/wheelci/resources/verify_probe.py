"""Generic checks for any extension wheel, run inside the verify venv (stdlib and torch only).

    python -I verify_probe.py SITE_PACKAGES '{"imports": [NAME...], "libraries": [PATH...]}'

Prints one JSON line: each name imported (after torch), each shared library loaded (paths relative to
SITE_PACKAGES), the torch it ran with, and the torch.ops namespaces that importing them registered.
Run with -I: this file's directory must not shadow what the wheel installs.

The same file is the verify venv's pytest plugin (ci.verifyenv.add_probe_plugin): the checks then run
once in the tests' own process, as collection starts (inside pytest's warning filters, as a test
module's imports would be), and write that JSON to the request's `out`. It writes nothing, and
ci.verify runs the script in a venv of its own, unless it finds what the script would:
- none of the wheel's modules imported before it (by a conftest);
- the venv's site-packages the first place on sys.path holding each of them (not a source tree where
  the test command runs);
- every module the imports pulled in from the venv, the torch install or the standard library (not
  from the test requirements or a PYTHONPATH: the wheel must import with what it declares);
- the library search path verify itself runs with (not one the test command set).
"""

import ctypes
import importlib
import json
import os
import sys
import sysconfig
import traceback

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


def _inside(path, roots):
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r + os.sep) for r in roots)


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


def _foreign(names, roots):
    """Of these modules, those loaded from a file outside the roots (`__mp_main__`, multiprocessing's
    name for the main script, is pytest's own; torch.ops and the like are objects named `_ops.py`)."""
    found = []
    for name in names:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None) if isinstance(module, type(sys)) else None
        if name not in ("__main__", "__mp_main__") and isinstance(file, str) and os.path.isabs(file) \
                and not _inside(file, roots):
            found.append(name)
    return found


class _Imports:
    """Every module an import statement asked for while it is on, loaded before or not (pytest has
    its own dependencies loaded already: the wheel's `import iniconfig` finds it in sys.modules)."""

    def __enter__(self):
        import builtins

        self.names, self.real = set(), builtins.__import__

        def recording(name, globals=None, locals=None, fromlist=(), level=0):
            module = self.real(name, globals, locals, fromlist, level)
            if level == 0:
                self.names.add(name)
            return module

        builtins.__import__ = recording
        return self

    def __exit__(self, *exc):
        import builtins

        builtins.__import__ = self.real


def _tryfirst(hook):
    """Before pytest's own collection (inside its warning filters, which wrap every implementation)."""
    try:
        import pytest
    except ImportError:  # run as a script, in a venv without pytest
        return hook
    return pytest.hookimpl(tryfirst=True)(hook)


@_tryfirst
def pytest_collection(session):
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), REQUEST)) as f:
            request = json.load(f)
    except (OSError, ValueError):
        return None
    out, site, names = request["out"], request["site"], request["imports"]
    if (os.path.exists(out) or any(os.environ.get(v) != want for v, want in request["environ"].items())
            or any(n in sys.modules or _shadowed(n, site) for n in names)):
        return None
    paths = sysconfig.get_paths()
    roots = [os.path.realpath(p) for p in (site, request["torch_site"], paths["stdlib"], paths["platstdlib"])]
    before = set(sys.modules)
    with _Imports() as asked:
        checks = probe(site, request)
    if _foreign((set(sys.modules) - before) | asked.names, roots):
        return None
    part = f"{out}.{os.getpid()}.part"
    with open(part, "w") as f:
        f.write(json.dumps(checks))
    os.replace(part, out)
    return None  # collection goes on as usual


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1], json.loads(sys.argv[2]))))
