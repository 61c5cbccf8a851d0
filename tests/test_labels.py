"""Labels that tell the truth: a wheel whose libraries link no LibTorch is pinned to no torch release and
labelled by no torch; a CUDA wheel beside a CPU torch fails its import with one line naming the build to
install instead."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests import _proc
from tests._wheels import run_stage
from wheelci.compile.hostenv import TorchSpec, ensure_env
from wheelci.verifyenv import fresh_venv, pip_install
from wheelci.wheel.metadata import get_headers
from wheelci.wheel.zipread import WheelArchive

pytestmark = [pytest.mark.slow]


def plain_c_project(root: Path) -> Path:
    """A C extension of the Python C API alone: no torch in its libraries, torch in its requirements."""
    (root / "plain_c").mkdir(parents=True)
    (root / "plain_c" / "__init__.py").write_text("from ._ext import answer\n")
    (root / "ext.c").write_text(textwrap.dedent("""\
        #include <Python.h>
        static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(42); }
        static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {0}};
        static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_ext", 0, -1, methods};
        PyMODINIT_FUNC PyInit__ext(void) { return PyModule_Create(&mod); }
        """))
    (root / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools", "torch"]\n'
                                         'build-backend = "setuptools.build_meta"\n')
    (root / "setup.py").write_text(textwrap.dedent("""\
        from setuptools import Extension, setup
        setup(name="plain-c", version="1.0", packages=["plain_c"], install_requires=["torch>=2"],
              ext_modules=[Extension("plain_c._ext", ["ext.c"])])
        """))
    return root


@pytest.mark.network
def test_a_wheel_that_links_no_libtorch_is_tied_to_no_torch(tmp_path):
    out = tmp_path / "out"
    r = run_stage("ci.build", plain_c_project(tmp_path / "plain"), "--cpu", "--engine", "host", "-w", out,
                  "--work-dir", tmp_path / "work", "--test-command", "python -c \"import plain_c; assert plain_c.answer() == 42\"")
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    assert wheel.name.startswith("plain_c-1.0-cp3"), wheel.name  # no +pt2.13.0.cpu
    assert "no library of the wheel links LibTorch: not tied to torch 2.13.0" in r.stderr
    with WheelArchive.open(wheel) as wa:
        requires = get_headers(wa.metadata, "Requires-Dist")
    assert "torch>=2" in requires and not any(r.startswith("torch==") for r in requires), requires
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] and report["verify"]["test_command"].startswith("ok"), report["verify"]


def test_a_cuda_wheel_beside_a_cpu_torch_names_the_build_to_install(cuda_build, tmp_path):
    """The example's cu130 wheel in an environment whose torch is the CPU build: its import stops on one
    line naming the +cpu build, not on `libcublasLt.so.13: cannot open shared object file`."""
    site = ensure_env(TorchSpec("2.13.0", None, None, False)).site
    python = fresh_venv(tmp_path / "venv", site)
    assert pip_install(python, "--no-deps", "--no-index", str(cuda_build.wheel)).returncode == 0
    with WheelArchive.open(cuda_build.wheel) as wa:
        package, version = wa.name.distribution, wa.name.version
    r = _proc.run([str(python), "-c", f"import {package}"], capture_output=True, text=True)
    assert r.returncode != 0 and "VariantError" in r.stderr, r.stderr[-2000:]
    base = version.split("+")[0]
    want = (f"is the pt2.13.0.cu130 build (CUDA 13), but torch 2.13.0+cpu has no CUDA: install the cpu build of "
            f"{package} (version {base}+pt2.13.0.cpu)")
    assert want in r.stderr, r.stderr[-2000:]
