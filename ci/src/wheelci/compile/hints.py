"""What a compile's output says beyond its exit status: why it failed (how far it is: compile.progress).

Pure functions of the text, shared by the host and the container compile: `hint` names the likely
cause of a failure from the whole log, worded for the build it was (a CPU build that reaches for CUDA is a project that does not check for a CUDA torch).
"""

from __future__ import annotations

import re

from wheelci.compile.cmakeprobe import cmake_cuda_options
from wheelci.util.cause import cause

# torch's own refusal of its classic headers in a stable-ABI build (torch/extension.h)
CLASSIC_UNDER_TARGET = "should not be included when either TORCH_STABLE_ONLY or TORCH_TARGET_VERSION"


# the first header a compiler could not open: GCC (and nvcc's host pass), Clang, nvcc's front end
_MISSING_HEADER = re.compile(r"fatal error: (?:'([^'\n]+)' file not found|([^:\s][^:\n]*?): No such file or directory)"
                             r"|catastrophic error: cannot open source file \"([^\"\n]+)\"")
_NO_CUDA_HOME = "CUDA_HOME environment variable is not set"
_NO_NVCC = re.compile(r"\bnvcc: (?:command )?not found|No such file or directory: '[^'\n]*nvcc'"
                      r"|\bnvcc\S*: No such file or directory")
_NO_CUDA_RUNTIME = "No CUDA runtime is found"
_COMPILER_ERROR = re.compile(r":\d+(?::\d+)?: (?:fatal )?error:|\berror: \S|\(\d+\): error:")
# lines that say a tool failed, not why: the linker's driver, setuptools' summary of the compiler's exit
_SIGN_OFF = re.compile(r"collect2: error: ld returned|error: command '[^'\n]*' failed with exit code")
# headers of the CUDA toolkit, its libraries and NVIDIA's header-only ones
_CUDA_HEADER = re.compile(r"(?:^|/)(?:cuda|cublas|cufft|curand|cusparse|cusolver|cudnn|cupti|nccl|nvrtc|nvToolsExt"
                          r"|nvml)\w*\.h$|^(?:thrust|cub|nvtx3|cuda)/")
NO_CUDA_TORCH = "add the CUDA extension only under a CUDA torch (torch.version.cuda), or build with --cuda X.Y"
# the build frontend's check of what the backend asked for (`build --no-isolation`): new and old wording
_UNMET = re.compile(r"^ERROR (?:Unmet|Missing) dependencies[^\n]*:\n((?:\t.*\n?)+)", re.MULTILINE)
# CMake's own error, its message on the indented lines below it
_CMAKE_ERROR = re.compile(r"^CMake Error at ([^\n]*):[ \t]*\n((?:\n?  +\S[^\n]*\n?)+)|^CMake Error: ([^\n]+)", re.MULTILINE)
# what a CUDA-or-GPU failure names: only then is "torch sees no GPU" its cause
_GPU_WORDS = re.compile(r"cuda|gpu|device|nvidia|is_available", re.IGNORECASE)


def missing_header(log: str) -> str | None:
    """The first header the compiler could not open (`foo.h`, `cutlass/gemm.h`)."""
    m = _MISSING_HEADER.search(log)
    return next(g for g in m.groups() if g) if m else None


def hint(log: str, *, cuda: str | None, stable: bool = False) -> str | None:
    """The likely cause of a failed compile, from its log; None when the log shows none we know.

    `cuda` is the build's CUDA version (None: a CPU build) and `stable` whether it targets the stable ABI:
    the same line means a different fix in each. Causes are tried from the most to the least specific:
    torch's stable-ABI refusal, a missing header, no CUDA toolkit, and last torch's note that it sees no
    GPU, which every CUDA build on a GPU-less machine logs: it is named only where no compiler error is."""
    if unmet := unmet_dependencies(log):  # the frontend's check runs first: nothing else ran
        return (f"the build frontend found the build environment without {', '.join(unmet)}, which the project "
                "asks for to build (its setup_requires or build backend); give them with --build-requires")
    if stable and CLASSIC_UNDER_TARGET in log:
        return ("the project includes classic LibTorch headers (torch/extension.h), which torch refuses under "
                "TORCH_TARGET_VERSION: port it to torch/csrc/stable, or build without --stable-abi")
    if header := missing_header(log):
        return f"the compiler found no {header}: {_header_fix(header, cuda)}"
    if _NO_CUDA_HOME in log:
        if cuda is None:
            return (f"the project builds a CUDA extension in a CPU build (torch's cpp_extension: \"{_NO_CUDA_HOME}\", "
                    f"as it always is under a CPU torch): {NO_CUDA_TORCH}")
        return (f"torch's cpp_extension found no CUDA toolkit (\"{_NO_CUDA_HOME}\"), which it looks for only under "
                f"a CUDA torch: a build requirement may have put a CPU torch in the build environment")
    if _NO_NVCC.search(log):
        if cuda is None:
            return f"the project runs nvcc in a CPU build, which has none: {NO_CUDA_TORCH}"
        return "nvcc is not where the build looks for it: it runs nvcc from PATH or $CUDA_HOME/bin"
    if cmake := cmake_error(log):
        return f"CMake's first error: {cmake}"
    if _NO_CUDA_RUNTIME in log and not _COMPILER_ERROR.search(log) and _GPU_WORDS.search(cause(log)):
        return ("torch sees no GPU on this machine (\"No CUDA runtime is found\"): a build that asks "
                "torch.cuda.is_available() gets False on a GPU-less builder; it should ask torch.version.cuda, "
                "or read a switch such as FORCE_CUDA=1 (--env FORCE_CUDA=1)")
    if error := first_compiler_error(log):  # the build tool's traceback comes last: the cause is above it
        return f"the compiler's first error: {error}"
    return None


def why_failed(log: str, *, cuda: str | None, stable: bool = False) -> str | None:
    """What a failed compile is shown by: hint's likely cause, else the first meaningful line of its log
    (wheelci.util.cause: a setup.py's own exception, a linker's error), never the build tool's sign-off."""
    if found := hint(log, cuda=cuda, stable=stable):
        return found
    line = cause(log)
    return f"the build's first error: {line}" if line else None


def unmet_dependencies(log: str) -> list[str]:
    """The requirements the build frontend found missing (`psutil`, `pybind11>=2.6`), in its order."""
    m = _UNMET.search(log)
    if m is None:
        return []
    names = [ln.strip() for ln in m[1].splitlines() if ln.startswith("\t") and not ln.startswith("\t\t")]
    return list(dict.fromkeys(n for n in names if n and not n.startswith(("wanted:", "found:"))))


def cmake_error(log: str, limit: int = 300) -> str | None:
    """CMake's first error, its place and message as one line (`CMakeLists.txt:12 (message): no CUDA`)."""
    m = _CMAKE_ERROR.search(log)
    if m is None:
        return None
    line = m[3] or f"{m[1]}: " + " ".join(ln.strip() for ln in m[2].splitlines() if ln.strip())
    return line if len(line) <= limit else line[:limit] + "..."


def first_compiler_error(log: str, limit: int = 300) -> str | None:
    """The first line a compiler marks as an error (`tiny.cpp:11:17: error: stray '@'`), cut to `limit`; a
    sign-off that only says a tool failed is not one (a linker's own error comes from wheelci.util.cause)."""
    for line in log.splitlines():
        if _COMPILER_ERROR.search(line) and not _SIGN_OFF.search(line):
            line = line.strip()
            return line if len(line) <= limit else line[:limit] + "..."
    return None


def _header_fix(header: str, cuda: str | None) -> str:
    if header == "Python.h":
        return "Python's development headers are not installed (python3-dev, python3-devel)"
    if _CUDA_HEADER.search(header):
        if cuda is None:
            return f"a CUDA header in a CPU build: {NO_CUDA_TORCH}"
        return "a CUDA header: it comes with the CUDA toolkit or one of NVIDIA's nvidia-* wheels"
    return ("install what provides it, or add its directory to the include path (the project's include_dirs, "
            "or --env CFLAGS=-I...); a git submodule that is not checked out leaves its headers missing too")


def no_device_code(wheel: str, cuda: str, cmake: bool, cache: str | None) -> str:
    """Why a --cuda wheel with no device code got none, worded for its build system: a CMake project's own
    options (from the CMakeCache.txt its configure left, where there is one), else setup.py's switches."""
    head = f"{wheel} holds no device code (no library with a .nv_fatbin section): the --cuda {cuda} build compiled the CPU path only"
    tail = "; pass --allow-no-device-code if the kernels are compiled at run time"
    if not cmake:
        return (f"{head}. Projects that build CUDA kernels only when torch.cuda.is_available() need their own switch "
                f"on a GPU-less builder, e.g. --env FORCE_CUDA=1{tail}")
    options = cmake_cuda_options(cache) if cache is not None else []
    if options:
        return (f"{head}. A CMake project: its options that may turn CUDA on: {'; '.join(options)}; set one with "
                f"--env CMAKE_ARGS=-DNAME=VALUE{tail}")
    return (f"{head}. A CMake project: its configure enabled no CUDA code; give the option of its own that does with "
            f"--env CMAKE_ARGS=-DNAME=VALUE (its CMakeLists.txt names it){tail}")
