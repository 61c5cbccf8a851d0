"""Ask a setuptools project how it builds: `python probe_setup.py OUT.json PROJECT_DIR` runs PROJECT_DIR's
setup.py as `setup.py bdist_wheel` would run it, with setup() answering instead of building, and writes
what the script did to OUT.json.

Why: what a setup.py builds is decided while it runs (a CUDA extension only under a CUDA torch, or when a
variable is set, or a GPU is visible; a prebuilt wheel downloaded instead; targets from a variable of its
own), which no reading of its text sees. The build runs this same script a moment later, in the same
environment, so asking it adds no trust. Recorded, from the project's own code only (frames under
PROJECT_DIR): every environment variable it reads and the value it found, every torch.cuda question and
its answer, every import that failed, every download it tried (refused: the probe never reaches the
network); then what setup() was given: the extensions (name, sources, flags), setup_requires, the
requirements; or the exception the script stopped with.

Imports only the standard library (torch and setuptools where the script imports them) and runs on any
Python 3.8: the build environment's interpreter runs it.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import runpy
import sys
import traceback
from types import FrameType
from typing import Any, Dict, List, Optional

answers: Dict[str, Any] = {"env": {}, "cuda": [], "failed_imports": [], "downloads": [], "setup": None,
                           "error": None}
_OWN = ("os.py", "_collections_abc.py")


def _project_frame(root: str, depth: int = 2) -> bool:
    """Whether the caller's nearest frame outside the os module is the project's own code."""
    frame: Optional[FrameType] = sys._getframe(depth)
    while frame is not None and (os.path.basename(frame.f_code.co_filename) in _OWN
                                 or frame.f_code.co_filename.startswith("<")):  # importlib's own frames
        frame = frame.f_back
    name = frame.f_code.co_filename if frame is not None else ""
    return os.path.isabs(name) and os.path.realpath(name).startswith(root + os.sep)


def _watch_environ(root: str) -> None:
    base = type(os.environ)

    def seen(key: object) -> None:
        """A read the project names: the key a constant of its own code, in the frame that asks or in one of
        the few that called it (a helper such as deepspeed's get_env_if_set(name)); never a copy or an
        iteration of the whole environment (dict(os.environ), .copy(), .items(): every key, named by none)."""
        if not isinstance(key, str) or key in answers["env"]:
            return
        frame: Optional[FrameType] = sys._getframe(2)  # the frame that called Recording's method
        for _ in range(6):
            if frame is None:
                return
            name = frame.f_code.co_filename
            if (os.path.isabs(name) and os.path.realpath(name).startswith(root + os.sep)
                    and key in frame.f_code.co_consts):
                answers["env"][key] = base.get(os.environ, key)
                return
            frame = frame.f_back

    class Recording(base):  # type: ignore[misc, valid-type]
        def __getitem__(self, key: str) -> str:
            seen(key)
            return base.__getitem__(self, key)

        def get(self, key: str, default: Any = None) -> Any:
            seen(key)
            return base.get(self, key, default)

        def __contains__(self, key: object) -> bool:
            seen(key)
            return base.__contains__(self, key)

    os.environ.__class__ = Recording


def _watch_imports(root: str) -> None:
    real = builtins.__import__

    def importing(name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            module = real(name, *args, **kwargs)
        except ImportError:
            if _project_frame(root) and name not in answers["failed_imports"]:
                answers["failed_imports"].append(name)
            raise
        if name == "torch" or name.startswith("torch."):
            _watch_torch()
        return module

    builtins.__import__ = importing


_torch_watched = False


def _watch_torch() -> None:
    global _torch_watched
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if _torch_watched or cuda is None:
        return
    _torch_watched = True
    for name in ("is_available", "device_count", "get_device_capability", "get_device_properties",
                 "get_arch_list", "current_device"):
        real = getattr(cuda, name, None)
        if real is not None:
            setattr(cuda, name, _asked(name, real))


def _asked(name: str, real: Any) -> Any:
    def answer(*args: Any, **kwargs: Any) -> Any:
        try:
            got = real(*args, **kwargs)
        except Exception as e:  # no GPU: what the project is told
            answers["cuda"].append({"asked": name, "answer": f"{type(e).__name__}: {e}"[:200]})
            raise
        answers["cuda"].append({"asked": name, "answer": repr(got)[:200]})
        return got

    return answer


def _watch_downloads() -> None:
    import urllib.error
    import urllib.request

    def refused(url: Any, *args: Any, **kwargs: Any) -> Any:
        answers["downloads"].append(str(getattr(url, "full_url", url))[:500])
        raise urllib.error.URLError("the build's probe reaches no network")

    setattr(urllib.request, "urlopen", refused)
    setattr(urllib.request, "urlretrieve", refused)


def _flags(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): [str(a) for a in v] if isinstance(v, (list, tuple)) else str(v) for k, v in value.items()}
    return [str(a) for a in value] if isinstance(value, (list, tuple)) else []


def _extension(ext: Any) -> Dict[str, Any]:
    sources = [str(s) for s in getattr(ext, "sources", []) or []]
    return {"name": str(getattr(ext, "name", "?")), "kind": type(ext).__name__, "sources": len(sources),
            "cuda_sources": sum(s.endswith(".cu") for s in sources),
            "extra_compile_args": _flags(getattr(ext, "extra_compile_args", None)),
            "define_macros": [list(map(str, m)) for m in getattr(ext, "define_macros", None) or []],
            "libraries": [str(x) for x in getattr(ext, "libraries", None) or []]}


def _requirements(value: Any) -> List[str]:
    """setuptools takes a list or a string (one requirement a line)."""
    if isinstance(value, str):
        return [line.strip() for line in value.splitlines() if line.strip()]
    return [str(r) for r in value or []]


def _setup(**kwargs: Any) -> None:
    """setup() answering: what it was given, and nothing built (called twice: both calls' extensions)."""
    modules = [_extension(e) for e in kwargs.get("ext_modules") or []]
    earlier = answers["setup"]["ext_modules"] if answers["setup"] else []
    answers["setup"] = {
        "name": str(kwargs.get("name", "")),
        "ext_modules": earlier + modules,
        "setup_requires": _requirements(kwargs.get("setup_requires")),
        "install_requires": _requirements(kwargs.get("install_requires")),
        "cmdclass": {str(k): f"{getattr(v, '__module__', '?')}.{getattr(v, '__qualname__', '?')}"
                     for k, v in dict(kwargs.get("cmdclass") or {}).items()},
        "packages": len(kwargs.get("packages") or []) + len(kwargs.get("py_modules") or []),
    }


def main() -> int:
    out, root = sys.argv[1], os.path.realpath(sys.argv[2])
    script = os.path.join(root, "setup.py")
    _watch_environ(root)
    _watch_imports(root)
    _watch_downloads()
    try:  # by name: whichever setuptools (and distutils, its shim's or Python's own) the script imports
        setattr(importlib.import_module("setuptools"), "setup", _setup)
        try:
            setattr(importlib.import_module("distutils.core"), "setup", _setup)
        except ImportError:
            pass
    except ImportError:
        answers["error"] = "ModuleNotFoundError: No module named 'setuptools'"
    if answers["error"] is None:
        sys.argv = [script, "bdist_wheel"]
        sys.path.insert(0, root)
        os.chdir(root)
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                answers["error"] = f"SystemExit: {e.code}"[:300]
        except BaseException as e:  # the project's own failure, as the build would meet it
            answers["error"] = traceback.format_exception_only(type(e), e)[-1].strip()[:300]
    with open(out, "w", encoding="utf-8") as f:
        json.dump(answers, f, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
