"""Answer torch.cuda as a GPU of the build's arch list would, on a builder without one.

Some setup.py files build their CUDA extension only when `torch.cuda.is_available()` (or read the device's
capability to choose its targets) and have no switch to say so. On a GPU-less builder they build the CPU
path, or nothing. The build puts this directory first on PYTHONPATH only for such a project (the probe saw
it ask and compile no CUDA): when torch.cuda is imported, its device questions get the answers of one
device of capability WHEELCI_GPU_ANSWER (`9.0`); nothing runs on it, and the compile itself never needs a
device. Only the questions a build script asks are answered; a kernel launch still fails.

Standard library only, any Python 3.8: the build environment's interpreter runs it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType, SimpleNamespace
from typing import Any, Optional, Sequence

_ANSWER = os.environ.get("WHEELCI_GPU_ANSWER", "")


def _capability() -> "tuple[int, int]":
    major, _, minor = _ANSWER.partition(".")
    return int(major), int(minor or 0)


def _answer(cuda: ModuleType) -> None:
    major, minor = _capability()
    name = f"no GPU here: the build answers as a compute capability {major}.{minor} device would"
    props = SimpleNamespace(name=name, major=major, minor=minor, total_memory=80 << 30, multi_processor_count=132,
                            is_integrated=False, is_multi_gpu_board=False)
    answers = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "get_device_capability": lambda device=None: (major, minor),
        "get_device_name": lambda device=None: name,
        "get_device_properties": lambda device=None: props,
    }
    for key, value in answers.items():
        setattr(cuda, key, value)


class _Loader(importlib.abc.Loader):
    def __init__(self, real: importlib.abc.Loader) -> None:
        self.real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.real.exec_module(module)
        _answer(module)


class _Finder(importlib.abc.MetaPathFinder):
    """torch.cuda found as usual, then answered once it has run."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        if fullname != "torch.cuda":
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = getattr(finder, "find_spec", lambda *a: None)(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


if _ANSWER:
    try:
        _capability()
    except ValueError:
        pass  # not a capability: no answer rather than a wrong one
    else:
        sys.meta_path.insert(0, _Finder())
