"""ci.patch: unified diffs, local versions and Requires-Dist edits; every bad input exits 2 writing nothing."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests._wheels import (BAD_WHEELS, bad_wheel, build_wheel, pip_check_install, raw_zip, read_members,
                           record_hash, run_stage, signal_mid_write, wheel_entries, zeros_wheel)
from tests import _proc

CORE = "".join(f"line {i}\n" for i in range(1, 41))
FILES = {"demo/__init__.py": "from demo.core import *\n", "demo/core.py": CORE, "demo/bin/tool": "#!/bin/sh\n"}


def diff(path: str, old: str | None, new: str | None, context: int = 3) -> str:
    """A git-style -p1 diff made by difflib (an independent producer of unified diffs)."""
    a = "/dev/null" if old is None else f"a/{path}"
    b = "/dev/null" if new is None else f"b/{path}"
    return "".join(difflib.unified_diff((old or "").splitlines(True), (new or "").splitlines(True), a, b,
                                        n=context))


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return build_wheel(tmp_path / "in", version="2.0+cpu", files=FILES, modes={"demo/bin/tool": 0o755},
                       requires=("triton==3.1.0; platform_system == 'Linux'", "filelock", "sympy>=1.13"))


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / "patches" / name
    p.parent.mkdir(exist_ok=True)
    p.write_text(text)
    return p


def assert_nothing_written(out: Path) -> None:
    """Not even the -w directory: a refused run leaves none of the directories it made."""
    assert not out.exists(), list(out.iterdir())


def assert_bad_input(r: subprocess.CompletedProcess, out: Path, needle: str) -> None:
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert_nothing_written(out)


def test_patch_local_version_and_requires_then_pip_installs(wheel: Path, tmp_path: Path) -> None:
    new_core = CORE.replace("line 5\n", "line five\n").replace("line 30\n", "line 30\nadded\n")
    p1 = write(tmp_path, "01-core.patch", diff("demo/core.py", CORE, new_core))
    write(tmp_path, "02-new.patch", "diff --git a/demo/new.py b/demo/new.py\nnew file mode 100755\n"
          + diff("demo/new.py", None, "print('new')\n"))
    out = tmp_path / "out"
    r = run_stage("ci.patch", wheel, "--patch-dir", p1.parent, "--local-version", "abc1",
                  "--remove-requires", "triton", "--add-requires", "numpy>=2; python_version>='3.10'",
                  "-w", out, "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["version"] == "2.0+cpu.abc1"
    assert result["changed"] == ["demo/core.py"] and result["added"] == ["demo/new.py"]
    produced = Path(result["wheel"])
    assert produced.name == "demo-2.0+cpu.abc1-py3-none-any.whl" and produced.parent == out
    site = tmp_path / "site"
    inst = pip_check_install(produced, site)  # pip checks every RECORD hash
    assert inst.returncode == 0, inst.stderr
    assert (site / "demo/core.py").read_text() == new_core
    assert (site / "demo/new.py").stat().st_mode & 0o111
    meta = (site / "demo-2.0+cpu.abc1.dist-info/METADATA").read_text()
    assert "Version: 2.0+cpu.abc1" in meta and "triton" not in meta
    assert "Requires-Dist: filelock" in meta and "Requires-Dist: numpy>=2; python_version>='3.10'" in meta
    show = _proc.run([sys.executable, "-m", "pip", "show", "demo"], capture_output=True, text=True,
                     env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert "Version: 2.0+cpu.abc1" in show.stdout, show.stderr


def test_local_version_without_a_label_uses_plus(tmp_path: Path) -> None:
    w = build_wheel(tmp_path / "in", files=FILES)
    r = run_stage("ci.patch", w, "--local-version", "x.2", "-w", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).name == "demo-1.0+x.2-py3-none-any.whl"


def test_hunks_apply_at_shifted_offsets_and_delete_files(wheel: Path, tmp_path: Path) -> None:
    # a diff made against a copy with 3 extra lines on top still applies (offset), as with patch/git apply
    shifted = "a\nb\nc\n" + CORE
    p = write(tmp_path, "shift.diff", diff("demo/core.py", shifted, shifted.replace("line 20\n", "twenty\n"))
              + diff("demo/bin/tool", "#!/bin/sh\n", None))
    r = run_stage("ci.patch", wheel, "--patch", p, "-w", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    members = read_members(Path(r.stdout.strip()))
    assert members["demo/core.py"].decode() == CORE.replace("line 20\n", "twenty\n")
    assert "demo/bin/tool" not in members


def test_no_newline_at_end_of_file(tmp_path: Path) -> None:
    w = build_wheel(tmp_path / "in", files={"demo/__init__.py": "a\nb"})
    p = write(tmp_path, "eol.patch", "--- a/demo/__init__.py\n+++ b/demo/__init__.py\n@@ -1,2 +1,2 @@\n a\n-b\n"
              "\\ No newline at end of file\n+c\n")
    r = run_stage("ci.patch", w, "--patch", p, "-w", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert read_members(Path(r.stdout.strip()))["demo/__init__.py"] == b"a\nc\n"


def test_hash_mismatch_refused_unless_no_verify(tmp_path: Path) -> None:
    bad = build_wheel(tmp_path / "in", files=FILES, bad_hash="demo/__init__.py")
    out = tmp_path / "out"
    assert_bad_input(run_stage("ci.patch", bad, "--local-version", "x", "-w", out),
                     out, "RECORD hash mismatch for demo/__init__.py")
    r = run_stage("ci.patch", bad, "--local-version", "x", "--no-verify", "-w", out)
    assert r.returncode == 0, r.stderr


def test_record_size_mismatch_with_no_verify_is_bad_input(tmp_path: Path) -> None:
    """--no-verify still checks RECORD sizes against the zip: that check crashed (`dict | set`)."""
    good = build_wheel(tmp_path / "good", files=FILES)
    entries = wheel_entries(good)
    record = next(d for n, d, _ in entries if n.endswith(".dist-info/RECORD")).decode()
    size = len(CORE.encode())
    assert f"demo/core.py,{record_hash(CORE.encode())},{size}\n" in record
    record = record.replace(f",{size}\n", f",{size + 1}\n", 1)
    bad = raw_zip(tmp_path / "in" / good.name,
                  [(n, record.encode() if n.endswith("/RECORD") else d, m) for n, d, m in entries])
    out = tmp_path / "out"
    assert_bad_input(run_stage("ci.patch", bad, "--local-version", "x", "--no-verify", "-w", out),
                     out, f"RECORD size mismatch for demo/core.py: RECORD says {size + 1}, zip has {size}")


@pytest.mark.parametrize("path, mode, needle", [
    ("demo/link.py", "120000", "no symlink"),
    ("demo/suid.py", "104755", "setuid"),
    ("demo/sticky.py", "101755", "sticky"),
    ("demo/./__init__.py", "100644", "would be the same file as 'demo/__init__.py' once installed"),
    ("demo//core.py", "100644", "would be the same file as 'demo/core.py' once installed"),
])
def test_the_writer_refuses_what_the_reader_refuses(wheel: Path, tmp_path: Path, path: str, mode: str,
                                                    needle: str) -> None:
    """A diff that creates a symlink, a setuid file or an alias of a member: ci.patch wrote it, and
    its own reader (and pip) then read another wheel than the one it meant."""
    p = write(tmp_path, "01.patch", f"diff --git a/{path} b/{path}\nnew file mode {mode}\n"
              + diff(path, None, "print('x')\n"))
    out = tmp_path / "out"
    assert_bad_input(run_stage("ci.patch", wheel, "--patch", p, "-w", out), out, needle)


def test_data_dir_follows_the_version_when_spelled_like_the_dist_info(tmp_path: Path) -> None:
    """`Demo-1.0.data/` in `demo-1.0-...whl`: the .data directory kept its old name after
    --local-version, and uv installed the script as a stray directory."""
    built = build_wheel(tmp_path / "b", name="Demo", files={"demo/__init__.py": "", "Demo-1.0.data/scripts/tool": "#!python\n"})
    wheel = built.rename(built.with_name(built.name.lower()))
    out = tmp_path / "out"
    r = run_stage("ci.patch", wheel, "--local-version", "x", "-w", out)
    assert r.returncode == 0, r.stderr
    (patched,) = out.glob("*.whl")
    names = read_members(patched)
    assert "demo-1.0+x.data/scripts/tool" in names and not [n for n in names if n.startswith("Demo-1.0.data/")], names


def test_member_names_are_printed_escaped(tmp_path: Path) -> None:
    """A member name is input: its newline must not start a forged line (a `::error::` workflow
    command, an `ok`), nor its ESC a terminal sequence; every stage's error line escapes it."""
    good = build_wheel(tmp_path / "good", files=FILES)
    name = "demo/x\n::error::forged\x1b[2J.py"
    entries = wheel_entries(good)
    bad = raw_zip(tmp_path / "in" / good.name, [entries[0], (name, b"x = 1\n", 0o100644), *entries[1:]])
    for stage, args in (("ci.patch", ["--local-version", "x"]), ("ci.split", ["--limit", "pypi"])):
        out = tmp_path / stage
        r = run_stage(stage, bad, *args, "-w", out)
        assert_bad_input(r, out, "RECORD has no hash for demo/x\\n::error::forged\\x1b[2J.py")
        assert "\x1b" not in r.stderr


PATCH_BAD = sorted(k for k in BAD_WHEELS if k != "bad-name")


@pytest.mark.parametrize("kind", PATCH_BAD)
def test_bad_wheels_exit_2_and_write_nothing(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    assert_bad_input(run_stage("ci.patch", bad_wheel(tmp_path, kind, FILES), "--local-version", "x", "-w", out),
                     out, BAD_WHEELS[kind])


BAD_PATCHES = {
    "context-mismatch": ("--- a/demo/core.py\n+++ b/demo/core.py\n@@ -1,3 +1,3 @@\n line 1\n-line 2\n+two\n"
                         " line 99\n", "hunk #1 (@@ -1,3 +1,3 @@) does not apply to demo/core.py"),
    "second-hunk": (diff("demo/core.py", CORE, CORE.replace("line 2\n", "2\n"), 1)
                    + "@@ -30,1 +30,1 @@\n-not there\n+x\n", "hunk #2 (@@ -30,1 +30,1 @@) does not apply"),
    "missing-file": (diff("demo/nope.py", "a\n", "b\n"), "demo/nope.py is not in"),
    "not-a-diff": ("just some text\n", "not a unified diff"),
    "malformed-hunk": ("--- a/demo/core.py\n+++ b/demo/core.py\n@@ -1,5 +1,5 @@\n line 1\n", "malformed hunk"),
    "creates-existing": (diff("demo/core.py", None, "x\n"), "already exists"),
    "record": (diff("demo-1.0.dist-info/RECORD", "a\n", "b\n"), "RECORD is regenerated"),
}


READER_BAD = ["non-utf8-name", "non-utf8-metadata", "non-utf8-record", "huge-record-field", "alias-dot",
              "alias-slash", "metadata-bomb"]


@pytest.mark.parametrize("kind", READER_BAD)
@pytest.mark.parametrize("stage", ["ci.split", "ci.check", "ci.preload"])
def test_reader_bad_inputs_in_every_stage(tmp_path: Path, kind: str, stage: str) -> None:
    """The wheel reader's refusals reach every stage as one line, exit 2, nothing written, input kept."""
    import hashlib
    whl = bad_wheel(tmp_path, kind, FILES)
    before = hashlib.sha256(whl.read_bytes()).hexdigest()
    out = tmp_path / "out"
    args = {"ci.split": [whl, "--limit", "1KB", "-w", out], "ci.check": [whl, "--limit", "1KB"],
            "ci.preload": [whl, "--inject", whl, "-w", out]}[stage]
    r = run_stage(stage, *args)
    content_kinds = ("non-utf8-metadata", "non-utf8-record", "huge-record-field", "metadata-bomb")
    if stage in ("ci.check", "ci.split") and kind in content_kinds:
        # ci.check reads only the central directory (over 1 KB: a finding); ci.split refuses a wheel
        # it cannot split before reading any content (no libraries here).
        assert r.returncode in (1, 2) and len(r.stderr.strip().splitlines()) == 1, r.stderr
    else:
        assert_bad_input(r, out, BAD_WHEELS[kind] if stage != "ci.preload" or kind in
                         ("non-utf8-name", "alias-dot", "alias-slash") else "")
    assert "Traceback" not in r.stderr
    assert hashlib.sha256(whl.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("kind", sorted(BAD_PATCHES))
def test_patches_that_do_not_apply_exit_2_and_write_nothing(tmp_path: Path, kind: str) -> None:
    text, needle = BAD_PATCHES[kind]
    w = build_wheel(tmp_path / "in", files=FILES)
    good = write(tmp_path, "00-good.patch", diff("demo/__init__.py", FILES["demo/__init__.py"], "x = 1\n"))
    bad = write(tmp_path, "01-bad.patch", text)
    out = tmp_path / "out"
    assert_bad_input(run_stage("ci.patch", w, "--patch", good, "--patch", bad, "-w", out), out, needle)


BAD_ARGS = {
    "label": (["--local-version", "a+b"], "invalid local version label"),
    "label-newline": (["--local-version", "x\n"], "invalid local version label"),  # `$` let it through
    "requirement": (["--add-requires", "numpy >>= 2"], "invalid requirement"),
    "remove-unknown": (["--remove-requires", "nosuch"], "no Requires-Dist for nosuch"),
    "nothing": ([], "nothing to do"),
    "patch-missing": (["--patch", "/nonexistent.patch"], "no such patch file"),
    "patch-dir-empty": (["--patch-dir", "."], "no *.patch or *.diff files"),
    "both-sources": (["--patch-dir", ".", "--patch", "x.patch"], "not allowed with argument"),
}


def test_output_over_the_input_is_refused(tmp_path: Path) -> None:
    w = build_wheel(tmp_path / "in", files=FILES)
    before = w.read_bytes()
    p = write(tmp_path, "a.patch", diff("demo/__init__.py", FILES["demo/__init__.py"], "x = 2\n"))
    r = run_stage("ci.patch", w, "--patch", p, "-w", w.parent)
    assert r.returncode == 2 and "would replace its input wheel" in r.stderr, r.stderr
    assert w.read_bytes() == before and sorted(x.name for x in w.parent.iterdir()) == [w.name]


@pytest.mark.parametrize("kind", sorted(BAD_ARGS))
def test_bad_arguments_exit_2_and_write_nothing(tmp_path: Path, kind: str) -> None:
    args, needle = BAD_ARGS[kind]
    w = build_wheel(tmp_path / "in", files=FILES)
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    r = run_stage("ci.patch", w, *args, "-w", out, cwd=tmp_path / "empty")
    assert_bad_input(r, out, needle)


def _rebuilt(wheel: Path, dest: Path, metadata: str | None = None, algo: str = "sha256") -> Path:
    """The wheel with another METADATA and/or RECORD hashed with `algo`, RECORD true to the bytes
    (so only what was changed is at fault)."""
    import base64
    import hashlib
    entries = [(n, metadata.encode() if metadata and n.endswith(".dist-info/METADATA") else d, m)
               for n, d, m in wheel_entries(wheel)]

    def digest(d: bytes) -> str:
        return f"{algo}=" + base64.urlsafe_b64encode(hashlib.new(algo, d).digest()).rstrip(b"=").decode()
    record = "".join(f"{n},{digest(d)},{len(d)}\n" for n, d, _ in entries if not n.endswith("/RECORD"))
    entries = [(n, (record + n + ",,\n").encode() if n.endswith(".dist-info/RECORD") else d, m)
               for n, d, m in entries]
    return raw_zip(dest / wheel.name, entries)


@pytest.mark.parametrize("metadata,needle", [
    ("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n 1.0\n", "Version header is folded"),
    ("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nVersion: 2.0\n", "2 Version headers"),
    ("Metadata-Version: 2.1\nName: demo\n\tdemo\nVersion: 1.0\n", "Name header is folded"),
    ("Metadata-Version: 2.1\nName: demo\nname: other\nVersion: 1.0\n", "2 Name headers"),
], ids=["folded-version", "duplicate-version", "folded-name", "duplicate-name"])
def test_an_ambiguous_name_or_version_in_metadata_is_bad_input(tmp_path: Path, metadata: str, needle: str) -> None:
    w = _rebuilt(build_wheel(tmp_path / "good"), tmp_path / "in", metadata)
    out = tmp_path / "out"
    assert_bad_input(run_stage("ci.patch", w, "--local-version", "x", "-w", out), out, needle)
    assert_bad_input(run_stage("ci.patch", w, "--add-requires", "numpy", "-w", out), out, needle)


@pytest.mark.parametrize("algo", ["md5", "sha1", "sha224"])
def test_record_hashes_weaker_than_sha256_are_bad_input(tmp_path: Path, algo: str) -> None:
    """Not "verified", and not copied either: `wheel unpack` refuses an output that reuses them."""
    w = _rebuilt(build_wheel(tmp_path / "good"), tmp_path / "in", algo=algo)
    out = tmp_path / "out"
    for extra in ([], ["--no-verify"]):
        r = run_stage("ci.patch", w, "--local-version", "x", *extra, "-w", out)
        assert_bad_input(r, out, f"with '{algo}': only sha256 or stronger")


def test_record_hashes_stronger_than_sha256_are_verified(tmp_path: Path) -> None:
    w = _rebuilt(build_wheel(tmp_path / "good"), tmp_path / "in", algo="sha512")
    r = run_stage("ci.patch", w, "--local-version", "x", "-w", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    unpack = _proc.run([sys.executable, "-m", "wheel", "unpack", "-d", str(tmp_path / "unpacked"),
                        str(tmp_path / "out" / "demo-1.0+x-py3-none-any.whl")], capture_output=True, text=True)
    assert unpack.returncode == 0, unpack.stderr  # it re-checks every hash RECORD gives
    bad = _rebuilt(build_wheel(tmp_path / "good2", files={"demo/__init__.py": "x = 2\n"}), tmp_path / "bad",
                   algo="sha512")
    entries = [(n, b"x = 3\n" if n == "demo/__init__.py" else d, m) for n, d, m in wheel_entries(bad)]
    bad = raw_zip(tmp_path / "bad2" / bad.name, entries)
    assert_bad_input(run_stage("ci.patch", bad, "--local-version", "x", "-w", tmp_path / "out2"),
                     tmp_path / "out2", "RECORD hash mismatch for demo/__init__.py")


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_mid_write_leave_nothing_in_w(tmp_path: Path, signame: str) -> None:
    """Killed as a CI runner cancels a job: cleaned up as Ctrl-C is, no .part left in -w."""
    import signal
    w = zeros_wheel(tmp_path / "in", 512 << 20)  # its verification keeps the .part open a while
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    r = signal_mid_write("ci.patch", w, "--local-version", "x", "-w", out, out=out,
                         signum=getattr(signal, signame), env={"TMPDIR": str(tmp)})
    assert not out.exists() and list(tmp.iterdir()) == []  # not even the -w directory it made
    assert r.returncode == 128 + getattr(signal, signame), r.stderr
    assert r.stderr.strip().endswith(f"ci.patch: terminated by {signame}"), r.stderr


def test_help() -> None:
    r = run_stage("ci.patch", "--help")
    assert r.returncode == 0 and "--local-version" in r.stdout


# ------------------------------------------------------------------------------ the real torch wheel




def test_patched_torch_installs_with_new_version_and_metadata(torch_cpu_wheel: Path, tmp_path: Path) -> None:
    import zipfile

    with zipfile.ZipFile(torch_cpu_wheel) as z:
        old = z.read("torch/version.py").decode()
        version = z.read("torch-2.13.0+cpu.dist-info/METADATA").decode().split("\nVersion: ")[1].split("\n")[0]
    assert version == "2.13.0+cpu"
    new = old.replace(f"__version__ = '{version}'", f"__version__ = '{version}.site1'")
    assert new != old
    patch = write(tmp_path, "version.patch", diff("torch/version.py", old, new))
    out = tmp_path / "out"
    r = run_stage("ci.patch", torch_cpu_wheel, "--patch", patch, "--local-version", "site1",
                  "--remove-requires", "setuptools", "--add-requires", "numpy>=1.26", "-w", out)
    assert r.returncode == 0, r.stderr
    produced = Path(r.stdout.strip())
    assert produced.name == "torch-2.13.0+cpu.site1-cp311-cp311-manylinux_2_28_x86_64.whl"
    from tests._wheels import assert_valid_record
    assert_valid_record(produced)  # every RECORD hash re-checked independently
    site = tmp_path / "site"
    inst = pip_check_install(produced, site)
    assert inst.returncode == 0, inst.stderr
    show = _proc.run([sys.executable, "-m", "pip", "show", "torch"], capture_output=True, text=True,
                     env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert "Version: 2.13.0+cpu.site1" in show.stdout, show.stdout + show.stderr
    meta = (site / "torch-2.13.0+cpu.site1.dist-info/METADATA").read_text()
    assert "Requires-Dist: numpy>=1.26" in meta and "Requires-Dist: setuptools" not in meta
    assert "Requires-Dist: sympy" in meta  # the others stay
    assert (site / "torch/version.py").read_text() == new


def test_record_signatures_are_dropped_with_a_note(tmp_path: Path) -> None:
    files = {**FILES, "demo-1.0.dist-info/RECORD.jws": b'{"signatures": []}', "demo-1.0.dist-info/RECORD.p7s": b"\x30\x82"}
    w = build_wheel(tmp_path / "in", files=files)
    r = run_stage("ci.patch", w, "--local-version", "internal1", "-w", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    (out,) = (tmp_path / "out").glob("*.whl")
    names = read_members(out)
    assert not any(n.endswith(("RECORD.jws", "RECORD.p7s")) for n in names)
    assert "dropped demo-1.0.dist-info/RECORD.jws" in r.stderr and "RECORD.p7s" in r.stderr
    assert pip_check_install(out, tmp_path / "target").returncode == 0


@pytest.mark.parametrize("content, change", [
    ("one\r\ntwo\r\nthree\r\nfour\r\n", ("two\r\n", "TWO\r\n")),                    # a CRLF file
    ("a = 1\nsep = '\u2028'\nb = 2\nc = 3\nd = 4\n", ("c = 3\n", "c = 33\n")),       # U+2028 inside a line
    ("x\rstill x\ny\nz\n", ("z\n", "zz\n")),                                          # a lone CR
])
def test_diffs_apply_as_git_apply_does(tmp_path: Path, content: str, change: tuple[str, str]) -> None:
    """The diff comes from `git diff` and is applied by `git apply` in a checkout: ci.patch must give
    the same bytes."""
    repo = tmp_path / "repo"
    (repo / "demo").mkdir(parents=True)
    target = repo / "demo" / "data.py"
    target.write_bytes(content.encode())
    git = ["git", "-C", str(repo), "-c", "core.autocrlf=false", "-c", "user.email=t@e", "-c", "user.name=t"]
    _proc.run([*git, "init", "-q"], check=True)
    _proc.run([*git, "add", "."], check=True)
    _proc.run([*git, "commit", "-qm", "base"], check=True)
    target.write_bytes(content.replace(*change).encode())
    patch = tmp_path / "patches" / "change.diff"
    patch.parent.mkdir()
    patch.write_bytes(_proc.run([*git, "diff"], check=True, capture_output=True).stdout)
    _proc.run([*git, "checkout", "-q", "--", "."], check=True)
    _proc.run([*git, "apply", str(patch)], check=True)
    expected = target.read_bytes()
    assert expected == content.replace(*change).encode()

    w = build_wheel(tmp_path / "in", files={"demo/__init__.py": "", "demo/data.py": content.encode()})
    r = run_stage("ci.patch", w, "--patch-dir", patch.parent, "-w", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    (out,) = (tmp_path / "out").glob("*.whl")
    assert read_members(out)["demo/data.py"] == expected
