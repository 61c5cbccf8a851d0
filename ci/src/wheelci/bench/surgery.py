"""Benchmark wheel surgery against `wheel unpack` + `wheel pack`: `python -m ci.bench surgery`.

On the torch 2.13.0 CPU wheel (fetched with pip and cached unless --wheel is given), in one run:

- baseline: `wheel unpack`, `patch -p1` one file, rename the .dist-info for a local version and edit
  METADATA, `wheel pack` (what a user does without ci.patch);
- `python -m ci.patch` with the same diff and `--local-version`, with and without RECORD verification;
- `python -m ci.check` (central directory only);
- `python -m ci.split` at --split-limit (default 120MB);
- the floor of verification: inflate and sha256 every member of the same wheel, with the same inflate
  library and every usable core, nothing written (stdlib zipfile finds the members, so the floor does not
  share our reader's code).

Every step runs as a subprocess, like the user would run it, so interpreter start-up is included on
both sides. Prints seconds per step, the ratio of the baseline to each step, and the two targets: the
verifying ci.patch within 1.25x of the floor, --no-verify at least 30x faster than the baseline.
"""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from wheelci.util.cache import cache_dir
from wheelci.util.invocation import command
from wheelci.util.output import emit_json
from wheelci.wheel.names import WheelName
from wheelci.wheel.zipformat import inflate_lib as _inflate_lib
from wheelci.wheel.zipread import WheelArchive

TORCH = "torch==2.13.0"
# the steps measured, by the tool's name (the same rows and --json keys however the bench was run)
VERIFYING, NOT_VERIFYING = "wheelci patch (verify RECORD, default)", "wheelci patch --no-verify"
CACHE = cache_dir("bench")
PATCHED_MEMBER = "torch/version.py"
LABEL = "bench"


def fetch_wheel() -> Path:
    """The torch CPU wheel from pip (its config may point at a local copy), cached between runs."""
    found = sorted(CACHE.glob("torch-2.13.0*.whl"))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", TORCH, "-d", str(CACHE)],
                       check=True)
        found = sorted(CACHE.glob("torch-2.13.0*.whl"))
    if not found:
        raise SystemExit(f"bench: pip download {TORCH} gave no wheel in {CACHE}")
    return found[0]


def make_patch(wheel: Path, work: Path) -> Path:
    """A one-line change to one small file, as a -p1 unified diff."""

    with WheelArchive.open(wheel) as wa:
        member = PATCHED_MEMBER if PATCHED_MEMBER in wa else next(
            m.name for m in wa.files if m.name.endswith("/__init__.py"))
        old = wa.read(member).decode()
    new = old + "# patched by wheelci bench surgery\n"
    patch = work / "one.patch"
    patch.write_text("".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                  f"a/{member}", f"b/{member}")))
    return patch


def floor(wheel: str) -> None:
    """Inflate + sha256 of every member, biggest first on every usable core; the biggest members
    inflate in one thread and hash in another. No RECORD parsing, no output: what verification cannot
    go below."""
    import hashlib
    import queue
    import struct
    import zipfile
    from concurrent.futures import ThreadPoolExecutor


    with zipfile.ZipFile(wheel) as z:
        infos = sorted((i for i in z.infolist() if not i.is_dir()), key=lambda i: -i.file_size)
    fd = os.open(wheel, os.O_RDONLY)

    def digest(info: zipfile.ZipInfo) -> bytes:
        nlen, xlen = struct.unpack("<HH", os.pread(fd, 4, info.header_offset + 26))
        pos = info.header_offset + 30 + nlen + xlen
        end = pos + info.compress_size
        h = hashlib.sha256()
        d = _inflate_lib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
        if info.file_size < 32 << 20:  # small: one read, one inflate, one hash
            raw = os.pread(fd, end - pos, pos)
            h.update(d.decompress(raw) + d.flush() if d else raw)
            return h.digest()
        chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=8)

        def hash_chunks() -> None:
            for c in iter(chunks.get, None):
                h.update(c)

        hasher = threading.Thread(target=hash_chunks)
        hasher.start()
        while pos < end:
            raw = os.pread(fd, min(4 << 20, end - pos), pos)
            pos += len(raw)
            chunks.put(d.decompress(raw) if d else raw)
        chunks.put(d.flush() if d else b"")
        chunks.put(None)
        hasher.join()
        return h.digest()

    with ThreadPoolExecutor(max_workers=len(os.sched_getaffinity(0))) as pool:
        list(pool.map(digest, infos))
    os.close(fd)


def timed(cmd: list[str], cwd: Path | None = None) -> float:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    if r.returncode not in (0, 1):  # ci.check exits 1 on an over-limit wheel: still a measurement
        raise SystemExit(f"bench: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return elapsed


def baseline(wheel: Path, patch: Path, work: Path) -> float:
    """unpack + patch -p1 + local version by hand + pack."""

    name = WheelName.parse(wheel.name)
    unpack = work / "unpacked"
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", str(unpack), str(wheel)], check=True,
                   capture_output=True)
    root = next(unpack.iterdir())
    subprocess.run(["patch", "-p1", "-s", "-i", str(patch)], cwd=root, check=True)
    new_version = f"{name.version}.{LABEL}" if "+" in name.version else f"{name.version}+{LABEL}"
    info = root / name.dist_info
    meta = info / "METADATA"
    meta.write_text(meta.read_text().replace(f"Version: {name.version}\n", f"Version: {new_version}\n", 1))
    info.rename(root / name.with_(version=new_version).dist_info)
    out = work / "baseline-out"
    out.mkdir()
    subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", str(out), str(root)], check=True,
                   capture_output=True)
    elapsed = time.perf_counter() - t
    shutil.rmtree(unpack)
    return elapsed


def run(*, wheel: Path | None = None, split_limit: str = "120MB", skip_split: bool = False,
        as_json: bool = False) -> int:
    """Each step's seconds on `wheel` (default: the torch 2.13.0 CPU wheel via pip), the split step unless
    `skip_split`; with `as_json` the timings as one JSON document."""
    wheel = wheel or fetch_wheel()
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-surgery-") as tmp:
        work = Path(tmp)
        patch = make_patch(wheel, work)
        times: dict[str, float] = {}
        times["baseline: wheel unpack + patch + wheel pack"] = baseline(wheel, patch, work)
        times[VERIFYING] = timed(
            [py, "-m", "wheelci.patch", str(wheel), "--patch", str(patch), "--local-version", LABEL, "-w",
             str(work / "patched-verify")])
        times[NOT_VERIFYING] = timed(
            [py, "-m", "wheelci.patch", str(wheel), "--patch", str(patch), "--local-version", LABEL, "--no-verify",
             "-w", str(work / "patched")])
        times["wheelci check"] = timed([py, "-m", "wheelci.check", str(wheel), "--limit", "pypi"])
        times["floor: inflate + sha256 of every member, all cores"] = timed(
            [py, "-c", f"from wheelci.bench.surgery import floor; floor({str(wheel)!r})"])
        if not skip_split:
            times[f"wheelci split --limit {split_limit}"] = timed(
                [py, "-m", "wheelci.split", str(wheel), "--limit", split_limit, "-w", str(work / "split")])
    base = next(iter(times.values()))
    rows = [{"step": k, "seconds": round(v, 3), "speedup": round(base / v, 1)} for k, v in times.items()]
    if as_json:
        emit_json({"wheel": wheel.name, "size": wheel.stat().st_size, "results": rows,
                   "verify_over_floor": round(times[VERIFYING]
                                              / times["floor: inflate + sha256 of every member, all cores"], 2),
                   "no_verify_speedup": round(base / times[NOT_VERIFYING], 1)})
        return 0
    print(f"wheel: {wheel.name} ({wheel.stat().st_size / 2**20:.1f} MiB), {len(os.sched_getaffinity(0))} CPUs usable")
    for r in rows:
        print(f"{r['seconds']:9.2f} s  {r['speedup']:6.1f}x  {r['step']}")
    print("(speedup = baseline seconds / step seconds; the baseline recompresses every member)")
    verify = times[VERIFYING] / times["floor: inflate + sha256 of every member, all cores"]
    fast = base / times[NOT_VERIFYING]
    print(f"wheelci patch (verify) / floor: {verify:.2f}x (target <= 1.25x: {'met' if verify <= 1.25 else 'MISSED'})")
    print(f"baseline / wheelci patch --no-verify: {fast:.1f}x (target >= 30x: {'met' if fast >= 30 else 'MISSED'})")
    return 0

