"""Repair on real ELF files: what auditwheel would graft from the system but torch already provides."""

from __future__ import annotations

import subprocess
import zipfile

from tests._elfbuild import make_wheel
from tests._wheels import run_stage


def test_openmp_runtime_is_left_to_torch(tmp_path):
    """An op built with -fopenmp NEEDs libgomp.so.1; torch ships its own (torch/lib/libgomp.so.1), so the
    wheel must not carry a second copy (auditwheel grafts it by default: it is outside every policy)."""
    src = tmp_path / "omp.c"
    src.write_text("#include <omp.h>\nint threads(void) { return omp_get_max_threads(); }\n")
    lib = tmp_path / "libomp_op.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-fopenmp", "-o", lib, src], check=True)
    wheel = make_wheel(tmp_path / "in", "omp-op", {"omp_op/__init__.py": b"", "omp_op/libomp_op.so": lib},
                       tag="py3-none-linux_x86_64")
    out = tmp_path / "out"
    proc = run_stage("ci.repair", wheel, "-w", out, "--torch", "2.13.0", "--json")
    assert proc.returncode == 0, proc.stderr
    (repaired,) = out.glob("*.whl")
    names = zipfile.ZipFile(repaired).namelist()
    assert not [n for n in names if "gomp" in n], names
    assert "libgomp.so.1" in proc.stdout  # reported as excluded: torch provides it
