"""An sdist unpacks to what it holds, no more: sparse members, hard links and tar headers that declare
more than the archive holds are one error line, before anything is extracted or compiled.

The sparse archives are written by GNU tar (`--sparse`, in each format it writes them), the rest with
tarfile; every case runs the real entry points: `ci.build SDIST --dry-run` (which extracts before it
plans), a real `ci.build` where the refusal must come before the compile, and `ci.index` where the
sdist's PKG-INFO is read. Each stage runs under an address-space limit (tests._bounded).
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from wheelci.config.sdist import MAX_DEPTH, extract_sdist
from wheelci.errors import CiError
from tests._wheels import run_stage
from tests._bounded import bounded_stage
from tests import _proc

TOP = "pkg-1.0"
PYPROJECT = (b'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
             b'[project]\nname = "pkg"\nversion = "1.0"\n')


def gnu_tar_sparse(dest: Path, options: list[str]) -> Path:
    """An sdist whose pyproject.toml is a 1 GiB sparse file (no disk blocks), archived by GNU tar."""
    tree = dest / "tree"
    (tree / TOP).mkdir(parents=True)
    with open(tree / TOP / "pyproject.toml", "wb") as f:
        f.truncate(1 << 30)
    out = dest / f"{TOP}.tar.gz"
    _proc.run(["tar", "--sparse", *options, "-czf", str(out), "-C", str(tree), TOP], check=True)
    return out


def tar_of(dest: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    """An sdist of exactly these members (data written for regular files)."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / f"{TOP}.tar.gz"
    with tarfile.open(out, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out


def member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(f"{TOP}/{name}" if name else TOP)
    info.type, info.linkname = kind, link
    return info, data


def raw_header(dest: Path, info: tarfile.TarInfo, tar_format: int, size: int, body: bytes) -> Path:
    """An sdist of one header declaring `size` bytes (the number field written as tar writes it) and
    `body`: far less than it declares."""
    info.size = 0
    block = bytearray(info.tobuf(tar_format))
    block[124:136] = b"\x80" + size.to_bytes(11, "big")  # base-256, as GNU tar writes big sizes
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / f"{TOP}.tar.gz"
    out.write_bytes(gzip.compress(bytes(block) + body))
    return out


def one_error(r: subprocess.CompletedProcess, prog: str, message: str) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-3000:]
    assert lines[0].startswith(f"{prog}: error: {TOP}.tar.gz: ") and message in lines[0], lines[0]
    assert "unexpected" not in lines[0], lines[0]
    return lines[0]


def dry_run(tmp_path: Path, sdist: Path) -> subprocess.CompletedProcess:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    r = bounded_stage("ci.build", sdist, "--cpu", "--engine", "host", "--dry-run", env={"TMPDIR": str(tmp)})
    assert not list(tmp.iterdir()), "the extraction directory is left behind"
    return r


@pytest.mark.parametrize("options", [["--format=gnu"], ["--format=posix"], ["--format=posix", "--sparse-version=0.1"],
                                     ["--format=posix", "--sparse-version=0.0"]], ids=["gnu", "pax-1.0", "pax-0.1", "pax-0.0"])
def test_sparse_members_are_refused(tmp_path, options):
    """A few hundred bytes held a 1 GiB pyproject.toml, which the dry run read whole into memory (2 GB)."""
    sdist = gnu_tar_sparse(tmp_path / "dist", options)
    assert sdist.stat().st_size < 1024
    one_error(dry_run(tmp_path, sdist), "python -m ci.build", f"member '{TOP}/pyproject.toml' is a sparse file")
    with pytest.raises(CiError, match="is a sparse file"):
        extract_sdist(sdist, tmp_path / "x" / "sdist")
    assert not (tmp_path / "x").exists()


def test_hard_links_add_no_more_than_the_files_hold(tmp_path):
    """2000 links to a 1 MiB file: 2 GiB once a build copies the tree (a copy does not keep hard links).
    Refused before extraction, in a dry run and in a real build, before anything is compiled."""
    links = [member(f"l{i}", kind=tarfile.LNKTYPE, link=f"{TOP}/zeros.bin") for i in range(2000)]
    sdist = tar_of(tmp_path / "dist", [member("pyproject.toml", PYPROJECT), member("zeros.bin", bytes(1 << 20)), *links])
    assert sdist.stat().st_size < 64 << 10
    message = "its hard links would unpack 2.0 GiB of copies from 1.0 MiB of files; refused before extraction"
    one_error(dry_run(tmp_path, sdist), "python -m ci.build", message)
    tmp = tmp_path / "tmp"
    r = bounded_stage("ci.build", sdist, "--cpu", "--engine", "host", "-w", tmp_path / "out", env={"TMPDIR": str(tmp)})
    one_error(r, "python -m ci.build", message)
    assert not (tmp_path / "out").exists() and not list(tmp.iterdir())


@pytest.mark.parametrize("case, links", [
    ("a later member", [member("h", kind=tarfile.LNKTYPE, link=f"{TOP}/f"), member("f", b"x")]),
    ("a directory", [member("d", kind=tarfile.DIRTYPE), member("h", kind=tarfile.LNKTYPE, link=f"{TOP}/d")]),
    ("a symlink", [member("f", b"x"), member("s", kind=tarfile.SYMTYPE, link="f"),
                   member("h", kind=tarfile.LNKTYPE, link=f"{TOP}/s")]),
    ("nothing", [member("h", kind=tarfile.LNKTYPE, link=f"{TOP}/missing")]),
])
def test_a_hard_link_names_a_regular_file_before_it(tmp_path, case, links):
    sdist = tar_of(tmp_path / "dist", [member("pyproject.toml", PYPROJECT), *links])
    one_error(dry_run(tmp_path, sdist), "python -m ci.build", f"hard link '{TOP}/h' -> ")
    with pytest.raises(CiError, match="names no regular file before it"):
        extract_sdist(sdist, tmp_path / "x")


def test_one_hard_link_to_a_file_before_it_unpacks(tmp_path):
    sdist = tar_of(tmp_path / "dist", [member("pyproject.toml", PYPROJECT), member("a.txt", b"hello\n"),
                                        member("b.txt", kind=tarfile.LNKTYPE, link=f"{TOP}/a.txt")])
    root = extract_sdist(sdist, tmp_path / "x")
    assert (root / "b.txt").read_bytes() == b"hello\n" and os.path.samefile(root / "a.txt", root / "b.txt")
    r = dry_run(tmp_path, sdist)
    assert r.returncode == 0, r.stderr[-3000:]


HEADERS = {
    # a GNU long-name header declaring 1 TiB: tarfile read it with one read(1 TiB), a MemoryError
    "long name of 1 TiB": (tarfile.TarInfo("././@LongLink"), tarfile.GNU_FORMAT, 1 << 40),
    # a pax extended header declaring 8 GiB
    "pax header of 8 GiB": (tarfile.TarInfo(f"{TOP}/x"), tarfile.USTAR_FORMAT, 8 << 30),
}


@pytest.mark.parametrize("case", HEADERS)
def test_headers_declaring_more_than_the_archive_holds(tmp_path, case):
    info, tar_format, size = HEADERS[case]
    info.type = tarfile.GNUTYPE_LONGNAME if tar_format == tarfile.GNU_FORMAT else tarfile.XHDTYPE
    sdist = raw_header(tmp_path / "dist", info, tar_format, size, f"{TOP}/".encode() + bytes(1000))
    assert sdist.stat().st_size < 200
    one_error(dry_run(tmp_path, sdist), "python -m ci.build", "not a readable sdist")
    index = bounded_stage("ci.index", sdist.parent, "--out", tmp_path / "index")
    one_error(index, "python -m ci.index", "not a readable sdist")


def test_a_sparse_map_cut_short_is_unreadable(tmp_path):
    """GNU sparse 1.0 keeps its map in the data: one that claims five entries and holds one made
    tarfile raise a bare ValueError."""
    info, _ = member("GNUSparseFile.0/pyproject.toml")
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": f"{TOP}/pyproject.toml",
                        "GNU.sparse.realsize": str(1 << 30)}
    sdist = tar_of(tmp_path / "dist", [(info, b"5\n0\n")])
    one_error(dry_run(tmp_path, sdist), "python -m ci.build", "not a readable sdist")


def test_names_too_long_or_too_deep(tmp_path):
    deep = "/".join(["d"] * (MAX_DEPTH + 1))
    sdist = tar_of(tmp_path / "deep", [member("pyproject.toml", PYPROJECT), member(f"{deep}/f", b"x")])
    one_error(dry_run(tmp_path, sdist), "python -m ci.build", f"more than {MAX_DEPTH} directories deep")
    long = tar_of(tmp_path / "long", [member("pyproject.toml", PYPROJECT), member("n" * 5000, b"x")])
    one_error(dry_run(tmp_path, long), "python -m ci.build", "a member name longer than 4096 bytes")


@pytest.mark.parametrize("kind", [tarfile.REGTYPE, tarfile.SYMTYPE], ids=["file", "symlink"])
def test_a_root_member_that_is_no_directory(tmp_path, kind):
    """`tar -C dir .` writes `./` as a directory, which reads like any other sdist; a `.` that is a file
    or a link was an unexpected IndexError."""
    root = tarfile.TarInfo(".")
    root.type, root.linkname = kind, TOP if kind == tarfile.SYMTYPE else ""
    sdist = tar_of(tmp_path / "dist", [member("pyproject.toml", PYPROJECT), (root, b"")])
    one_error(dry_run(tmp_path, sdist), "python -m ci.build", "member '.' names the archive's root but is not a directory")
    gnu = tmp_path / "gnu" / f"{TOP}.tar.gz"  # the directory form, as GNU tar writes it
    (tmp_path / "tree" / TOP).mkdir(parents=True)
    (tmp_path / "tree" / TOP / "pyproject.toml").write_bytes(PYPROJECT)
    gnu.parent.mkdir()
    _proc.run(["tar", "-czf", str(gnu), "-C", str(tmp_path / "tree"), "."], check=True)
    assert dry_run(tmp_path, gnu).returncode == 0


def _zeros_sdist(tmp_path, name: str, members: list[tuple[str, int]]) -> Path:
    """An sdist of tiny_ext's pyproject.toml plus members of zeros (name, size): gzip makes them small."""
    import gzip
    import io
    import tarfile as tf

    path = tmp_path / f"{name}-0.1.0.tar.gz"
    with gzip.open(path, "wb", compresslevel=9) as gz, tf.open(fileobj=gz, mode="w") as tar:
        info = tf.TarInfo(f"{name}-0.1.0/pyproject.toml")
        data = b'[project]\nname = "zeros"\nversion = "0.1.0"\n'
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for member, size in members:
            info = tf.TarInfo(f"{name}-0.1.0/{member}")
            info.size = size
            tar.addfile(info, _Zeros(size))
    return path


class _Zeros:
    def __init__(self, size: int) -> None:
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


@pytest.mark.parametrize("members, words", [
    ([("zeros.bin", 1100 << 20)], "would unpack"),  # ~1 MB of gzip that unpacks to 1.1 GiB
    ([(f"d{i // 1000}/f{i}", 0) for i in range(25_000)], "members in"),
    ([("same.bin", 64 << 20)] * 18, "would unpack"),  # one name written 18 times
])
def test_an_sdist_unpacks_to_no_more_than_its_size_allows(tmp_path, members, words):
    sdist = _zeros_sdist(tmp_path, "zeros", members)
    r = run_stage("ci.build", sdist, "--cpu", "--engine", "host", "--dry-run")
    assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr
