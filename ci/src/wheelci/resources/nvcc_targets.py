"""The device targets an nvcc call names, narrowed to the arch list asked for: `python nvcc_targets.py
ARCH_LIST -- COMMAND ARGS...` runs COMMAND with ARGS narrowed.

Why: a project that passes any `arch` flag of its own (`-gencode`, `-arch`, `--generate-code`, or CMake's
CMAKE_CUDA_ARCHITECTURES) makes torch's cpp_extension drop TORCH_CUDA_ARCH_LIST, and CMake's list set in a
CMakeLists.txt wins over any definition, so `--arch-list 9.0` would still compile every target the project
names (nine for causal-conv1d: hours on two cores). Every nvcc call of a host build goes through this first
(in front of any compile cache, which then keys the narrowed call): a call naming device targets gets exactly
the asked ones, as torch writes them (`9.0` is sm_90's cubin, `9.0+PTX` adds compute_90's PTX); a call
naming none (a link, a version query) runs as given. An asked `9.0` where the project names `sm_90a` keeps
the project's arch-specific form: the same GPU, and the kernels may need its instructions.

Imports only the standard library and runs on any Python 3.8: the build environment's interpreter runs it.
"""

from __future__ import annotations

import os
import re
import sys
from typing import List, NamedTuple, Optional, Tuple

# options whose value is a device target, as nvcc spells them (long and short, `=` or the next word)
TARGETS = {"-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code"}
# options whose next word is another tool's flags: never read as nvcc's
PASSED_ON = {"-Xcompiler", "--compiler-options", "-Xlinker", "--linker-options", "-Xptxas", "--ptxas-options",
             "-Xnvlink", "--nvlink-options", "-Xarchive", "--archive-options", "-Xcudafe", "-Xfatbin",
             "--fatbin-options", "-ccbin", "--compiler-bindir"}
_ENTRY = re.compile(r"(\d+)\.(\d+)([af]?)(\+PTX)?")
_NAMED = re.compile(r"(?:sm|compute|lto)_(\d+)([af]?)")


class Asked(NamedTuple):
    number: str  # "90": major and minor, as nvcc names them
    suffix: str  # "", "a" or "f"
    ptx: bool


def parse(arch_list: str) -> List[Asked]:
    """`8.0;9.0+PTX` (torch's spelling; spaces or commas also part entries) -> the entries, in order."""
    out = []
    for entry in (e for e in re.split(r"[;,\s]+", arch_list.strip()) if e):
        m = _ENTRY.fullmatch(entry)
        if m is None:
            raise ValueError(f"not an arch list entry: {entry!r} (want e.g. 9.0 or 9.0+PTX)")
        out.append(Asked(m[1] + m[2], m[3], bool(m[4])))
    return out


def named(value: str) -> List[Tuple[str, str]]:
    """The (number, suffix) pairs a target option's value names: `arch=compute_90a,code=[sm_90a,compute_90a]`."""
    return [(m[1], m[2]) for m in _NAMED.finditer(value)]


def targets_of(args: List[str]) -> Tuple[List[str], List[Tuple[str, str]]]:
    """The call without its device-target options, and the (number, suffix) pairs those named (pure)."""
    kept: List[str] = []
    found: List[Tuple[str, str]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if arg in PASSED_ON and i + 1 < len(args):
            kept += args[i:i + 2]
            i += 2
            continue
        if name in TARGETS:
            if not eq and i + 1 < len(args):
                value = args[i + 1]
                i += 1
            found += named(value) or [(value, "")]  # native, all, all-major: a target all the same
            i += 1
            continue
        kept.append(arg)
        i += 1
    return kept, found


def gencodes(asked: List[Asked], project: List[Tuple[str, str]]) -> List[str]:
    """torch's flags for the asked entries; a plain entry takes the suffix the project gave that number."""
    theirs = {n: s for n, s in reversed(project) if s}
    plain = {n for n, s in project if not s}
    out = []
    for a in asked:
        suffix = a.suffix or ("" if a.number in plain else theirs.get(a.number, ""))
        arch = f"{a.number}{suffix}"
        out.append(f"-gencode=arch=compute_{arch},code=sm_{arch}")
        if a.ptx:
            out.append(f"-gencode=arch=compute_{arch},code=compute_{arch}")
    return out


# calls left as they are: one target's output (a .ptx, a .cubin: nvcc refuses several), and targets this
# cannot see (an options file)
AS_GIVEN = {"-ptx", "--ptx", "-cubin", "--cubin", "-optf", "--options-file"}


def narrow(args: List[str], arch_list: str) -> List[str]:
    """`args` (an nvcc call's, possibly behind launchers) with its device targets replaced by the asked
    ones; a call naming no target, or one of AS_GIVEN, is returned as it is (pure)."""
    if any(a.partition("=")[0] in AS_GIVEN for a in args):
        return list(args)
    kept, found = targets_of(args)
    if not found:
        return list(args)
    return [*kept, *gencodes(parse(arch_list), found)]


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: nvcc_targets.py ARCH_LIST -- COMMAND ARGS...\n")
        return 2
    arch_list, command = argv[0], argv[2:]
    words = narrow(command, arch_list)
    os.execvp(words[0], words)
    return 127  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
