"""ci.abi and ci.native.stable_abi: shim functions dated from torch's headers, libraries classified by
what they import, and wheels refused when what they require of torch is not what their libraries need.

The dates are checked against real torch releases: every function the newest headers date at or
before a release is exported by that release's libtorch, and none dated after it is.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from wheelci.compile.hostenv import TorchSpec, ensure_env
from wheelci.native.stable_abi import classify, declared_versions, is_torch_cxx, problems, shim_versions
from tests._wheels import build_wheel, run_stage
from tests import _proc

# PyPI's default Linux builds (CUDA builds import without a GPU); the newest dates the functions.
RELEASES = {"2.10.0": "12.8", "2.11.0": "13.0", "2.13.0": "13.0", "2.14.1": "13.0"}
NEWEST = "2.14.1"
PLATFORM_ONLY = ("mps", "xpu", "sycl")  # declared for other builds of torch than the Linux CUDA one


def torch_site(version: str) -> Path:
    return ensure_env(TorchSpec(version, RELEASES[version], None, True)).site


@pytest.fixture(scope="module")
def table() -> dict:
    return shim_versions(torch_site(NEWEST) / "torch" / "include")


def exported(site: Path) -> set[str]:
    names: set[str] = set()
    for lib in ("libtorch_cpu.so", "libtorch_cuda.so"):
        out = _proc.run(["nm", "-D", "--defined-only", str(site / "torch" / "lib" / lib)],
                        capture_output=True, text=True, check=True).stdout
        names |= {line.split()[-1] for line in out.splitlines() if line.strip()}
    return names


@pytest.mark.real_torch
@pytest.mark.parametrize("version", sorted(set(RELEASES) - {NEWEST}))
def test_header_dates_match_real_torch_exports(version, table):
    """The version guards are the truth: what 2.14.1's headers date <= X is in torch X's libtorch, and
    what they date after X is not (so a library using it fails with `undefined symbol` on X)."""
    have = exported(torch_site(version))
    release = tuple(int(p) for p in version.split(".")[:2])
    linux = {n: v for n, v in table.items() if not any(p in n for p in PLATFORM_ONLY)}
    assert len(linux) > 500
    missing = sorted(n for n, v in linux.items() if v <= release and n not in have)
    early = sorted(n for n, v in linux.items() if v > release and n in have)
    assert not missing and not early, (missing[:10], early[:10])
    assert any(v > release for v in linux.values())  # the check has something newer to tell apart


HEADER = """
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_10_0
AOTI_TORCH_EXPORT AOTITorchError torch_old(int x);
#ifdef USE_CUDA
AOTI_TORCH_EXPORT AOTITorchError
torch_cuda_thing(void** out);
#endif
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_12_0
AOTI_TORCH_EXPORT AOTITorchError torch_new(
    const char* a,
    int b);
#else
AOTI_TORCH_EXPORT AOTITorchError torch_fallback(int x);
#endif
#endif
AOTI_TORCH_EXPORT int32_t aoti_torch_plain();
"""


def test_declared_versions_follow_nesting():
    assert declared_versions(HEADER) == {"torch_old": (2, 10), "torch_cuda_thing": (2, 10),
                                         "torch_new": (2, 12), "torch_fallback": (2, 10),
                                         "aoti_torch_plain": (2, 10)}


@pytest.mark.parametrize("symbol,cxx", [
    ("_ZN3c1010TensorImpl4sizeEv", True), ("_ZNK2at10TensorBase5numelEv", True),
    ("_ZN5torch7Library4_defEv", True), ("_ZTIN3c105ErrorE", True), ("_ZN6caffe24TypeEv", True),
    ("_ZNSt6vectorIiSaIiEE9push_backEv", False), ("_Z7abc3c10v", False), ("torch_call_dispatcher", False),
    ("_ZN9mylibrary3c10Ev", False), ("_ZN12atomic_thing3getEv", False),
])
def test_torch_cxx_symbols(symbol, cxx):
    assert is_torch_cxx(symbol) is cxx


def test_problems_name_what_is_wrong():
    table = {"torch_old": (2, 10), "torch_new": (2, 13)}
    stable = classify("a.so", ["torch_old", "memcpy"], ["libc.so.6"], table)
    assert stable.kind == "stable" and stable.needs == (2, 10)
    assert problems([stable], "torch>=2.10") == []
    newer = classify("b.so", ["torch_old", "torch_new"], [], table)
    assert "torch_new (torch 2.13)" in problems([newer], "torch>=2.10")[0]
    assert problems([newer], "torch>=2.13") == []
    classic = classify("c.so", ["_ZN3c1010TensorImpl4sizeEv"], [], table)
    assert "classic" in problems([classic], "torch>=2.10")[0]
    assert problems([classic], "torch==2.13.0") == []
    unknown = classify("d.so", ["torch_made_up"], [], table)
    assert "no stable shim header declares" in problems([unknown], "torch>=2.10")[0]
    python = classify("e.so", ["torch_old"], ["libtorch_python.so"], table)
    assert "libtorch_python.so" in problems([python], "torch>=2.10")[0]
    # every spelling of a range is a range, with its floor: the checks stay on (they were off for these)
    for spelled in ("torch~=2.10", "torch>2.10", "torch==2.*,>=2.10", "torch<3,>=2.10", "torch!=2.11.0,>=2.10"):
        assert "torch_new (torch 2.13)" in problems([newer], spelled)[0], spelled
        assert "classic" in problems([classic], spelled)[0], spelled
        assert "libtorch_python.so" in problems([python], spelled)[0], spelled
    assert problems([newer], "torch<3,>=2.13") == [] and problems([newer], "torch~=2.13") == []
    assert problems([classic], "torch===2.13.0") == []


# --- the stage on real libraries, compiled here, in wheels -------------------------------------------


def compiled(tmp: Path, calls: list[str], needed: list[str] = ()) -> bytes:
    """A shared library (gcc) that calls each of `calls`, left undefined for the loader, as an extension
    built against torch leaves torch's functions; `needed` become DT_NEEDED entries of stub libraries."""
    src = tmp / "lib.c"
    decls = "".join(f"extern int {c}(void);\n" for c in calls)
    src.write_text(decls + "int entry(void) { return 0" + "".join(f" + {c}()" for c in calls) + "; }\n")
    stubs = []
    for soname in needed:
        stub = tmp / soname
        _proc.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(stub), "-x", "c", "/dev/null"],
                  check=True)
        stubs.append(str(stub))
    out = tmp / "libop.so"
    _proc.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), "-Wl,--no-as-needed", *stubs], check=True)
    return out.read_bytes()


def wheel_with(tmp: Path, lib: bytes, requires: tuple[str, ...], tag: str = "py3-none-linux_x86_64") -> Path:
    return build_wheel(tmp / "dist", "op-pkg", "1.0", {"op_pkg/__init__.py": "", "op_pkg/lib/libop.so": lib},
                       tag=tag, requires=requires)


@pytest.fixture(scope="module")
def site() -> Path:
    return torch_site(NEWEST)


def run_abi(wheel: Path, site: Path) -> subprocess.CompletedProcess:
    return run_stage("ci.abi", wheel, "--torch-site", site, "--json")


@pytest.mark.real_torch
def test_stable_library_declared_stable_passes(tmp_path, site, table):
    old = sorted(n for n, v in table.items() if v == (2, 10) and n.startswith("torch_"))[:3]
    r = run_abi(wheel_with(tmp_path, compiled(tmp_path, old), ("torch>=2.10",)), site)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["kind"] == "stable" and report["libraries"][0]["needs"] == "2.10", report


@pytest.mark.real_torch
def test_too_new_shim_function_is_refused(tmp_path, site, table):
    """What building without TORCH_TARGET_VERSION gives: a function of 2.13 in a wheel saying 2.10."""
    new = sorted(n for n, v in table.items() if v == (2, 13) and n.startswith("torch_"))[0]
    wheel = wheel_with(tmp_path, compiled(tmp_path, [new]), ("torch>=2.10",))
    r = run_abi(wheel, site)
    assert r.returncode == 1 and f"{new} (torch 2.13)" in r.stderr and "TORCH_TARGET_VERSION" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


@pytest.mark.real_torch
def test_classic_library_declared_stable_is_refused(tmp_path, site):
    """A C++ call into c10, left undefined: what any ATen extension imports."""
    src = tmp_path / "classic.cpp"
    src.write_text("namespace c10 { struct TensorImpl { long size() const; }; }\n"
                   "long entry(const c10::TensorImpl& t) { return t.size(); }\n")
    out = tmp_path / "libclassic.so"
    _proc.run(["g++", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    stable_claim = wheel_with(tmp_path / "a", out.read_bytes(), ("torch>=2.10",))
    r = run_abi(stable_claim, site)
    assert r.returncode == 1 and "classic LibTorch" in r.stderr and "_ZNK3c1010TensorImpl4sizeEv" in r.stderr, r.stderr
    pinned = wheel_with(tmp_path / "b", out.read_bytes(), ("torch==2.13.0",))
    r = run_abi(pinned, site)
    assert r.returncode == 0 and json.loads(r.stdout)["kind"] == "classic", r.stderr
    # a requirement for an extra is not what a plain install acts on: the pin after it counts
    extra_first = wheel_with(tmp_path / "c", out.read_bytes(), ('torch>=2; extra == "compile"', "torch==2.13.0"))
    r = run_abi(extra_first, site)
    assert r.returncode == 0 and json.loads(r.stdout)["torch_requirement"] == "torch==2.13.0", r.stderr


@pytest.mark.real_torch
def test_stable_library_linking_torch_python_is_refused(tmp_path, site, table):
    old = sorted(n for n, v in table.items() if v == (2, 10) and n.startswith("torch_"))[:1]
    wheel = wheel_with(tmp_path, compiled(tmp_path, old, ["libtorch_python.so"]), ("torch>=2.10",))
    r = run_abi(wheel, site)
    assert r.returncode == 1 and "libtorch_python.so" in r.stderr, r.stderr


def test_abi_stage_bad_input_is_one_line(tmp_path):
    r = run_stage("ci.abi", tmp_path / "missing.whl", "--torch-site", tmp_path)
    assert r.returncode == 2 and "no such file" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    wheel = build_wheel(tmp_path, "op-pkg", "1.0", {"op_pkg/__init__.py": ""})
    r = run_stage("ci.abi", wheel, "--torch-site", tmp_path)
    assert r.returncode == 2 and "no torch headers" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.real_torch
def test_abi3_tagged_wheel_using_the_full_api_is_refused(tmp_path, site):
    """abi3audit checks an abi3-tagged wheel: a module calling outside the limited API is named."""
    src = tmp_path / "m.c"
    src.write_text("extern void* PyUnicode_AsUTF8(void*);\nextern void* PyModule_Create2(void*, int);\n"
                   "void* PyInit__m(void) { PyUnicode_AsUTF8(0); return PyModule_Create2(0, 3); }\n")
    out = tmp_path / "_m.abi3.so"
    _proc.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    wheel = build_wheel(tmp_path / "dist", "op-pkg", "1.0", {"op_pkg/__init__.py": "", "op_pkg/_m.abi3.so":
                        out.read_bytes()}, tag="cp39-abi3-linux_x86_64", requires=("torch>=2.10",))
    r = run_abi(wheel, site)
    assert r.returncode == 1 and "PyUnicode_AsUTF8" in r.stderr and "tagged abi3" in r.stderr, r.stderr
    clean = tmp_path / "clean.c"
    clean.write_text("extern void* PyModule_Create2(void*, int);\nvoid* PyInit__m(void) { return PyModule_Create2(0, 3); }\n")
    _proc.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(clean)], check=True)
    wheel = build_wheel(tmp_path / "dist2", "op-pkg", "1.0", {"op_pkg/__init__.py": "", "op_pkg/_m.abi3.so":
                        out.read_bytes()}, tag="cp39-abi3-linux_x86_64", requires=("torch>=2.10",))
    assert run_abi(wheel, site).returncode == 0


def test_member_names_are_escaped_where_printed(tmp_path):
    """A member name carrying a line break and a terminal escape printed raw: a forged `::error::` line,
    and colours (or worse) on the reader's terminal. Printed escaped, as ci.check prints names."""
    src = tmp_path / "a.c"
    src.write_text("int f(void) { return 1; }\n")
    _proc.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "a.so"), str(src)], check=True)
    name = "op_pkg/lib/lib\x1b[31mred\n::error::forged.so"
    wheel = build_wheel(tmp_path / "dist", "op-pkg", "1.0", {"op_pkg/__init__.py": "", name: (tmp_path / "a.so").read_bytes()},
                        tag="py3-none-linux_x86_64")
    site = tmp_path / "site"
    (site / "torch" / "include" / "torch").mkdir(parents=True)  # headers declaring no shim function
    r = run_stage("ci.abi", wheel, "--torch-site", site)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["op_pkg/lib/lib\\x1b[31mred\\n::error::forged.so: none "
                                     "(0 shim functions, 0 C++ symbols)"], r.stdout
