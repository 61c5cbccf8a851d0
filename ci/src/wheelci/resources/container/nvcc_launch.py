"""sccache in front of nvcc, the dependency file made beside the compile: `python nvcc_launch.py SCCACHE NVCC ARGS...`.

Why: given a compile with a dependency file (CMake's `-MD -MT obj -MF obj.d`, cpp_extension's
`--generate-dependencies-with-compile --dependency-output obj.d`), sccache first runs `nvcc -M`, which runs
the C preprocessor once per architecture, one after another, before it even looks the compile up, and then
preprocesses for each architecture again to find the device steps' entries. On a hit that first pass is most
of the compile's time (the example's CUDA file: 10 of 18 s). Here sccache gets the compile without the
dependency flags, and `nvcc -M` writes the same file meanwhile (its preprocesses are fewer than the
compile's, so it ends first: no --threads, which would start one per architecture beside every other job).
A dependency run that fails costs nothing but time: the compile then runs as given, uncached.

Runs on any Python 3.8 and imports only the standard library: a container build's launcher runs it too
(sccache_server.py writes that launcher).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import NamedTuple, NoReturn

MODES = {"-MD": "-M", "--generate-dependencies-with-compile": "-M",
         "-MMD": "-MM", "--generate-nonsystem-dependencies-with-compile": "-MM"}
VALUED = {"-MF": "file", "--dependency-output": "file", "-MT": "target", "--dependency-target-name": "target",
          "-o": "output", "--output-file": "output"}
FLAGS = {"-MP": "phony", "--generate-dependency-targets": "phony", "-c": "compile", "--compile": "compile"}
# nvcc options that make a call something other than one compile this split keeps whole, or make two runs
# write the same files (the intermediate files in the working directory, the timing file)
OTHER = {"-M", "-MM", "-E", "--preprocess", "--generate-dependencies", "--generate-nonsystem-dependencies",
         "-dryrun", "--dryrun", "-optf", "--options-file", "-keep", "--keep", "-keep-dir", "--keep-dir",
         "-save-temps", "--save-temps", "-time", "--time"}
# options whose next word is another tool's flags (-Xcompiler -MD is the host compiler's): kept as they are
PASSED_ON = {"-Xcompiler", "--compiler-options", "-Xlinker", "--linker-options", "-Xptxas", "--ptxas-options",
             "-Xnvlink", "--nvlink-options", "-Xarchive", "--archive-options", "-Xcudafe", "-Xfatbin",
             "--fatbin-options"}


class Split(NamedTuple):
    compile: list[str]  # the compile's arguments without the dependency flags
    deps: list[str]  # the arguments of the `nvcc -M` run that writes the same dependency file
    output: str  # the object


def split(args: list[str]) -> Split | None:
    """The call as a compile and a dependency run, or None where it is not one compile with a named
    dependency file (pure)."""
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
    return Split(compile_args, deps, found["output"])


class Interrupted(BaseException):
    """A signal this process was sent: the children ended, then the signal taken as its default says."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number


def _interrupted(number: int, _frame: object) -> None:
    raise Interrupted(number)


def _exit_code(code: int) -> int:
    return 128 - code if code < 0 else code  # a child killed by a signal: as a shell says it


def _stop(deps: subprocess.Popen[bytes] | None) -> None:
    """The dependency run and the preprocessors it started (its own process group) gone: asked as Ctrl-C asks
    (nvcc then removes its temporary files), then killed."""
    if deps is None or deps.poll() is not None:
        return
    for sig, wait in ((signal.SIGINT, 2.0), (signal.SIGKILL, None)):
        try:
            os.killpg(deps.pid, sig)
        except OSError:
            pass
        try:
            deps.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            pass


def _run(cache: str, nvcc: str, args: list[str]) -> int:
    """Runs the call; returns its exit status, or replaces this process with the one that finishes it."""
    parts = split(args)
    if parts is None:
        _exec(cache, nvcc, *args)
    deps = None
    try:
        quiet = subprocess.DEVNULL  # its errors, if any, are the compile's own, shown by the compile
        deps = subprocess.Popen([nvcc, *parts.deps], stdin=quiet, stdout=quiet, stderr=quiet, start_new_session=True)
        code = subprocess.call([cache, nvcc, *parts.compile])  # on an exception: its child killed, then raised
        if code != 0:
            return _exit_code(code)
        deps_code = deps.wait()
    finally:
        _stop(deps)  # failed or interrupted: the file is not needed (ended: nothing to do)
    if deps_code != 0:  # the compile as it was given, uncached: its own object, dependency file and errors
        print(f"nvcc_launch: nvcc -M failed; compiling {parts.output} again, uncached", file=sys.stderr, flush=True)
        try:
            os.unlink(parts.output)  # a failing nvcc leaves no object: neither does this
        except OSError:
            pass
        _exec(nvcc, *args)
    return 0


def _exec(program: str, *args: str) -> NoReturn:
    try:
        os.execv(program, [program, *args])
    except OSError as e:
        print(f"nvcc_launch: cannot run {program}: {e.strerror}", file=sys.stderr)
        sys.exit(127)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: nvcc_launch.py SCCACHE NVCC [ARGS...]", file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):  # the children end with this process
        if signal.getsignal(sig) is not signal.SIG_IGN:  # one ignored (nohup) stays ignored
            signal.signal(sig, _interrupted)
    try:
        return _run(argv[0], argv[1], argv[2:])
    except Interrupted as e:
        signal.signal(e.number, signal.SIG_DFL)
        os.kill(os.getpid(), e.number)
        return 128 + e.number


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
