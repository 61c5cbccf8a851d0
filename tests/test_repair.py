"""Repair on real ELF files: what auditwheel would graft from the system but torch already provides."""

from __future__ import annotations

import zipfile

import pytest

from tests._elfbuild import make_wheel
from tests._wheels import run_stage
from tests import _proc


@pytest.fixture
def omp_lib(tmp_path):
    """A library NEEDing libgomp.so.1 and LibTorch's libc10.so (linked against a stand-in of that name):
    both excluded (torch ships them), and LibTorch ties the wheel to its torch, so repair pins it."""
    return _torch_op(tmp_path)


def _torch_op(tmp_path: Path) -> Path:
    stub = tmp_path / "stub" / "libc10.so"
    stub.parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "c10.c").write_text("int c10_stand_in(void) { return 0; }\n")
    _proc.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libc10.so", "-o", stub, tmp_path / "c10.c"], check=True)
    src = tmp_path / "omp.c"
    src.write_text("#include <omp.h>\nint c10_stand_in(void);\n"
                   "int threads(void) { return omp_get_max_threads() + c10_stand_in(); }\n")
    lib = tmp_path / "libomp_op.so"
    _proc.run(["gcc", "-shared", "-fPIC", "-fopenmp", "-o", lib, src, f"-L{stub.parent}", "-lc10",
               "-Wl,--no-as-needed"], check=True)
    return lib


def test_openmp_runtime_is_left_to_torch(tmp_path):
    """An op built with -fopenmp NEEDs libgomp.so.1; torch ships its own (torch/lib/libgomp.so.1), so the
    wheel must not carry a second copy (auditwheel grafts it by default: it is outside every policy). It
    links no LibTorch, so it ties the wheel to no torch release: no pin."""
    src = tmp_path / "omp.c"
    src.write_text("#include <omp.h>\nint threads(void) { return omp_get_max_threads(); }\n")
    lib = tmp_path / "libomp_op.so"
    _proc.run(["gcc", "-shared", "-fPIC", "-fopenmp", "-o", lib, src], check=True)
    wheel = make_wheel(tmp_path / "in", "omp-op", {"omp_op/__init__.py": b"", "omp_op/libomp_op.so": lib},
                       tag="py3-none-linux_x86_64")
    out = tmp_path / "out"
    proc = run_stage("ci.repair", wheel, "-w", out, "--torch", "2.13.0", "--json")
    assert proc.returncode == 0, proc.stderr
    (repaired,) = out.glob("*.whl")
    names = zipfile.ZipFile(repaired).namelist()
    assert not [n for n in names if "gomp" in n], names
    assert "libgomp.so.1" in proc.stdout  # reported as excluded: torch provides it
    metadata = zipfile.ZipFile(repaired).read("omp_op-1.0.dist-info/METADATA").decode()
    assert "Requires-Dist: torch" not in metadata


def test_the_projects_own_torch_requirement_gives_way_to_the_pin(tmp_path):
    """Real setup.py files declare `install_requires=['torch>=1.1']` (spatial-correlation-sampler does):
    true of the source, not of a library built against torch 2.13.0. The pin replaces it; other
    requirements, and torch for an extra, stay as the project wrote them."""
    lib = _torch_op(tmp_path)
    wheel = make_wheel(tmp_path / "in", "omp-op", {"omp_op/__init__.py": b"", "omp_op/libomp_op.so": lib},
                       requires=("torch>=1.1", "numpy", 'torch>=2; extra == "compile"'))
    out = tmp_path / "out"
    proc = run_stage("ci.repair", wheel, "-w", out, "--torch", "2.13.0", "--torch-requires", "filelock")
    assert proc.returncode == 0, proc.stderr
    assert "replacing the project's torch>=1.1" in proc.stdout
    (repaired,) = out.glob("*.whl")
    metadata = zipfile.ZipFile(repaired).read("omp_op-1.0.dist-info/METADATA").decode()
    requires = [line.partition(": ")[2] for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires == ["numpy", 'torch>=2; extra == "compile"', "torch==2.13.0"], requires


def repaired_requires(omp_lib, tmp_path, declared, *args: str) -> list[str]:
    """Requires-Dist of the omp-op wheel declaring `declared`, repaired against torch 2.13.0 with `args`."""
    wheel = make_wheel(tmp_path / "in", "omp-op", {"omp_op/__init__.py": b"", "omp_op/libomp_op.so": omp_lib},
                       requires=declared)
    out = tmp_path / "out"
    proc = run_stage("ci.repair", wheel, "-w", out, "--torch", "2.13.0", *args)
    assert proc.returncode == 0, proc.stderr
    (repaired,) = out.glob("*.whl")
    metadata = zipfile.ZipFile(repaired).read("omp_op-1.0.dist-info/METADATA").decode()
    return [ln.partition(": ")[2] for ln in metadata.splitlines() if ln.startswith("Requires-Dist:")]


@pytest.mark.parametrize("declared, expected", [
    # the same requirement twice: the project's exact pin stays, the loose one goes
    (("torch>=1.1", "torch==2.13.0"), ["torch==2.13.0"]),
    # a marker that applies to a plain install is not "for an extra"
    (('torch>=1.1; extra == "x" or python_version >= "3"',), ["torch==2.13.0"]),
    # the extras the project asked of torch stay asked
    (("torch[opt-einsum]>=1.1",), ["torch[opt-einsum]==2.13.0"]),
])
def test_requirement_merging(omp_lib, tmp_path, declared, expected):
    assert repaired_requires(omp_lib, tmp_path, declared, "--torch-requires", "filelock") == expected


@pytest.mark.parametrize("declared, expected", [
    (("torch>=2.12,<3",), "torch<3,>=2.12"),  # the project's floor is higher: it stays the floor
    (("torch>=1.1",), "torch>=2.10"),  # a floor below the target: the target's
    (("torch<3",), "torch<3,>=2.10"),  # a ceiling only: ours is the floor
    (("torch!=2.11.0",), "torch!=2.11.0,>=2.10"),
    (("torch~=2.11",), "torch>=2.11,~=2.11"),  # the floor said as >=, which ci.abi reads
    (("torch==2.*",), "torch==2.*,>=2.10"),
    (("torch>2.12",), "torch>2.12,>=2.12"),
    (("numpy",), "torch>=2.10"),
])
def test_a_stable_wheel_keeps_the_projects_torch_bounds(omp_lib, tmp_path, declared, expected):
    """A stable wheel serves every torch from its target on, except those its project rules out."""
    requires = repaired_requires(omp_lib, tmp_path, declared, "--stable-abi", "2.10")
    assert [r for r in requires if r.startswith("torch")] == [expected]


def test_a_project_excluding_the_torch_it_was_built_against_is_refused(omp_lib, tmp_path):
    wheel = make_wheel(tmp_path / "in", "omp-op", {"omp_op/__init__.py": b"", "omp_op/libomp_op.so": omp_lib},
                       requires=("torch<2",))
    proc = run_stage("ci.repair", wheel, "-w", tmp_path / "out", "--torch", "2.13.0", "--torch-requires", "filelock")
    assert proc.returncode == 2 and not (tmp_path / "out").exists()
    assert proc.stderr.strip().splitlines() == [
        "python -m ci.repair: error: the project requires torch<2, but it was built against torch 2.13.0"]


def test_repairing_into_the_inputs_directory_never_replaces_the_input(tmp_path):
    """An already repaired wheel keeps its name: `-w` its own directory would replace the input."""
    src = tmp_path / "x.c"
    src.write_text("int x(void) { return 1; }\n")
    lib = tmp_path / "libx.so"
    _proc.run(["gcc", "-shared", "-fPIC", "-o", lib, src], check=True)
    wheel = make_wheel(tmp_path / "in", "x-op", {"x_op/__init__.py": b"", "x_op/libx.so": lib},
                       tag="py3-none-linux_x86_64")
    first = run_stage("ci.repair", wheel, "-w", tmp_path / "repaired", "--torch", "2.13.0")
    assert first.returncode == 0, first.stderr
    (repaired,) = (tmp_path / "repaired").glob("*.whl")
    before = (repaired.read_bytes(), repaired.stat().st_ino)
    r = run_stage("ci.repair", repaired, "-w", repaired.parent, "--torch", "2.13.0")
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "would replace its input" in line
    assert (repaired.read_bytes(), repaired.stat().st_ino) == before
    assert sorted(p.name for p in repaired.parent.iterdir()) == [repaired.name]


def test_exclude_keeps_a_library_out_of_the_wheel(tmp_path):
    """ci.repair --exclude (what the container build passes for --exclude and [tool.wheelci] exclude):
    libbz2 is grafted by default (no manylinux policy lists it) and left out when excluded."""
    src = tmp_path / "z.c"
    src.write_text("extern const char *BZ2_bzlibVersion(void);\nconst char *v(void) { return BZ2_bzlibVersion(); }\n")
    lib = tmp_path / "libz_op.so"
    _proc.run(["gcc", "-shared", "-fPIC", "-o", lib, src, "/lib/x86_64-linux-gnu/libbz2.so.1.0"], check=True)
    wheel = make_wheel(tmp_path / "in", "z-op", {"z_op/__init__.py": b"", "z_op/libz_op.so": lib},
                       tag="py3-none-linux_x86_64")
    grafted = {}
    for case, extra in (("default", []), ("excluded", ["--exclude", "libbz2.so*"])):
        out = tmp_path / case
        proc = run_stage("ci.repair", wheel, "-w", out, "--torch", "2.13.0", *extra)
        assert proc.returncode == 0, proc.stderr
        (repaired,) = out.glob("*.whl")
        grafted[case] = [n for n in zipfile.ZipFile(repaired).namelist() if "/libbz2" in n and ".libs/" in n]
    assert grafted["default"] and not grafted["excluded"], grafted


def test_a_stable_wheel_gets_the_python_its_torch_needs_unless_the_project_says(omp_lib, tmp_path):
    """A py3/abi3 stable wheel installs wherever its tag allows; torch 2.10 has wheels from CPython 3.10 on."""
    got = {}
    for case, declared in (("none", None), ("declared", ">=3.12")):
        wheel = make_wheel(tmp_path / case, "omp-op", {"omp_op/__init__.py": b"", "omp_op/libomp_op.so": omp_lib},
                           requires_python=declared)
        out = tmp_path / f"out-{case}"
        proc = run_stage("ci.repair", wheel, "-w", out, "--torch", "2.14.1", "--torch-requires", "filelock",
                         "--stable-abi", "2.10")
        assert proc.returncode == 0, proc.stderr
        (repaired,) = out.glob("*.whl")
        metadata = zipfile.ZipFile(repaired).read("omp_op-1.0.dist-info/METADATA").decode()
        got[case] = [ln for ln in metadata.splitlines() if ln.startswith(("Requires-Python", "Requires-Dist"))]
    assert got["none"] == ["Requires-Dist: torch>=2.10", "Requires-Python: >=3.10"], got
    assert got["declared"] == ["Requires-Python: >=3.12", "Requires-Dist: torch>=2.10"], got


@pytest.mark.parametrize("args, words", [
    (["--torch", "2.13.0\nRequires-Dist: evil"], "--torch '2.13.0\\nRequires-Dist: evil' is not a PEP 440 version"),
    (["--torch", "2.13.0\n"], "is not a PEP 440 version"),  # packaging alone would read this as 2.13.0
    (["--torch", "latest"], "--torch 'latest' is not a PEP 440 version"),
    (["--torch", "2.13.0", "--torch-requires", "filelock\nRequires-Dist: evil"], "is not one requirement"),
])
def test_torch_inputs_that_would_inject_a_metadata_header_are_refused(omp_lib, tmp_path, args, words):
    """--torch went into `Requires-Dist: torch==...` as given: a line break added a header of its own."""
    wheel = make_wheel(tmp_path / "in", "omp-op", {"omp_op/__init__.py": b"", "omp_op/libomp_op.so": omp_lib})
    proc = run_stage("ci.repair", wheel, "-w", tmp_path / "out", *args)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("python -m ci.repair: error: ") and words in line, line
    assert not (tmp_path / "out").exists()
