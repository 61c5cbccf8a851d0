"""sccache in front of nvcc, the dependency file made beside the compile: `python nvcc_launch.py SCCACHE NVCC ARGS...`.

Why: given a compile with a dependency file (CMake's `-MD -MT obj -MF obj.d`, cpp_extension's
`--generate-dependencies-with-compile --dependency-output obj.d`), sccache first runs `nvcc -M`, which runs
the C preprocessor once per architecture, one after another, before it even looks the compile up, and then
preprocesses for each architecture again to find the device steps' entries. On a hit that first pass is most
of the compile's time (the example's CUDA file: 10 of 18 s). Here sccache gets the compile without the
dependency flags, and `nvcc -M`, with its architectures in parallel (--threads 0), writes the same file
meanwhile. A dependency run that fails costs nothing but time: the compile then runs as given, uncached.

Runs on any Python 3.8 and imports only the standard library: a container build's launcher runs it too
(sccache_server.py writes that launcher).
"""

from __future__ import annotations

import os
import subprocess
import sys

MODES = {"-MD": "-M", "--generate-dependencies-with-compile": "-M",
         "-MMD": "-MM", "--generate-nonsystem-dependencies-with-compile": "-MM"}
VALUED = {"-MF": "file", "--dependency-output": "file", "-MT": "target", "--dependency-target-name": "target",
          "-o": "output", "--output-file": "output"}
FLAGS = {"-MP": "phony", "--generate-dependency-targets": "phony", "-c": "compile", "--compile": "compile"}
# nvcc options that make a call something other than one compile this split keeps whole
OTHER = {"-M", "-MM", "-E", "--preprocess", "--generate-dependencies", "--generate-nonsystem-dependencies",
         "-dryrun", "--dryrun", "-optf", "--options-file"}
THREADS = ("-t", "--threads")
# options whose next word is another tool's flags (-Xcompiler -MD is the host compiler's): kept as they are
PASSED_ON = {"-Xcompiler", "--compiler-options", "-Xlinker", "--linker-options", "-Xptxas", "--ptxas-options",
             "-Xnvlink", "--nvlink-options", "-Xarchive", "--archive-options", "-Xcudafe", "-Xfatbin",
             "--fatbin-options"}


def split(args: list[str]) -> tuple[list[str], list[str]] | None:
    """(the compile's arguments without the dependency flags, the arguments of the `nvcc -M` run writing the
    same file), or None where the call is not one compile with a named dependency file (pure)."""
    compile_args: list[str] = []  # the call without the dependency flags
    deps: list[str] = []  # the call without those, -c and -o FILE
    found: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if name in OTHER:
            return None
        if arg in PASSED_ON and i + 1 < len(args):
            compile_args += args[i:i + 2]
            deps += args[i:i + 2]
            i += 1
        elif arg in MODES:
            found["mode"] = MODES[arg]
        elif arg in FLAGS:
            found[FLAGS[arg]] = arg
            if FLAGS[arg] == "compile":
                compile_args.append(arg)
        elif name in VALUED:
            if not eq:
                if i + 1 >= len(args):
                    return None
                i += 1
                value = args[i]
            if VALUED[name] in found:  # given twice: not ours to choose
                return None
            found[VALUED[name]] = value
            if VALUED[name] == "output":
                compile_args += [name, value]
        else:
            compile_args.append(arg)
            deps.append(arg)
        i += 1
    if not {"mode", "file", "compile", "output"} <= found.keys():
        return None
    deps += [found["mode"], "-MT", found.get("target", found["output"]), "-MF", found["file"]]
    if "phony" in found:
        deps.append("-MP")
    if not any(a.partition("=")[0] in THREADS or (a.startswith("-t") and a[2:].isdigit()) for a in args):
        deps += ["--threads", "0"]  # one preprocess per architecture, at once
    return compile_args, deps


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: nvcc_launch.py SCCACHE NVCC [ARGS...]", file=sys.stderr)
        return 2
    cache, nvcc, args = argv[0], argv[1], argv[2:]
    parts = split(args)
    if parts is None:
        os.execv(cache, [cache, nvcc, *args])
    compile_args, dep_args = parts
    quiet = subprocess.DEVNULL  # its errors, if any, are the compile's own, shown by the compile
    deps = subprocess.Popen([nvcc, *dep_args], stdin=quiet, stdout=quiet, stderr=quiet)
    code = 1
    try:
        code = subprocess.call([cache, nvcc, *compile_args])
    finally:
        if code != 0:  # failed or interrupted: the file is not needed
            deps.kill()
        deps_code = deps.wait()
    if code != 0:
        return code
    if deps_code != 0:  # the compile as it was given, uncached: its own dependency file, its own errors
        return subprocess.call([nvcc, *args])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
