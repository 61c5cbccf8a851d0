"""ci.split: gcc-built libraries split into companions, both install layouts, and the real torch wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from wheelci.errors import CiError
from wheelci.native.splitplan import Lib, new_rpaths, plan_split
from tests._wheels import build_wheel, raw_zip, read_members, run_stage, signal_mid_write, wheel_entries
from tests import _proc

INIT = '''"""Demo package: loads its native front library, as an extension module would."""
import ctypes
import os

_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libfront.so"))


def answer():
    return _lib.front()
'''
BIG = 200_000  # bytes of random data per big library (incompressible)


def gcc(out: Path, source: str, *args: str) -> None:
    src = out.with_suffix(".c")
    src.write_text(source)
    _proc.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(src), f"-Wl,-soname,{out.name}",
               "-Wl,--enable-new-dtags", *args], check=True, capture_output=True)
    src.unlink()


@pytest.fixture(scope="module")
def native_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """demo 1.0: libfront -> libbig1..3 (200 kB each, random) -> libbase, all in demo/lib with $ORIGIN."""
    d = tmp_path_factory.mktemp("native")
    lib = d / "lib"
    lib.mkdir()
    gcc(lib / "libbase.so", "int base(void) { return 1; }\n")
    for i in (1, 2, 3):
        blob = d / f"blob{i}.bin"
        blob.write_bytes(os.urandom(BIG))
        gcc(lib / f"libbig{i}.so",
            f'__asm__(".section .rodata\\n.global blob{i}\\nblob{i}: .incbin \\"{blob}\\"\\n.previous");\n'
            f"extern const unsigned char blob{i}[];\nint base(void);\n"
            f"int big{i}(void) {{ return base() + {i} * 10 + (blob{i}[0] & 0); }}\n",
            f"-L{lib}", "-lbase", "-Wl,-rpath,$ORIGIN")
    gcc(lib / "libfront.so", "int big1(void); int big2(void); int big3(void);\n"
        "int front(void) { return big1() + big2() + big3(); }\n",
        f"-L{lib}", "-lbig1", "-lbig2", "-lbig3", "-Wl,-rpath,$ORIGIN")
    files: dict[str, bytes | str] = {"demo/__init__.py": INIT}
    for so in sorted(lib.iterdir()):
        files[f"demo/lib/{so.name}"] = so.read_bytes()
    modes = {f"demo/lib/{so.name}": 0o755 for so in lib.iterdir()}
    return build_wheel(d / "dist", version="1.0+cpu", files=files, tag="py3-none-linux_x86_64", modes=modes,
                       requires=("filelock",))


def pip_target(wheel: Path, target: Path) -> None:
    _proc.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
               "--disable-pip-version-check", "--target", str(target), str(wheel)], check=True)


def run_py(code: str, pythonpath: list[Path]) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    return _proc.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/")



def _rerecorded(entries: list[tuple[str, bytes, int]]) -> list[tuple[str, bytes, int]]:
    """The entries with RECORD rewritten to match their bytes: a valid wheel once zipped."""
    import csv
    import io

    from tests._wheels import record_hash
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    record = next(n for n, _, _ in entries if n.endswith(".dist-info/RECORD"))
    for n, d, _ in entries:
        writer.writerow([n, "", ""] if n == record else [n, record_hash(d), len(d)])
    return [(n, buf.getvalue().encode() if n == record else d, m) for n, d, m in entries]


def refused_split(wheel: Path, limit: str, out: Path, words: str, *extra: str | Path) -> None:
    """ci.split refuses the wheel: exit 2, one error line with `words`, nothing in `out`."""
    r = run_stage("ci.split", wheel, "--limit", limit, "-w", out, *extra)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], r.stderr
    assert not out.exists() or not any(out.iterdir())

def test_split_into_two_companions_works_in_both_layouts(native_wheel: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = run_stage("ci.split", native_wheel, "--limit", "300KB", "-w", out, "--json")
    assert r.returncode == 0, r.stderr
    import json
    paths = [Path(w["path"]) for w in json.loads(r.stdout)["wheels"]]
    assert [p.name for p in paths] == ["demo-1.0+cpu-py3-none-linux_x86_64.whl",
                                       "demo_libs-1.0+cpu-py3-none-linux_x86_64.whl",
                                       "demo_libs2-1.0+cpu-py3-none-linux_x86_64.whl"]
    assert all(p.stat().st_size <= 300_000 for p in paths)
    main = read_members(paths[0])
    meta = main["demo-1.0+cpu.dist-info/METADATA"].decode()
    assert "Requires-Dist: demo-libs==1.0+cpu" in meta and "Requires-Dist: demo-libs2==1.0+cpu" in meta
    assert "Requires-Dist: filelock" in meta
    assert main["demo/__init__.py"].decode().startswith(INIT.split("\n")[0] + "\nfrom . import _split_libs_preload")
    moved = [[n for n in read_members(p) if n.endswith(".so")] for p in paths[1:]]
    assert [len(m) for m in moved] == [1, 1], moved  # 200 kB each: one per companion under 300 kB
    assert moved[0][0].startswith("demo_libs/lib/libbig") and moved[1][0].startswith("demo_libs2/lib/libbig")
    assert not any(f"demo/lib/{m[0].rsplit('/', 1)[1]}" in main for m in moved)

    # (a) one site-packages: RPATHs alone resolve the moved libraries (no preload involved)
    site = tmp_path / "site"
    for p in paths:
        pip_target(p, site)
    direct = run_py(f"import ctypes; print(ctypes.CDLL({str(site / 'demo/lib/libfront.so')!r}).front())", [])
    assert direct.returncode == 0 and direct.stdout.strip() == "63", direct.stderr
    r = run_py("import demo; print(demo.answer())", [site])
    assert r.returncode == 0 and r.stdout.strip() == "63", r.stderr

    # (b) one directory per wheel on PYTHONPATH (the Bazel layout): the preload makes it work
    dirs = [tmp_path / "bazel" / p.name.split("-")[0] for p in paths]
    for p, d in zip(paths, dirs):
        pip_target(p, d)
    r = run_py("import demo; print(demo.answer())", dirs)
    assert r.returncode == 0 and r.stdout.strip() == "63", r.stderr
    # and it is the preload that does it: without the companions on sys.path it names what is missing
    r = run_py("import demo", dirs[:1])
    assert r.returncode != 0 and "PreloadError: cannot load libbig" in r.stderr, r.stderr


def test_a_library_loaded_by_path_from_python_stays(native_wheel: Path, tmp_path: Path) -> None:
    """__init__.py opens libbig2.so by file path: it is kept, with a note, and the package still
    imports in both layouts."""
    from wheelci.native.splitplan import loaded_by_path

    assert loaded_by_path({"a/x.py": 'CDLL(os.path.join(d, "lib", "libq.so"))'}, ["a/lib/libq.so", "a/lib/libr.so"]) \
        == {"a/lib/libq.so": "a/x.py"}
    with zipfile.ZipFile(native_wheel) as zf:
        files = {n: zf.read(n) for n in zf.namelist() if not n.startswith("demo-")}
    files["demo/__init__.py"] = INIT.replace(
        "_lib = ctypes", '_big2 = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libbig2.so"),'
        " mode=ctypes.RTLD_GLOBAL)\n_lib = ctypes").encode()
    wheel = build_wheel(tmp_path / "dist", version="1.0+cpu", files=files, tag="py3-none-linux_x86_64",
                        modes={n: 0o755 for n in files if n.endswith(".so")}, requires=("filelock",))
    out = tmp_path / "out"
    r = run_stage("ci.split", wheel, "--limit", "450KB", "-w", out)
    assert r.returncode == 0, r.stderr
    assert "kept demo/lib/libbig2.so in demo: demo/__init__.py loads it by path" in r.stderr
    paths = sorted(out.glob("*.whl"))
    with zipfile.ZipFile(paths[0]) as zf:
        assert "demo/lib/libbig2.so" in zf.namelist()
    site = tmp_path / "site"
    dirs = [tmp_path / "bazel" / p.name.split("-")[0] for p in paths]
    for p, d in zip(paths, dirs):
        pip_target(p, site)
        pip_target(p, d)
    for where in ([site], dirs):
        r = run_py("import demo; print(demo.answer())", where)
        assert r.returncode == 0 and r.stdout.strip() == "63", r.stderr


def test_a_split_that_no_longer_imports_is_a_finding_and_leaves_nothing(native_wheel: Path, tmp_path: Path) -> None:
    """__init__.py opens the big libraries by paths it computes ("libbig%d.so" % i): no string literal
    names them, so they move, and the package no longer imports. The split imports what it wrote in
    both layouts before it reports success: a finding (exit 1), and no output left behind."""
    with zipfile.ZipFile(native_wheel) as zf:
        files = {n: zf.read(n) for n in zf.namelist() if not n.startswith("demo-")}
    files["demo/__init__.py"] = INIT.replace(
        "_lib = ctypes", "for _i in (1, 2, 3):\n    ctypes.CDLL(os.path.join(os.path.dirname(__file__), "
        '"lib", "libbig%d.so" % _i))\n_lib = ctypes').encode()
    wheel = build_wheel(tmp_path / "dist", version="1.0+cpu", files=files, tag="py3-none-linux_x86_64",
                        modes={n: 0o755 for n in files if n.endswith(".so")})
    out = tmp_path / "out"
    r = run_stage("ci.split", wheel, "--limit", "300KB", "-w", out)
    assert r.returncode == 1, r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert f"the split wheels do not import where {wheel.name} does: demo (one site directory): OSError: " in line
    assert "demo (one directory per wheel): OSError: " in line and "cannot open shared object file" in line
    assert not out.exists() or not list(out.iterdir())


def test_a_libraries_only_wheel_gets_rpaths_but_no_preload(native_wheel: Path, tmp_path: Path) -> None:
    files = {n: d for n, d, _ in wheel_entries(native_wheel) if n.startswith("demo/lib/")}
    libs_only = build_wheel(tmp_path / "in", version="1.0+cpu", files=files, tag="py3-none-linux_x86_64",
                            modes={n: 0o755 for n in files})
    r = run_stage("ci.split", libs_only, "--limit", "300KB", "-w", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    outs = sorted((tmp_path / "out").glob("*.whl"))
    assert len(outs) == 3 and not any("preload" in n for o in outs for n in read_members(o))
    site = tmp_path / "site"
    for o in outs:
        pip_target(o, site)
    direct = run_py(f"import ctypes; print(ctypes.CDLL({str(site / 'demo/lib/libfront.so')!r}).front())", [])
    assert direct.returncode == 0 and direct.stdout.strip() == "63", direct.stderr


@pytest.mark.slow
def test_preload_deps_from_another_wheel_make_the_bazel_layout_work(tmp_path: Path) -> None:
    """app's libx (moved) needs libext from the extdep wheel: --preload-deps puts libext first; without
    it, the preload finds libext at run time in extdep's directory (the `<pkg>/lib` layout), because
    the dynamic linker's error names it."""
    lib = tmp_path / "lib"
    lib.mkdir()
    gcc(lib / "libext.so", "int ext(void) { return 40; }\n")
    ext_wheel = build_wheel(tmp_path / "dist", name="extdep", tag="py3-none-linux_x86_64",
                            files={"extdep/lib/libext.so": (lib / "libext.so").read_bytes()})
    blob = tmp_path / "blob.bin"
    blob.write_bytes(os.urandom(BIG))
    gcc(lib / "libx.so", f'__asm__(".section .rodata\\n.incbin \\"{blob}\\"\\n.previous");\n'
        "int ext(void); int x(void) { return ext() + 2; }\n",
        f"-L{lib}", "-lext", "-Wl,-rpath,$ORIGIN/../../extdep/lib")
    blob2 = tmp_path / "blob2.bin"
    blob2.write_bytes(os.urandom(BIG // 2))  # stays in app: app alone is over the limit, libx must go
    gcc(lib / "libfront.so", f'__asm__(".section .rodata\\n.incbin \\"{blob2}\\"\\n.previous");\n'
        "int x(void); int front(void) { return x(); }\n", f"-L{lib}", "-lx", "-Wl,-rpath,$ORIGIN")
    app = build_wheel(tmp_path / "dist", name="app", tag="py3-none-linux_x86_64",
                      files={"app/__init__.py": INIT, "app/lib/libx.so": (lib / "libx.so").read_bytes(),
                             "app/lib/libfront.so": (lib / "libfront.so").read_bytes()})
    code = "import app; print(app.answer())"
    for extra in ([], ["--preload-deps", str(ext_wheel)]):
        out = tmp_path / f"out{len(extra)}"
        r = run_stage("ci.split", app, "--limit", "250KB", "-w", out, *extra)
        assert r.returncode == 0, r.stderr
        paths = sorted(out.glob("*.whl")) + [ext_wheel]
        assert [p.name.split("-")[0] for p in paths] == ["app", "app_libs", "extdep"]
        dirs = [out / "bazel" / p.name.split("-")[0] for p in paths]
        for p, d in zip(paths, dirs):
            pip_target(p, d)
        r = run_py(code, dirs)
        assert r.returncode == 0 and r.stdout.strip() == "42", r.stderr
        # Without extdep on sys.path at all: with --preload-deps the preload names what is missing;
        # without, the package's own load fails as it would unsplit (the preload leaves a library it
        # found but could not load to the package).
        r = run_py(code, dirs[:2])
        assert r.returncode != 0, r.stderr
        if extra:
            assert "PreloadError: cannot load libext.so (from extdep)" in r.stderr, r.stderr
        else:
            assert "libx.so: cannot open shared object file" in r.stderr and "PreloadError" not in r.stderr
        site = out / "site"  # one site-packages works either way (RPATHs)
        for p in paths:
            pip_target(p, site)
        r = run_py(code, [site])
        assert r.returncode == 0 and r.stdout.strip() == "42", r.stderr


def test_under_the_limit_is_copied_unchanged(native_wheel: Path, tmp_path: Path) -> None:
    r = run_stage("ci.split", native_wheel, "--limit", "pypi", "-w", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / native_wheel.name).read_bytes() == native_wheel.read_bytes()


def test_sigterm_mid_split_leaves_no_companion_and_no_temporary_files(tmp_path: Path) -> None:
    """A job cancelled mid-split: cleaned up as Ctrl-C is, no companion without its main wheel in -w,
    no extracted libraries in TMPDIR."""
    import signal
    lib = tmp_path / "lib"
    lib.mkdir()
    gcc(lib / "libbase.so", "int base(void) { return 1; }\n")
    # 64 MiB of zeros: quick to build, yet re-deflating the moved copy keeps its .part open a while
    gcc(lib / "libbig1.so", '__asm__(".section .rodata\\n.global zeros\\nzeros: .zero 67108864\\n.previous");\n'
        "int base(void);\nint big1(void) { return base() + 10; }\n", f"-L{lib}", "-lbase", "-Wl,-rpath,$ORIGIN")
    gcc(lib / "libfront.so", "int big1(void);\nint front(void) { return big1() + 52; }\n", f"-L{lib}", "-lbig1",
        "-Wl,-rpath,$ORIGIN")
    files: dict[str, bytes | str] = {"demo/__init__.py": INIT, "demo/data.bin": os.urandom(BIG)}
    files.update({f"demo/lib/{so.name}": so.read_bytes() for so in lib.iterdir()})
    wheel = build_wheel(tmp_path / "dist", files=files, tag="py3-none-linux_x86_64",
                        modes={n: 0o755 for n in files if n.endswith(".so")})
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    r = signal_mid_write("ci.split", wheel, "--limit", "250KB", "-w", out, out=out, signum=signal.SIGTERM,
                         env={"TMPDIR": str(tmp)})
    assert (not out.exists() or list(out.iterdir()) == []) and list(tmp.iterdir()) == []
    assert r.returncode == 128 + signal.SIGTERM, r.stderr
    assert r.stderr.strip().endswith("ci.split: terminated by SIGTERM"), r.stderr
    r = run_stage("ci.split", wheel, "--limit", "250KB", "-w", out)  # the same split, left to finish
    assert r.returncode == 0 and len(list(out.glob("*.whl"))) == 2, r.stderr


def test_under_the_limit_a_tampered_wheel_is_refused_unless_no_verify(native_wheel: Path, tmp_path: Path) -> None:
    entries = [(n, d[:-1] + bytes([d[-1] ^ 1]) if n.endswith("libbig2.so") else d, m)
               for n, d, m in wheel_entries(native_wheel)]
    wheel = raw_zip(tmp_path / "bad" / native_wheel.name, entries)
    out = tmp_path / "out"
    refused_split(wheel, "pypi", out, "RECORD hash mismatch for demo/lib/libbig2.so")
    r = run_stage("ci.split", wheel, "--limit", "pypi", "--no-verify", "-w", out)
    assert r.returncode == 0, r.stderr
    assert (out / wheel.name).read_bytes() == wheel.read_bytes()


def test_plan_is_first_fit_decreasing_and_keeps_depth() -> None:
    libs = [Lib(f"pkg/lib/lib{c}.so", size, f"lib{c}.so", (), (), ("$ORIGIN",))
            for c, size in zip("abcd", (60_000, 30_000, 20_000, 5_000))]
    members = {lib.path: lib.csize for lib in libs} | {"pkg/__init__.py": 10}
    plan = plan_split(190_000, members, libs, 100_000, "pkg")
    assert plan.companions == ["pkg_libs", "pkg_libs2"]
    assert plan.moves == {"pkg/lib/liba.so": (0, "pkg_libs/lib/liba.so"),
                          "pkg/lib/libb.so": (1, "pkg_libs2/lib/libb.so"),
                          "pkg/lib/libc.so": (1, "pkg_libs2/lib/libc.so")}
    with pytest.raises(CiError, match="still about"):
        plan_split(300_000, members, libs, 100_000, "pkg")


def test_new_rpaths_rebase_moved_and_point_stayers_at_companions() -> None:
    libs = [Lib("t/lib/libcpu.so", 9, "libcpu.so", ("libc10.so", "libcudart.so.13"), (),
                ("$ORIGIN", "$ORIGIN/../../nvidia/cu13/lib")),
            Lib("t/lib/libc10.so", 1, "libc10.so", (), (), ("$ORIGIN",)),
            Lib("t/lib/libtorch.so", 1, "libtorch.so", ("libcpu.so",), (), ("$ORIGIN",)),
            Lib("t/lib/libother.so", 1, "libother.so", ("libc10.so",), ("$ORIGIN",), ())]
    got = new_rpaths(libs, {"t/lib/libcpu.so": "t_libs/lib/libcpu.so"})
    assert got == {
        "t/lib/libcpu.so": (["$ORIGIN/../../t/lib", "$ORIGIN/../../nvidia/cu13/lib"], False),
        "t/lib/libtorch.so": (["$ORIGIN", "$ORIGIN/../../t_libs/lib"], False),
    }


def test_new_rpaths_rebase_both_origin_spellings() -> None:
    """`${ORIGIN}` is `$ORIGIN` to the dynamic linker: a moved library kept it unchanged, pointing at
    a directory of the companion that does not exist; `$ORIGINX` is no origin at all."""
    libs = [Lib("t/lib/libcpu.so", 9, "libcpu.so", (), (),
                ("${ORIGIN}", "${ORIGIN}/../../nvidia/cu13/lib", "$ORIGINX/lib", "/usr/local/lib/x"))]
    got = new_rpaths(libs, {"t/lib/libcpu.so": "t_libs/lib/libcpu.so"})
    assert got == {"t/lib/libcpu.so": (["$ORIGIN/../../t/lib", "$ORIGIN/../../nvidia/cu13/lib", "$ORIGINX/lib",
                                        "/usr/local/lib/x"], False)}


def test_a_library_larger_than_the_limit_is_refused(native_wheel: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = run_stage("ci.split", native_wheel, "--limit", "150KB", "-w", out)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "demo/lib/libbig" in lines[0] and "larger than the limit" in lines[0], r.stderr
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("kind,needle", [("not-a-zip", "not a zip file"), ("bad-limit", "not a size"),
                                         ("same-dir", "holds the input wheel"), ("bad-name", "invalid wheel"),
                                         ("hash-mismatch", "RECORD hash mismatch for demo/lib/libbig2.so")])
def test_bad_input_exits_2_and_writes_nothing(native_wheel: Path, tmp_path: Path, kind: str, needle: str) -> None:
    wheel, limit, out = native_wheel, "300KB", tmp_path / "out"
    if kind == "not-a-zip":
        wheel = tmp_path / native_wheel.name
        wheel.write_text("no")
    elif kind == "bad-limit":
        limit = "lots"
    elif kind == "same-dir":
        wheel = tmp_path / "same" / native_wheel.name
        wheel.parent.mkdir()
        shutil.copy(native_wheel, wheel)
        out = wheel.parent
    elif kind == "bad-name":
        wheel = tmp_path / "demo.whl"
        shutil.copy(native_wheel, wheel)
    elif kind == "hash-mismatch":  # the same wheel with one library's bytes changed after RECORD was written
        entries = [(n, d[:-1] + bytes([d[-1] ^ 1]) if n.endswith("libbig2.so") else d, m)
                   for n, d, m in wheel_entries(native_wheel)]
        wheel = raw_zip(tmp_path / "bad" / native_wheel.name, entries)
    before = set(out.iterdir()) if out.exists() else set()
    r = run_stage("ci.split", wheel, "--limit", limit, "-w", out)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert (set(out.iterdir()) if out.exists() else set()) == before
    if kind == "hash-mismatch":
        r = run_stage("ci.split", wheel, "--limit", limit, "--no-verify", "-w", out)
        assert r.returncode == 0, r.stderr


def _renamed_version(wheel: Path, old: str, new: str, dest: Path) -> Path:
    """The wheel with its version spelled `new` in the file name and .dist-info (RECORD rewritten with
    csv, so any characters survive)."""
    entries = [(n.replace(f"-{old}.dist-info/", f"-{new}.dist-info/"), d, m) for n, d, m in wheel_entries(wheel)]
    entries = _rerecorded(entries)
    return raw_zip(dest / wheel.name.replace(f"-{old}-", f"-{new}-"), entries)


def test_a_version_that_is_not_pep440_is_refused_before_anything_is_written(native_wheel: Path,
                                                                             tmp_path: Path) -> None:
    """The file name's version went into the companion's generated __init__.py: a crafted one ran code
    on import. Now it is validated (PEP 440) when the name is parsed: one line, exit 2, nothing written."""
    version = '1.0+cpu"""+__import__("os").system("touch pwned")+"""'
    wheel = _renamed_version(native_wheel, "1.0+cpu", version, tmp_path / "in")
    refused_split(wheel, "300KB", tmp_path / "out", "not a PEP 440 version")


def test_companion_init_is_a_literal_whatever_its_text() -> None:
    """Text from the input reaches generated Python only through repr()."""
    import ast

    from wheelci.split import _companion_init
    src = _companion_init('x"""; import os; """', "1.0\\'\n", "demo/_p.py").decode()
    (node,) = ast.parse(src).body
    assert isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    assert node.value.value == 'Shared libraries split off x"""; import os; """ 1.0\\\'\n by wheelci split; loaded by demo/_p.py.'


def _with_member(wheel: Path, name: str, data: bytes, dest: Path) -> Path:
    """The wheel with member `name` holding `data`, RECORD rewritten to match (a valid wheel)."""
    entries = [(n, data if n == name else d, m) for n, d, m in wheel_entries(wheel)]
    entries = _rerecorded(entries)
    return raw_zip(dest / wheel.name, entries)


@pytest.mark.parametrize("member,size,cap", [("demo/__init__.py", 100 << 20, "32 MiB"),
                                              ("demo-1.0+cpu.dist-info/WHEEL", 17 << 20, "16 MiB")])
def test_a_deflate_bomb_is_refused_by_its_size_cap(native_wheel: Path, tmp_path: Path, member: str, size: int,
                                                   cap: str) -> None:
    """A tiny wheel whose __init__.py or WHEEL inflates to far more than any real one: refused from
    the size the zip directory gives, before it is read (it was read whole, whatever its size)."""
    data = next(d for n, d, _ in wheel_entries(native_wheel) if n == member)
    wheel = _with_member(native_wheel, member, data + b"#" * (size - len(data)), tmp_path / "in")
    assert wheel.stat().st_size < native_wheel.stat().st_size + (size >> 9)  # it stays small on disk
    refused_split(wheel, "300KB", tmp_path / "out", f"{member} is {size} bytes uncompressed, over the {cap}")


def test_a_preload_dep_our_reader_refuses_is_refused(native_wheel: Path, tmp_path: Path) -> None:
    """--preload-deps wheels are read by ci.wheel.zipread like the input: a duplicate member (zipfile reads
    it, pip would install one of the two) is one line, exit 2, and nothing written."""
    so = next(d for n, d, _ in wheel_entries(native_wheel) if n == "demo/lib/libbase.so")
    dep = build_wheel(tmp_path / "dep", name="extdep", tag="py3-none-linux_x86_64",
                      files={"extdep/lib/libext.so": so})
    dup = raw_zip(tmp_path / "dup" / dep.name, wheel_entries(dep) + [("extdep/lib/libext.so", so, 0o100644)])
    refused_split(native_wheel, "300KB", tmp_path / "out", "duplicate member in wheel: extdep/lib/libext.so", "--preload-deps", dup)


TOOL = ("#include <stdio.h>\nint front(void); int big1(void);\n"
        "int main(void) { printf(\"%d\\n\", front() + 0 * big1()); return 0; }\n")


def test_executables_needing_a_moved_library_still_run(native_wheel: Path, tmp_path: Path) -> None:
    """demo/bin holds a PIE (ET_DYN with an interpreter, RUNPATH) and a non-PIE (ET_EXEC, DT_RPATH)
    that NEED the moved libbig* themselves (the executable's own path finds its direct dependencies,
    not libfront's): both get the companions' directories and run from one site-packages; a shell
    script with the execute bit is left alone."""
    from wheelci.native.elf import read_dynamic_path

    files = {n: d for n, d, _ in wheel_entries(native_wheel) if not n.startswith("demo-")}
    lib = tmp_path / "lib"
    lib.mkdir()
    for n in files:
        if n.endswith(".so"):
            (lib / n.rsplit("/", 1)[1]).write_bytes(files[n])
    (tmp_path / "tool.c").write_text(TOOL)
    for exe, flags in (("tool_pie", ["-pie", "-fPIE", "-Wl,--enable-new-dtags"]),
                       ("tool_exec", ["-no-pie", "-Wl,--disable-new-dtags"])):
        _proc.run(["gcc", *flags, "-o", str(tmp_path / exe), str(tmp_path / "tool.c"), f"-L{lib}",
                   "-Wl,--no-as-needed", "-lbig1", "-lbig2", "-lbig3", "-lfront", "-Wl,-rpath,$ORIGIN/../lib"],
                  check=True, capture_output=True)
        files[f"demo/bin/{exe}"] = (tmp_path / exe).read_bytes()
    files["demo/bin/tool.sh"] = b"#!/bin/sh\necho 63\n"
    wheel = build_wheel(tmp_path / "dist", version="1.0+cpu", files=files, tag="py3-none-linux_x86_64",
                        modes={n: 0o755 for n in files if n.endswith(".so") or "/bin/" in n})
    out = tmp_path / "out"
    r = run_stage("ci.split", wheel, "--limit", "300KB", "-w", out)
    assert r.returncode == 0, r.stderr
    paths = sorted(out.glob("*.whl"))
    assert len(paths) == 3
    assert read_members(paths[0])["demo/bin/tool.sh"] == files["demo/bin/tool.sh"]
    site = tmp_path / "site"
    for p in paths:
        pip_target(p, site)
    for tool in ("tool_pie", "tool_exec"):
        r = _proc.run([str(site / "demo/bin" / tool)], capture_output=True, text=True,
                      env={"PATH": "/usr/bin:/bin"}, cwd="/")
        assert r.returncode == 0 and r.stdout.strip() == "63", (tool, r.stderr)
    pie, exe = read_dynamic_path(site / "demo/bin/tool_pie"), read_dynamic_path(site / "demo/bin/tool_exec")
    assert pie.runpath[0] == exe.rpath[0] == "$ORIGIN/../lib" and not pie.rpath and not exe.runpath
    assert {"$ORIGIN/../../demo_libs/lib", "$ORIGIN/../../demo_libs2/lib"} <= set(pie.runpath) & set(exe.rpath)


# ------------------------------------------------------------------------------ the real torch wheel

TORCH_DEPS = ["typing_extensions", "sympy", "filelock", "networkx", "jinja2", "fsspec"]
CHECK = "import torch; assert float(torch.ones(3).sum()) == 3.0; print(torch.__version__)"




EXAMPLE_OP = ("import torch, {pkg} as m; x = torch.randn(3, 4, dtype=torch.float64);"
              "print((m.scaled_softmax(x, 2.0) - torch.softmax(x * 2.0, -1)).abs().max().item() < 1e-12)")


def test_torch_cpu_split_at_120mb_imports_in_both_layouts(torch_cpu_wheel: Path, tmp_path: Path, cpu_build) -> None:
    """The acceptance case, and the example op wheel (built against the unsplit torch) on top of it."""
    example = cpu_build.wheel.name.split("-")[0]
    limit = 120 * 10**6
    out = tmp_path / "out"
    r = run_stage("ci.split", torch_cpu_wheel, "--limit", "120MB", "-w", out)
    assert r.returncode == 0, r.stderr
    paths = sorted(out.glob("*.whl"))
    assert len(paths) >= 2 and all(p.stat().st_size < limit for p in paths), [
        (p.name, p.stat().st_size) for p in paths]
    with zipfile.ZipFile(next(p for p in paths if p.name.startswith("torch-"))) as z:
        assert z.testzip() is None

    deps = tmp_path / "deps"  # torch's pure-Python dependencies, shared by both layouts
    _proc.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "--target", str(deps), *TORCH_DEPS], check=True, capture_output=True)

    # (a) all into one site-packages (a fresh venv; pip resolves the companion from the output dir)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    vpy = env_dir / "bin" / "python"
    site = next((env_dir / "lib").glob("python*/site-packages"))
    for p in [*paths, cpu_build.wheel]:
        pip_target(p, site)
    r = _proc.run([str(vpy), "-c", CHECK], capture_output=True, text=True, cwd="/",
                  env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(deps)})
    assert r.returncode == 0 and r.stdout.strip() == "2.13.0+cpu", r.stderr[-2000:]
    r = _proc.run([str(vpy), "-c", EXAMPLE_OP.format(pkg=example)], capture_output=True, text=True, cwd="/",
                  env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(deps)})
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr[-2000:]

    # (b) each wheel in its own directory on PYTHONPATH (the Bazel layout)
    dirs = []
    for p in paths:
        d = tmp_path / "bazel" / p.name.split("-")[0]
        pip_target(p, d)
        dirs.append(d)
    r = run_py(CHECK, dirs + [deps])
    assert r.returncode == 0 and r.stdout.strip() == "2.13.0+cpu", r.stderr[-2000:]
    pip_target(cpu_build.wheel, tmp_path / "bazel" / example)
    r = run_py(EXAMPLE_OP.format(pkg=example), [tmp_path / "bazel" / example, *dirs, deps])
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr[-2000:]


# --- a real wheel nobody here made: pillow, with its bundled libraries ------------------------------------

PILLOW = "13.0.0"  # cp311 manylinux_2_27/2_28: 7.1 MB, eight extension modules, 18 libraries in pillow.libs


@pytest.fixture(scope="module")
def pillow() -> Path:
    from tests._elfbuild import cached_wheel

    return cached_wheel("pillow", PILLOW)


PIL_CHECK = ("from PIL import Image, ImageFont, features; im = Image.new('RGB', (8, 8), 'red');"
             "ImageFont.load_default(size=12).getbbox('x');"
             "print(Image.__file__.split('/')[-3], im.getpixel((0, 0)), features.check('freetype2'))")


@pytest.mark.network
@pytest.mark.parametrize("limit", ["4MB", "3MB"])
def test_pillow_split_keeps_its_extension_modules_and_imports_in_both_layouts(pillow: Path, tmp_path: Path,
                                                                             limit: str) -> None:
    """Before: `--limit 4MB` moved PIL/_imaging.cpython-311-...so into pillow_libs, exited 0, and
    `from PIL import Image` failed. An extension module stays; libfreetype and libharfbuzz, which need
    each other, move together; and the outputs import in one site directory and one directory per wheel."""
    out = tmp_path / "out"
    r = run_stage("ci.split", pillow, "--limit", limit, "-w", out)
    assert r.returncode == 0, r.stderr
    paths = sorted(out.glob("*.whl"))
    assert len(paths) >= 2 and all(p.stat().st_size <= int(float(limit[:-2]) * 10**6) for p in paths)
    members = [read_members(p) for p in paths]
    assert sum(n.startswith("PIL/_") and n.endswith(".so") for n in members[0]) == 8
    assert not any(n.startswith("PIL/") or "/PIL/" in n for m in members[1:] for n in m if n.endswith(".so"))
    if limit == "3MB":  # _imaging would have been next in size: kept, and said so
        assert "kept PIL/_imaging.cpython-311-x86_64-linux-gnu.so in pillow: a Python extension module" in r.stderr
    pair = [i for i, m in enumerate(members) if any("libfreetype" in n or "libharfbuzz" in n for n in m)]
    assert len(pair) == 1, pair  # both in one wheel, wherever that is
    site = tmp_path / "site"
    dirs = [tmp_path / "per-wheel" / p.name.split("-")[0] for p in paths]
    for p, d in zip(paths, dirs):
        pip_target(p, site)
        pip_target(p, d)
    for where, top in (([site], "site"), (dirs, "pillow")):
        r = run_py(PIL_CHECK, where)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == [top, "(255,", "0,", "0)", "True"], r.stdout


def test_split_replaces_only_its_own_outputs_and_a_rerun_leaves_no_stale_companion(native_wheel: Path,
                                                                                  tmp_path: Path) -> None:
    """-w holding a file of the same name that ci.split did not write: refused, untouched. A rerun with a
    higher limit writes the unsplit wheel and removes the companions of the earlier run (twine upload
    out/* would publish them); a rerun that fails leaves the earlier outputs as they were."""
    out = tmp_path / "out"
    out.mkdir()
    foreign = out / "demo_libs-1.0+cpu-py3-none-linux_x86_64.whl"
    foreign.write_text("a user's file")
    r = run_stage("ci.split", native_wheel, "--limit", "300KB", "-w", out)
    assert r.returncode == 2 and "which python -m ci.split did not write" in r.stderr, r.stderr
    assert foreign.read_text() == "a user's file" and sorted(p.name for p in out.iterdir()) == [foreign.name]
    foreign.unlink()
    assert run_stage("ci.split", native_wheel, "--limit", "300KB", "-w", out).returncode == 0
    first = {p.name: p.read_bytes() for p in out.glob("*.whl")}
    assert len(first) == 3
    r = run_stage("ci.split", native_wheel, "--limit", "1KB", "-w", out)  # cannot fit: refused
    assert r.returncode != 0
    assert {p.name: p.read_bytes() for p in out.glob("*.whl")} == first
    r = run_stage("ci.split", native_wheel, "--limit", "100MB", "-w", out)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.glob("*.whl")) == [native_wheel.name]


def test_the_builds_split_gives_every_wheel_a_true_sbom(native_wheel: Path, tmp_path: Path) -> None:
    """The build's sbom step, then its check step splitting the wheel at 300 kB: a companion carried no SBOM
    and the main wheel kept the one written before the split (naming a content it no longer has). Now each
    wheel's SBOM is valid and listed in RECORD; the main wheel's is made again for what it holds and names
    its companions; a companion's lists the files it holds, by hash, and refers to the main wheel's SBOM."""
    import dataclasses
    import hashlib
    import json

    from wheelci import build, sbom
    from wheelci.config.options import Options
    from wheelci.compile.hostenv import BuildEnv
    from wheelci.plan import Request, make_plan
    from wheelci.report import BuildReport
    from tests.test_sbom import _listed_sboms, components, props

    root = Path(__file__).resolve().parent.parent
    plan = make_plan(Request(cuda=None, torch=None, engine="host"), project_dir=root)
    plan = dataclasses.replace(plan, run=dataclasses.replace(plan.run, limit="300KB", source_date_epoch=1_700_000_000))
    site = tmp_path / "site"
    site.mkdir()
    b = build.Build(options=Options(), plan=plan, project_dir=tmp_path, out_dir=tmp_path / "w")
    b.work, b.env, b.wheels = tmp_path / "work", BuildEnv(tmp_path, tmp_path / "python", site, "2.13.0+cpu", None, []), \
        [native_wheel]
    b.report = BuildReport(plan={})
    build.sbom_step(b)
    (before,) = [json.loads(zipfile.ZipFile(w).read(f"demo-1.0+cpu.dist-info/sboms/{sbom.SBOM_NAME}")) for w in b.wheels]
    build.check_step(b)
    assert [role for _, role in b.final] == ["main", "companion", "companion"]
    docs = [_listed_sboms(w)[sbom.SBOM_NAME] for w, _ in b.final]  # each valid against the schema
    assert all(w.stat().st_size <= 300_000 for w, _ in b.final)
    main, companions = docs[0], docs[1:]
    assert main["serialNumber"] != before["serialNumber"]  # the main wheel's content changed
    named = {(c["name"], c["version"]) for r, c in components(main).items() if r.startswith("companion:")}
    assert named == {("demo-libs", "1.0+cpu"), ("demo-libs2", "1.0+cpu")}
    for (wheel, _), doc in zip(b.final[1:], companions):
        with zipfile.ZipFile(wheel) as zf:
            held = {n: hashlib.sha256(zf.read(n)).hexdigest() for n in zf.namelist() if ".dist-info/" not in n}
        project = doc["metadata"]["component"]
        assert (project["name"], project["version"]) == (wheel.name.split("-")[0].replace("_", "-"), "1.0+cpu")
        files = {c["name"]: c["hashes"][0]["content"] for r, c in components(doc).items() if r.startswith("file:")}
        assert files == held and any(n.endswith(".so") for n in files)
        parent = components(doc)["parent"]
        assert (parent["name"], parent["version"]) == ("demo", "1.0+cpu")
        assert parent["externalReferences"] == [{"type": "bom", "url": f"urn:cdx:{main['serialNumber'][9:]}/1",
                                                 "comment": "the SBOM of the wheel these files were split off"}]
        assert props(parent)["wheelci:role"].startswith("split off")
