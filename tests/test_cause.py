"""wheelci.util.cause: the one line a failure is shown by, over outputs as the tools print them."""

from __future__ import annotations

import pytest

from wheelci.util.cause import LIMIT, cause

# an import that loads two libraries registering the same operators (torch 2.x's wording), as a process
# that died of it prints it: the C++ exception escapes a static initializer, std::terminate reports it
DUPLICATE_REGISTRATION = """\
terminate called after throwing an instance of 'c10::Error'
  what():  Tried to register an operator (pair_ext::twice(Tensor x) -> Tensor) with the same name and overload name multiple times. Each overload's schema should only be registered with a single call to def(). Duplicate registration: registered at /tmp/b.cpp:10. Original registration: registered at /tmp/a.cpp:10
Exception raised from registerDef at /pytorch/aten/src/ATen/core/dispatch/Dispatcher.cpp:240 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x52 (0x7f1c5f8b9e72 in /venv/torch/lib/libc10.so)
frame #1: c10::detail::torchCheckFail(char const*, char const*, unsigned int, std::string const&) + 0x68 (0x7f1c5f85a5c4 in /venv/torch/lib/libc10.so)
frame #2: c10::Dispatcher::registerDef(c10::FunctionSchema, std::string, std::vector<at::Tag>) + 0x6f1 (0x7f1c4a2b1e31 in /venv/torch/lib/libtorch_cpu.so)
frame #36: __libc_start_main + 0x85 (0x7f1c60a2ad85 in /lib64/libc.so.6)
frame #37: _start + 0x21 (0x55d0b2a3c0a1 in /venv/bin/python)
"""

# a test command's last stdout line, then torch's import warning that stderr delivered after it
WARNED_LAST = """\
tiny says no
/venv/torch/_subclasses/functional_tensor.py:368: UserWarning: Failed to initialize NumPy: No module named 'numpy'
  cpu = _conversion_method_template(device=torch.device("cpu"))
"""

PYTHON_TRACEBACK = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pair_ext/__init__.py", line 5, in <module>
    torch.ops.load_library(_library)
  File "/venv/lib/python3.11/site-packages/torch/_ops.py", line 1350, in load_library
    ctypes.CDLL(path)
  File "/usr/lib/python3.11/ctypes/__init__.py", line 376, in __init__
    self._handle = _dlopen(self._name, mode)
                   ^^^^^^^^^^^^^^^^^^^^^^^^^
OSError: libmissing_dep.so: cannot open shared object file: No such file or directory
"""

# the exception's message spans lines (torch's RuntimeError from a c10::Error): its first line is shown
TORCH_RUNTIME_ERROR = """\
Traceback (most recent call last):
  File "<string>", line 1, in <module>
  File "/venv/lib/python3.11/site-packages/torch/_ops.py", line 1255, in __call__
    return self._op(*args, **(kwargs or {}))
RuntimeError: Could not run 'pair_ext::twice' with arguments from the 'CUDA' backend.
'pair_ext::twice' is only available for these backends: [CPU, Meta].

CPU: registered at /tmp/a.cpp:14 [kernel]
Exception raised from reportError at /pytorch/aten/src/ATen/core/dispatch/OperatorEntry.cpp:611 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x52 (0x7f in libc10.so)
"""

# a chained traceback: the exception finally raised is the one shown
CHAINED = """\
Traceback (most recent call last):
  File "a.py", line 2, in <module>
    import yaml
ModuleNotFoundError: No module named 'yaml'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "a.py", line 4, in <module>
    raise ImportError("pair_ext needs PyYAML: pip install pyyaml")
ImportError: pair_ext needs PyYAML: pip install pyyaml
"""

PYTEST = """\
============================= test session starts ==============================
platform linux -- Python 3.11.2, pytest-9.2.0, pluggy-1.6.0
collected 3 items

tests/test_pair.py .F.                                                   [100%]

=================================== FAILURES ===================================
_________________________________ test_twice __________________________________

    def test_twice():
>       assert torch.equal(pair_ext.twice(x), x * 3)
E       AssertionError: assert False
E        +  where False = <built-in method equal>(tensor([2.]), tensor([3.]))

tests/test_pair.py:9: AssertionError
=========================== short test summary info ============================
FAILED tests/test_pair.py::test_twice - AssertionError: assert False
========================= 1 failed, 2 passed in 1.52s ==========================
"""

PYTEST_COLLECTION = """\
==================================== ERRORS ====================================
____________________ ERROR collecting tests/test_pair.py _____________________
ImportError while importing test module '/p/tests/test_pair.py'.
E   ModuleNotFoundError: No module named 'scipy'
=========================== short test summary info ============================
ERROR tests/test_pair.py
!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!
=============================== 1 error in 0.31s ===============================
"""

# torch's cpp_extension under ninja: the compiler's error, then ninja's and setuptools' sign-offs
NINJA_GCC = """\
[1/2] c++ -MMD -MF /b/build/temp/csrc/a.o.d -I/venv/torch/include -c /p/csrc/a.cpp -o /b/build/temp/csrc/a.o
FAILED: /b/build/temp/csrc/a.o
c++ -MMD -MF /b/build/temp/csrc/a.o.d -I/venv/torch/include -c /p/csrc/a.cpp -o /b/build/temp/csrc/a.o
/p/csrc/a.cpp: In function 'at::Tensor twice(const at::Tensor&)':
/p/csrc/a.cpp:11:17: error: 'y' was not declared in this scope
   11 |   return x * 2 + y;
      |                 ^
/p/csrc/a.cpp:12:3: error: expected ';' before '}' token
ninja: build stopped: subcommand failed.
Traceback (most recent call last):
  File "/venv/torch/utils/cpp_extension.py", line 2595, in _run_ninja_build
    subprocess.run(
subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "<string>", line 1, in <module>
RuntimeError: Error compiling objects for extension
"""

NVCC = """\
[2/3] /usr/local/cuda/bin/nvcc -I/venv/torch/include -c /p/csrc/a_cuda.cu -o /b/a_cuda.o -gencode=arch=compute_90,code=sm_90
FAILED: /b/a_cuda.o
/p/csrc/a_cuda.cu(14): error: identifier "blockIdy" is undefined
      int i = blockIdy.x;
              ^

1 error detected in the compilation of "/p/csrc/a_cuda.cu".
ninja: build stopped: subcommand failed.
"""

NVCC_FATAL = """\
nvcc fatal   : Unsupported gpu architecture 'compute_35'
ninja: build stopped: subcommand failed.
"""

LINKER = """\
g++ -shared /b/a.o -L/venv/torch/lib -lc10 -ltorch -o /b/pair_ext/_cpu.so
/usr/bin/ld: /b/a.o: in function `twice(at::Tensor const&)':
a.cpp:(.text+0x2a): undefined reference to `helper(at::Tensor const&)'
collect2: error: ld returned 1 exit status
error: command '/usr/bin/g++' failed with exit code 1
"""

CMAKE_MAKE = """\
[ 50%] Building CXX object CMakeFiles/_C.dir/csrc/op.cpp.o
/p/csrc/op.cpp:3:10: fatal error: cutlass/gemm.h: No such file or directory
    3 | #include <cutlass/gemm.h>
compilation terminated.
gmake[2]: *** [CMakeFiles/_C.dir/build.make:76: CMakeFiles/_C.dir/csrc/op.cpp.o] Error 1
gmake[1]: *** [CMakeFiles/Makefile2:83: CMakeFiles/_C.dir/all] Error 2
"""

PIP = """\
  error: subprocess-exited-with-error

  × Getting requirements to build wheel did not run successfully.
  │ exit code: 1
  ╰─> [3 lines of output]
      Traceback (most recent call last):
      ModuleNotFoundError: No module named 'torch'
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
"""

KILLED = "compiling 3 of 9 files\nKilled\n"


@pytest.mark.parametrize("output, expected", [
    (DUPLICATE_REGISTRATION, "Tried to register an operator (pair_ext::twice(Tensor x) -> Tensor) with the same name"),
    (PYTHON_TRACEBACK, "OSError: libmissing_dep.so: cannot open shared object file: No such file or directory"),
    (TORCH_RUNTIME_ERROR, "RuntimeError: Could not run 'pair_ext::twice' with arguments from the 'CUDA' backend."),
    (CHAINED, "ImportError: pair_ext needs PyYAML: pip install pyyaml"),
    (PYTEST, "FAILED tests/test_pair.py::test_twice - AssertionError: assert False"),
    (PYTEST_COLLECTION, "ERROR tests/test_pair.py"),
    (NINJA_GCC, "/p/csrc/a.cpp:11:17: error: 'y' was not declared in this scope"),
    (NVCC, '/p/csrc/a_cuda.cu(14): error: identifier "blockIdy" is undefined'),
    (NVCC_FATAL, "nvcc fatal   : Unsupported gpu architecture 'compute_35'"),
    (LINKER, "a.cpp:(.text+0x2a): undefined reference to `helper(at::Tensor const&)'"),
    (CMAKE_MAKE, "/p/csrc/op.cpp:3:10: fatal error: cutlass/gemm.h: No such file or directory"),
    (PIP, "ModuleNotFoundError: No module named 'torch'"),
    (KILLED, "Killed"),
    (WARNED_LAST, "tiny says no"),
    ("", ""),
], ids=["c10-terminate", "python-oserror", "torch-runtime-error", "chained", "pytest-failed", "pytest-collection",
        "ninja-gcc", "nvcc", "nvcc-fatal", "linker", "cmake-make", "pip-boxed", "killed", "warning-after-stdout", "empty"])
def test_the_cause_is_the_first_meaningful_line(output, expected):
    got = cause(output)
    assert got.startswith(expected) if expected else got == "", got
    assert "frame #" not in got and "ninja: build stopped" not in got


def test_a_long_line_is_cut_to_the_limit():
    got = cause("RuntimeError: " + "x" * 1000)
    assert len(got) == LIMIT + 3 and got.endswith("...")


def test_a_secret_is_redacted_before_the_line_is_cut():
    """Cut first, a secret past the limit would be shown in half, which redaction no longer recognises."""
    from wheelci.util import secret

    token = "ghp_S3cretTokenValue0123456789ab"
    secret.add(token)
    got = cause("E   AssertionError: " + "x" * (LIMIT - 10) + f" token={token}")
    assert "ghp_S3cret" not in got and "S3cret" not in got, got


def test_many_tracebacks_without_an_exception_line_are_read_in_one_pass():
    """A hostile output of tracebacks that never end in an exception line was read once per traceback
    (hours for a few MB of log); each traceback is read up to the next one now. The test's time limit
    would stop the quadratic reading; the answer is the last meaningful line, as for any output."""
    got = cause("ValueError: before them all\n" + "Traceback (most recent call last)\n  x\n" * 200_000)
    assert got == "x"


def test_only_backtrace_frames_leave_the_last_line_as_it_is():
    """Nothing but noise: the last line, rather than nothing."""
    assert cause("frame #0: a + 0x1\nframe #1: _start + 0x21\n") == "frame #1: _start + 0x21"


SETUP_PY_RAISES = """\
running bdist_wheel
Traceback (most recent call last):
  File "setup.py", line 40, in <module>
    urllib.request.urlretrieve(wheel_url, wheel_filename)
urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>
ERROR Backend subprocess exited when trying to invoke build_wheel
"""


# python -m build's check under a CUDA torch on a GPU-less builder: torch's no-GPU line comes first
UNMET = """\
* Getting build dependencies for wheel...
No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'
ERROR Unmet dependencies (checked against /env/bin/python):
\tnumpy
\t\twanted: any
\t\tfound: not installed
\tpybind11>=2.6
\t\twanted: >=2.6
\t\tfound: not installed
"""

CMAKE = """\
*** Configuring CMake...
No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'
CMake Error at CMakeLists.txt:40 (message):
  COMPUTE_BACKEND is cpu: set -DCOMPUTE_BACKEND=cuda
  for the CUDA library


-- Configuring incomplete, errors occurred!
"""

# setup.py raising on a CPU torch, after torch's no-GPU line: the exception is the cause, not the GPU
NO_GPU_THEN_NAME_ERROR = """\
No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'
Traceback (most recent call last):
  File "setup.py", line 120, in <module>
    if bare_metal_version >= Version("11.8"):
NameError: name 'bare_metal_version' is not defined
"""

NO_GPU_AND_ASKED = """\
No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'
Traceback (most recent call last):
  File "setup.py", line 9, in <module>
    raise RuntimeError("no GPU: torch.cuda.is_available() is False")
RuntimeError: no GPU: torch.cuda.is_available() is False
"""


@pytest.mark.parametrize("log, cuda, expected", [
    (UNMET, "13.0", "the build frontend found the build environment without numpy, pybind11>=2.6, which the project "
                    "asks for"),
    (CMAKE, "13.0", "CMake's first error: CMakeLists.txt:40 (message): COMPUTE_BACKEND is cpu: set "
                    "-DCOMPUTE_BACKEND=cuda for the CUDA library"),
    (NO_GPU_THEN_NAME_ERROR, "13.0", "the build's first error: NameError: name 'bare_metal_version' is not defined"),
    (NO_GPU_AND_ASKED, "13.0", "torch sees no GPU on this machine"),
], ids=["unmet", "cmake", "not-the-gpu", "the-gpu"])
def test_the_cause_is_the_first_real_error_whichever_stage_printed_it(log, cuda, expected):
    """The frontend's dependency check, CMake, setup.py: each is named in its own words, and the GPU only
    where the failure is about it (every CUDA build on a GPU-less machine prints torch's no-GPU line)."""
    from wheelci.compile.hints import why_failed

    got = why_failed(log, cuda=cuda)
    assert got and got.startswith(expected), got


@pytest.mark.parametrize("log, expected", [
    (NINJA_GCC, "the compiler's first error: /p/csrc/a.cpp:11:17: error: 'y' was not declared in this scope"),
    (SETUP_PY_RAISES, "the build's first error: urllib.error.URLError: <urlopen error [Errno -3] Temporary failure"),
    (LINKER, "the build's first error: a.cpp:(.text+0x2a): undefined reference to `helper(at::Tensor const&)'"),
    ("", None),
], ids=["compiler", "setup-py", "linker", "empty"])
def test_a_failed_compile_says_its_first_error(log, expected):
    """wheelci.compile.hints: its known causes first, else the cause of the output, never its last line."""
    from wheelci.compile.hints import why_failed

    got = why_failed(log, cuda=None)
    assert got == expected if expected is None else got.startswith(expected), got
