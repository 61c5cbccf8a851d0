"""Builders of small test wheels, written with the stdlib's zipfile (independent of ci.wheel.zipread and zipwrite).

`build_wheel` makes a valid wheel (RECORD last, real hashes); `raw_zip` writes arbitrary entries for
the malformed cases (symlinks, duplicates, unsafe names). Other test modules may import these.
"""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path
from typing import Mapping
from tests import _proc

def age_past_racy(*paths: Path) -> None:
    """Wait until every file under `paths` was last changed more than ci.index's racy window ago, so an
    index run trusts the hashes it records and the next run reads nothing: a test sets up the file ages
    it relies on instead of hoping the machine was slow enough."""
    from wheelci.publish.indexcache import RACY_NS

    newest = max((f.lstat().st_ctime_ns for root in paths for f in (root, *root.rglob("*"))), default=0)
    delay_ns = newest + RACY_NS + 10_000_000 - time.time_ns()  # 10 ms: the file clock's coarse tick
    if delay_ns > 0:
        time.sleep(delay_ns / 1e9)


DEFAULT_FILES = {"demo/__init__.py": "VERSION = '1.0'\n\n\ndef hello():\n    return 'hello'\n"}


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def metadata_text(name: str, version: str, requires: tuple[str, ...] = (), body: str = "",
                  headers: str = "") -> str:
    """`headers`: more header lines, as written (folded ones included)."""
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", "Summary: a test wheel"]
    lines += [f"Requires-Dist: {r}" for r in requires] + headers.splitlines()
    return "\n".join(lines) + "\n" + (f"\n{body}" if body else "")


def build_wheel(dest_dir: Path, name: str = "demo", version: str = "1.0",
                files: Mapping[str, bytes | str] | None = None, *, tag: str = "py3-none-any",
                requires: tuple[str, ...] = (), modes: Mapping[str, int] | None = None,
                bad_hash: str | None = None, compression: int = zipfile.ZIP_DEFLATED,
                body: str = "", headers: str = "") -> Path:
    """A valid wheel (unless bad_hash names a file whose RECORD hash is then wrong)."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    content = {k: v.encode() if isinstance(v, str) else v for k, v in (files or DEFAULT_FILES).items()}
    content[f"{info}/METADATA"] = metadata_text(name, version, requires, body, headers).encode()
    root = "true" if tag.endswith("-any") else "false"
    content[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: {root}\n"
                                f"Tag: {tag}\n").encode()
    rows = []
    for path, data in content.items():
        digest = record_hash(data + b"tampered" if path == bad_hash else data)
        rows.append(f"{path},{digest},{len(data)}")
    rows.append(f"{info}/RECORD,,")
    content[f"{info}/RECORD"] = ("\n".join(rows) + "\n").encode()
    out = Path(dest_dir) / f"{dist}-{version}-{tag}.whl"
    out.parent.mkdir(parents=True, exist_ok=True)
    modes = modes or {}
    with zipfile.ZipFile(out, "w", compression) as z:
        for path, data in content.items():
            zi = zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0))
            zi.compress_type = compression
            zi.external_attr = (0o100000 | modes.get(path, 0o644)) << 16
            z.writestr(zi, data)
    return out


def raw_zip(path: Path, entries: list[tuple[str, bytes, int]]) -> Path:
    """A zip of (name, data, st_mode) entries written as given: duplicates and odd names included."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about duplicate names; that is the point
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data, mode in entries:
                zi = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
                zi.compress_type = zipfile.ZIP_DEFLATED
                zi.external_attr = mode << 16
                z.writestr(zi, data)
    return path


def wheel_entries(wheel: Path) -> list[tuple[str, bytes, int]]:
    """A wheel's entries as raw_zip takes them (to rebuild it with a defect)."""
    with zipfile.ZipFile(wheel) as z:
        return [(i.filename, z.read(i), i.external_attr >> 16) for i in z.infolist()]


def pip_check_install(wheel: Path, target: Path) -> subprocess.CompletedProcess[str]:
    """pip install --no-deps --target (pip reads RECORD but does not re-hash: see assert_valid_record)."""
    return _proc.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                      "--disable-pip-version-check", "--target", str(target), str(wheel)],
                     capture_output=True, text=True)


def run_stage(module: str, *args: str | Path, env: dict[str, str] | None = None,
              cwd: Path | None = None, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m <module> ARGS` the way a user would (the project root on sys.path)."""
    import os
    root = Path(__file__).resolve().parent.parent
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "ci" / "src"), full_env.get("PYTHONPATH", "")])
    return _proc.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                     env=full_env, cwd=cwd or root, timeout=timeout)


def signal_mid_write(module: str, *args: str | Path, out: Path, signum: int, env: dict[str, str] | None = None,
                     timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run a stage as run_stage does and send it `signum` once a `.part` file shows in `out` or below (it is
    writing an output). Waits are bounded by `timeout`; nothing here times the stage itself."""
    import os
    import time
    root = Path(__file__).resolve().parent.parent
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "ci" / "src"), full_env.get("PYTHONPATH", "")])
    import functools
    import signal
    # The stage keeps a signal ignored that it inherits ignored (nohup): give it the default
    # disposition, whatever the suite's caller set (CI may run under nohup, ignoring SIGHUP).
    proc = subprocess.Popen([sys.executable, "-m", module, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full_env, cwd=root,
                            preexec_fn=functools.partial(signal.signal, signum, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + timeout
        while not (out.is_dir() and any(p.name.endswith(".part") for p in out.rglob("*.part"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{module} wrote no .part file in {out} to interrupt: "
                                     f"{proc.communicate()[1] if proc.poll() is not None else 'timed out'}")
            time.sleep(0.001)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def assert_valid_record(path: Path) -> dict[str, bytes]:
    """Every file hashed and sized in RECORD, RECORD last, .dist-info after everything else.

    Checked with zipfile and hashlib, independently of ci.wheel.zipread. Returns the members' contents.
    """
    import csv

    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None
        names = z.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/RECORD"))
        assert names[-1] == f"{info}/RECORD", names[-5:]
        first_info = min(i for i, n in enumerate(names) if n.startswith(info + "/"))
        assert all(n.startswith(info + "/") for n in names[first_info:])
        rows = {r[0]: r for r in csv.reader(io.StringIO(z.read(names[-1]).decode())) if r}
        data = {n: z.read(n) for n in names}
    assert set(rows) == {n for n in names if not n.endswith("/")}
    for name, (_, digest, size) in rows.items():
        if name != names[-1]:
            assert digest == record_hash(data[name]), name
            assert int(size) == len(data[name]), name
    return data


def read_members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def zip_bytes(entries: Mapping[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for k, v in entries.items():
            z.writestr(k, v)
    return buf.getvalue()


# What each malformed wheel must be refused with (a fragment of the one error line).
BAD_WHEELS = {
    "not-a-zip": "not a zip file",
    "truncated": "truncated zip",
    "dotdot": "unsafe member name",
    "absolute": "unsafe member name",
    "symlink": "symlink member",
    "duplicate": "duplicate member",
    "no-dist-info": "no .dist-info",
    "bad-filename": "build tag must start with a digit",
    "bad-name": "invalid wheel file name",
    "missing": "no such wheel",
    "non-utf8-name": "not valid UTF-8 though the zip says it is",
    "non-utf8-metadata": "METADATA is not valid UTF-8",
    "non-utf8-record": "RECORD is not valid UTF-8",
    "huge-record-field": "malformed RECORD",
    "alias-dot": "aliased through './' or '//'",
    "alias-slash": "aliased through './' or '//'",
    "metadata-bomb": "over the 16 MiB this tool reads",
    "two-dist-info": "2 .dist-info directories (demo-1.0.dist-info, extra-1.0.dist-info)",
}


def _replace_in_entries(entries: list[tuple[str, bytes, int]], suffix: str, data: bytes) -> list[tuple[str, bytes, int]]:
    return [(n, data if n.endswith(suffix) else d, m) for n, d, m in entries]


def bad_wheel(tmp_path: Path, kind: str, files: Mapping[str, bytes | str]) -> Path:
    """A malformed variant (a key of BAD_WHEELS) of a valid wheel holding `files` (with demo/core.py)."""
    good = build_wheel(tmp_path / "good", files=files)
    entries = wheel_entries(good)
    p = tmp_path / "bad" / good.name
    p.parent.mkdir(parents=True, exist_ok=True)
    unsafe = {"dotdot": "demo/../../evil.py", "absolute": "/etc/evil.py"}
    if kind == "not-a-zip":
        p.write_bytes(b"this is not a zip file\n" * 10)
    elif kind == "truncated":
        p.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif kind in unsafe:
        raw_zip(p, entries + [(unsafe[kind], b"x", 0o100644)])
    elif kind == "symlink":
        raw_zip(p, entries + [("demo/link", b"core.py", 0o120777)])
    elif kind == "duplicate":
        raw_zip(p, entries + [("demo/core.py", b"again", 0o100644)])
    elif kind == "no-dist-info":
        raw_zip(p, [e for e in entries if ".dist-info/" not in e[0]])
    elif kind == "bad-filename":
        p = raw_zip(p.with_name("demo-1.0-x-y-py3-none-any.whl"), entries)  # 6 parts would be a PEP 825 variant
    elif kind == "bad-name":
        p = raw_zip(p.with_name("demo-1.0.whl"), entries)
    elif kind == "missing":
        p = p.with_name("absent-1.0-py3-none-any.whl")
    elif kind == "non-utf8-name":  # flag 0x800 set by zipfile for the non-ASCII name, bytes then broken
        raw_zip(p, entries + [("demo/caf\u00e9.py", b"x = 1\n", 0o100644)])
        p.write_bytes(p.read_bytes().replace("caf\u00e9".encode(), b"caf\xff\xfe"))
    elif kind == "non-utf8-metadata":
        raw_zip(p, _replace_in_entries(entries, ".dist-info/METADATA",
                                       metadata_text("demo", "1.0").encode() + b"\nCaf\xe9 latin-1 text\n"))
    elif kind == "non-utf8-record":
        record = next(d for n, d, _ in entries if n.endswith(".dist-info/RECORD"))
        raw_zip(p, _replace_in_entries(entries, ".dist-info/RECORD", record + b"demo/caf\xe9.py,,\n"))
    elif kind == "huge-record-field":
        record = next(d for n, d, _ in entries if n.endswith(".dist-info/RECORD"))
        raw_zip(p, _replace_in_entries(entries, ".dist-info/RECORD", record + b"demo/" + b"x" * 200_000 + b".py,,\n"))
    elif kind == "alias-dot":
        raw_zip(p, entries + [("demo/./core.py", b"print('the other copy')\n", 0o100644)])
    elif kind == "alias-slash":
        raw_zip(p, entries + [("demo//core.py", b"print('the other copy')\n", 0o100644)])
    elif kind == "metadata-bomb":  # 17 MiB that deflate to ~17 KB
        raw_zip(p, _replace_in_entries(entries, ".dist-info/METADATA",
                                       metadata_text("demo", "1.0", body="A" * (17 << 20)).encode()))
    elif kind == "two-dist-info":  # pip and uv refuse it: which one describes the wheel is anyone's guess
        raw_zip(p, entries + [("extra-1.0.dist-info/METADATA", metadata_text("extra", "1.0").encode(), 0o100644)])
    else:
        raise ValueError(kind)
    return p


def zeros_wheel(dest_dir: Path, size: int) -> Path:
    """demo 1.0 with demo/zeros.bin: `size` zero bytes (a multiple of 1 MiB, under 4 GiB) that take a
    stage real time to inflate and hash, yet ~size/1000 on disk and quick to build (one full-flushed
    deflate block repeated): a wheel to catch a stage mid-run with."""
    import struct
    import zlib

    chunk, n = 1 << 20, size >> 20
    assert size == n * chunk and 0 < size < 1 << 32
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    co.compress(bytes(chunk)), co.flush(zlib.Z_FULL_FLUSH)
    block = co.compress(bytes(chunk)) + co.flush(zlib.Z_FULL_FLUSH)  # no reference before it
    stream = block * n + co.flush(zlib.Z_FINISH)
    crc, digest = 0, hashlib.sha256()
    for _ in range(n):
        crc = zlib.crc32(bytes(chunk), crc)
        digest.update(bytes(chunk))
    big = ("demo/zeros.bin", stream, crc, size, 8,
           "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode())
    info = "demo-1.0.dist-info"
    small = {"demo/__init__.py": b"VALUE = 1\n", f"{info}/METADATA": metadata_text("demo", "1.0").encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    entries = [big] + [(k, v, zlib.crc32(v), len(v), 0, record_hash(v)) for k, v in small.items()]
    record = "".join(f"{name},{h},{usize}\n" for name, _, _, usize, _, h in entries) + f"{info}/RECORD,,\n"
    entries.append((f"{info}/RECORD", record.encode(), zlib.crc32(record.encode()), len(record), 0, ""))
    out = Path(dest_dir) / "demo-1.0-py3-none-any.whl"
    out.parent.mkdir(parents=True, exist_ok=True)
    central, pos = b"", 0
    with open(out, "wb") as f:
        for name, data, crc, usize, method, _ in entries:
            raw = name.encode()
            head = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x5021, crc, len(data), usize,
                               len(raw), 0) + raw
            central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x0314, 20, 0, method, 0, 0x5021, crc,
                                   len(data), usize, len(raw), 0, 0, 0, 0, 0o100644 << 16, pos) + raw
            f.write(head + data)
            pos += len(head) + len(data)
        f.write(central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central),
                                      pos, 0))
    return out


# tiny_ext's setup.py compiling slowly: its build_ext prints `compiling slowly` and sleeps. The sleep is in a
# command, which the build's probe of the project (setup() answering, nothing built) never runs: a sleep at
# the top of the script kept each probe waiting its whole length before the compile began.
SLOW_SETUP = """import time
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class Slow(build_ext):
    def run(self):
        print("compiling slowly", flush=True)
        time.sleep(120)


setup(ext_modules=[Extension("tiny_ext._C", ["csrc/tiny.cpp"])], cmdclass={"build_ext": Slow})
"""


def interrupted_build(project: Path, out: Path, work: Path, signum: int, wait: float = 300.0) -> tuple[int, str]:
    """ci.build of a project whose compile prints `compiling slowly` and sleeps, sent `signum` once its log
    says so: (exit status, stderr). The signal's default disposition is restored in the child whatever the
    suite's caller set (a job started in the background by a non-interactive shell ignores SIGINT, and Python
    keeps an inherited ignore: no KeyboardInterrupt)."""
    import functools
    import os
    import signal
    import time

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "ci" / "src")])}
    proc = subprocess.Popen([sys.executable, "-m", "ci.build", str(project), "--cpu", "--engine", "host",
                             "-w", str(out), "--work-dir", str(work)], env=env, cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=functools.partial(signal.signal, signum, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + wait
        while "compiling slowly" not in ((work / "compile.log").read_text() if (work / "compile.log").exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.2)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, stderr


def without_metadata(index_dir: Path, served: Path) -> Path:
    """A copy of a static index that serves no PEP 658 metadata: the files gone, the pages announcing none."""
    import shutil

    shutil.copytree(index_dir, served)
    for meta in served.glob("*.metadata"):
        meta.unlink()
    for page in served.glob("simple/torch/index.*"):
        page.write_text(page.read_text().replace("data-core-metadata", "data-x").replace('"core-metadata"', '"x"'))
    return served
