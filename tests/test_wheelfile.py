"""ci.wheel.zipread, zipwrite and rewrite: raw copies, RECORD, ordering, modes, ZIP64, determinism, bad zips."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import pytest

from wheelci.errors import CiError
from wheelci.wheel.rewrite import rewrite
from wheelci.wheel.zipread import WheelArchive
from wheelci.wheel.zipwrite import WheelWriter
from tests._wheels import (BAD_WHEELS, assert_valid_record, bad_wheel, build_wheel, pip_check_install, raw_zip,
                           wheel_entries)
from tests import _proc

FILES = {
    "demo/__init__.py": "from demo.core import hello\n",
    "demo/core.py": "def hello():\n    return 'hello'\n",
    "demo/bin/tool": b"#!/bin/sh\necho tool\n",
    "demo/data.bin": bytes(range(256)) * 64,
}


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return build_wheel(tmp_path / "in", files=FILES, modes={"demo/bin/tool": 0o755})


def infos(path: Path) -> list[zipfile.ZipInfo]:
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None
        return z.infolist()


def test_noop_rewrite_copies_compressed_bytes_and_keeps_modes(wheel: Path, tmp_path: Path) -> None:
    stored = build_wheel(tmp_path / "stored", files=FILES, compression=zipfile.ZIP_STORED)
    out = rewrite(stored, tmp_path / "out")
    assert out.name == stored.name
    # stored members stay stored: nothing was recompressed
    assert {i.filename: i.compress_type for i in infos(out) if "dist-info" not in i.filename} == {
        n: zipfile.ZIP_STORED for n in FILES}
    out2 = rewrite(wheel, tmp_path / "out2")
    data = assert_valid_record(out2)
    assert data["demo/data.bin"] == FILES["demo/data.bin"]
    modes = {i.filename: i.external_attr >> 16 for i in infos(out2)}
    assert modes["demo/bin/tool"] == 0o100755 and modes["demo/core.py"] == 0o100644


def test_replace_add_remove_and_version_rename_install_with_pip(wheel: Path, tmp_path: Path) -> None:
    out = rewrite(wheel, tmp_path / "out", replace={"demo/core.py": b"def hello():\n    return 'patched'\n"},
                  add={"demo/extra.py": b"X = 1\n", "demo/bin/run": (b"#!/bin/sh\n", 0o755)},
                  remove=["demo/data.bin"], version="1.0+local")
    assert out.name == "demo-1.0+local-py3-none-any.whl"
    data = assert_valid_record(out)
    assert "demo-1.0+local.dist-info/METADATA" in data and not any(n.startswith("demo-1.0.dist-info") for n in data)
    assert b"Version: 1.0+local\n" in data["demo-1.0+local.dist-info/METADATA"]
    assert "demo/data.bin" not in data
    assert {i.filename: i.external_attr >> 16 for i in infos(out)}["demo/bin/run"] == 0o100755
    target = tmp_path / "site"
    r = pip_check_install(out, target)
    assert r.returncode == 0, r.stderr
    assert (target / "demo/core.py").read_text() == "def hello():\n    return 'patched'\n"
    assert "Version: 1.0+local" in (target / "demo-1.0+local.dist-info/METADATA").read_text()
    assert (target / "demo/bin/run").stat().st_mode & 0o111


def test_distribution_rename_moves_dist_info_and_data_dirs(tmp_path: Path) -> None:
    w = build_wheel(tmp_path / "in", files={"demo/__init__.py": "", "demo-1.0.data/scripts/go": "#!python\n"})
    out = rewrite(w, tmp_path / "out", distribution="demo-renamed")
    assert out.name == "demo_renamed-1.0-py3-none-any.whl"
    data = assert_valid_record(out)
    assert "demo_renamed-1.0.data/scripts/go" in data
    assert b"Name: demo-renamed\n" in data["demo_renamed-1.0.dist-info/METADATA"]


def test_output_is_deterministic_and_honours_source_date_epoch(wheel: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    edit = {"demo/core.py": b"changed\n"}
    a = rewrite(wheel, tmp_path / "a", replace=edit, version="1.0+x").read_bytes()
    b = rewrite(wheel, tmp_path / "b", replace=edit, version="1.0+x").read_bytes()
    assert a == b
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # 2023-11-14 22:13:20 UTC
    out = rewrite(wheel, tmp_path / "c", replace=edit)
    assert {i.date_time for i in infos(out)} == {(2023, 11, 14, 22, 13, 20)}
    assert rewrite(wheel, tmp_path / "d", replace=edit).read_bytes() == out.read_bytes()


def test_forced_zip64_is_read_by_zipfile_unzip_and_ourselves(wheel: Path, tmp_path: Path) -> None:
    out = rewrite(wheel, tmp_path / "z64", replace={"demo/core.py": b"x = 1\n"}, force_zip64=True)
    with open(out, "rb") as f:
        assert b"PK\x06\x06" in f.read()  # the ZIP64 end of central directory record is there
    assert_valid_record(out)
    _proc.run(["unzip", "-tq", str(out)], check=True, capture_output=True)
    again = rewrite(out, tmp_path / "again")  # our reader resolves the ZIP64 extras
    assert_valid_record(again)
    with WheelArchive.open(out) as wa:
        assert wa.read("demo/data.bin") == FILES["demo/data.bin"]


def test_more_than_65535_members_use_zip64_end_records(tmp_path: Path) -> None:
    files = {f"demo/f{i}.txt": b"" for i in range(66000)}
    files["demo/__init__.py"] = b""
    w = build_wheel(tmp_path / "in", files=files, compression=zipfile.ZIP_STORED)
    out = rewrite(w, tmp_path / "out", version="1.0+many")
    with zipfile.ZipFile(out) as z:
        assert len(z.infolist()) == 66000 + 1 + 3
    with WheelArchive.open(out) as wa:
        assert len(wa.members) == 66004


def test_exactly_65535_members_without_zip64_records(tmp_path: Path) -> None:
    files = {f"demo/f{i}.txt": b"" for i in range(65535 - 4)}
    files["demo/__init__.py"] = b""
    w = build_wheel(tmp_path / "in", files=files, compression=zipfile.ZIP_STORED)
    assert b"PK\x06\x06" not in w.read_bytes()[-200:]  # zipfile wrote 0xFFFF entries, no ZIP64 end record
    with WheelArchive.open(w) as wa:
        assert len(wa.members) == 65535


def test_a_central_directory_at_the_offset_spelling_the_end_signature_is_read(tmp_path: Path) -> None:
    """The end record's offset field reads `PK\\x05\\x06` when the central directory starts at
    0x06054b50: a search from the end found the signature there and refused a valid wheel."""
    target, pad = 0x06054B50, 0x06054B50 - 2000
    for attempt in range(4):  # RECORD's text depends on the pad's size: converge on the offset
        w = build_wheel(tmp_path / f"in{attempt}", files={"demo/__init__.py": b"", "demo/pad.bin": bytes(pad)},
                        compression=zipfile.ZIP_STORED)
        with zipfile.ZipFile(w) as z:
            start = z.start_dir
            names = z.namelist()
        if start == target:
            break
        pad += target - start
        w.unlink()
    assert start == target and b"PK\x05\x06" in w.read_bytes()[-22:][16:20]
    with WheelArchive.open(w) as wa:
        assert [m.name for m in wa.members] == names
        wa.verify()


@pytest.mark.parametrize("prefix", [b"", b"PK\x03\x04" + bytes(10)])
def test_an_end_record_too_near_the_start_for_a_zip64_locator_is_bad_input(tmp_path: Path, prefix: bytes) -> None:
    """An end record that claims 65535 entries (so a ZIP64 locator would sit before it) at the very
    start of the file: the reader sought to a negative offset ("unexpected OSError")."""
    import struct
    path = tmp_path / "demo-1.0-py3-none-any.whl"
    path.write_bytes(prefix + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0, 0xFFFFFFFF, 0))
    with pytest.raises(CiError, match="corrupt zip"):
        WheelArchive.open(path)


def test_data_descriptor_members_are_copied_with_clean_headers(tmp_path: Path) -> None:
    src = build_wheel(tmp_path / "in", files=FILES)
    # zipfile writing to an unseekable stream uses data descriptors (flag bit 3)
    streamed = tmp_path / "streamed" / src.name
    streamed.parent.mkdir()

    class Unseekable:
        def __init__(self, f):
            self.f = f

        def write(self, b):
            return self.f.write(b)

        def flush(self):
            self.f.flush()

    with open(streamed, "wb") as raw, zipfile.ZipFile(Unseekable(raw), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in wheel_entries(src):
            zi = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = mode << 16
            z.writestr(zi, data)
    assert any(i.flag_bits & 0x8 for i in infos(streamed))
    out = rewrite(streamed, tmp_path / "out")
    assert not any(i.flag_bits & 0x8 for i in infos(out))
    assert_valid_record(out)


def test_writer_builds_a_wheel_from_copied_and_new_members(wheel: Path, tmp_path: Path) -> None:
    from wheelci.wheel.names import WheelName

    with WheelArchive.open(wheel) as wa:
        w = WheelWriter(WheelName.parse("demo_libs-1.0-py3-none-any.whl"))
        w.copy(wa, wa.get("demo/data.bin"), "demo_libs/data.bin")
        w.add("demo_libs-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: demo-libs\nVersion: 1.0\n")
        w.add("demo_libs-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        out = w.write(tmp_path / "libs")
    data = assert_valid_record(out)
    assert data["demo_libs/data.bin"] == FILES["demo/data.bin"]


def test_verify_catches_a_record_hash_mismatch(tmp_path: Path) -> None:
    bad = build_wheel(tmp_path / "in", files=FILES, bad_hash="demo/core.py")
    with pytest.raises(CiError, match="RECORD hash mismatch for demo/core.py"):
        rewrite(bad, tmp_path / "out", verify=True)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    with WheelArchive.open(bad) as wa:
        wa.verify(names=["demo/__init__.py"])  # only the named members
    # without verification the stale hash is carried over, as documented
    rewrite(bad, tmp_path / "out", verify=False)


# METADATA is only read (and refused) when it is edited; a plain rewrite copies its bytes.
OPEN_BAD = sorted(k for k in BAD_WHEELS if k not in ("bad-filename", "missing", "non-utf8-metadata",
                                                     "metadata-bomb"))


@pytest.mark.parametrize("kind", OPEN_BAD)
def test_bad_archives_are_refused_on_open(tmp_path: Path, kind: str) -> None:
    with pytest.raises(CiError, match=re.escape(BAD_WHEELS[kind])):
        rewrite(bad_wheel(tmp_path, kind, FILES), tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_record_takes_only_sha256_or_stronger_and_identity_headers_once() -> None:
    from wheelci.wheel.metadata import check_identity
    from wheelci.wheel.record import parse_record
    assert parse_record("a.py,sha512=x,1\na.py.dist-info/RECORD,,\n")["a.py"].hash == "sha512=x"
    for algo in ("md5", "sha1", "sha224", "shake_128", "nosuch"):
        with pytest.raises(CiError, match=f"with '{algo}': only sha256 or stronger"):
            parse_record(f"a.py,{algo}=x,1\n")
    check_identity("Name: a\nVersion: 1\nSummary: x\n  folded summary\n\nVersion: 2 in the body\n")
    for text in ("Name: a\nVersion: 1\n 2\n", "Name: a\nVersion: 1\nVERSION: 2\n", "Name: a\nName: b\nVersion: 1\n"):
        with pytest.raises(CiError, match="METADATA"):
            check_identity(text)


def _two_directories(wheel: Path, hidden: tuple[str, bytes], zip64: bool) -> bytes:
    """One zip, two central directories: the end record's offset names the first (without `hidden`);
    zipfile reads the directory that ends right at the end record (with it), and shifts every offset
    by the difference as for a self-extracting prefix. A padding prefix keeps the shifted offsets valid."""
    import struct
    entries = wheel_entries(wheel)
    full = raw_zip(wheel.parent / "full.zip", entries + [(hidden[0], hidden[1], 0o100644)]).read_bytes()
    with zipfile.ZipFile(io.BytesIO(full)) as z:
        start = z.start_dir
        n = len(z.infolist())
    eocd = full.rindex(b"PK\x05\x06")
    locals_, cd_full = full[:start], full[start:eocd]
    # The first directory: every entry but the last (the hidden one)
    cd_short, pos = b"", 0
    for _ in range(n - 1):
        nlen, xlen, clen = struct.unpack_from("<HHH", cd_full, pos + 28)
        pos += 46 + nlen + xlen + clen
    cd_short = cd_full[:pos]
    pad = len(cd_short)  # zipfile's shift ("concat") is the first directory's length

    def shifted(cd: bytes, by: int) -> bytes:
        out, p = bytearray(cd), 0
        while p < len(out):
            nlen, xlen, clen = struct.unpack_from("<HHH", out, p + 28)
            struct.pack_into("<I", out, p + 42, struct.unpack_from("<I", out, p + 42)[0] + by)
            p += 46 + nlen + xlen + clen
        return bytes(out)

    first = shifted(cd_short, pad)       # real offsets, past the prefix
    second = cd_full                     # offsets relative to the prefix: zipfile adds `pad`
    cd_at = pad + len(locals_)
    body = bytes(pad) + locals_ + first + second
    if zip64:
        eocd64_at = len(body)
        body += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n - 1, n - 1, len(second), cd_at)
        body += struct.pack("<IIQI", 0x07064B50, 0, eocd64_at, 1)
        return body + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return body + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n - 1, n - 1, len(second), cd_at, 0)


@pytest.mark.parametrize("zip64", [False, True])
def test_two_central_directories_are_refused(wheel: Path, tmp_path: Path, zip64: bool) -> None:
    """Finding 1: we read the directory the end record's offset names, zipfile (pip) the one that ends
    at the end record: pip would install a `.pth` that ci.check never saw."""
    data = _two_directories(wheel, ("demo-hidden.pth", b"import os\n"), zip64)
    path = tmp_path / "bad" / wheel.name
    path.parent.mkdir()
    path.write_bytes(data)
    with zipfile.ZipFile(path) as z:  # the attack is real: zipfile sees the hidden member
        assert "demo-hidden.pth" in z.namelist()
    with pytest.raises(CiError, match="central directory"):
        WheelArchive.open(path)


def test_an_entry_count_below_the_directory_is_refused(wheel: Path, tmp_path: Path) -> None:
    """zipfile reads the directory by its size and ignores the count: a smaller count hid the last
    members from us."""
    data = bytearray(wheel.read_bytes())
    eocd = data.rindex(b"PK\x05\x06")
    count = int.from_bytes(data[eocd + 10: eocd + 12], "little")
    data[eocd + 8: eocd + 12] = (count - 1).to_bytes(2, "little") * 2
    path = tmp_path / "bad" / wheel.name
    path.parent.mkdir()
    path.write_bytes(bytes(data))
    with pytest.raises(CiError, match="central directory"):
        WheelArchive.open(path)


def test_a_zip64_end_record_is_read_where_zipfile_reads_it(wheel: Path, tmp_path: Path) -> None:
    """A locator before a plain end record: zipfile takes the ZIP64 record's values whatever the plain
    one says; the locator's own pointer is ignored by zipfile, so one pointing elsewhere is refused."""
    out = rewrite(wheel, tmp_path / "z64", force_zip64=True)
    data = bytearray(out.read_bytes())
    eocd = data.rindex(b"PK\x05\x06")
    with zipfile.ZipFile(out) as z:
        n, start = len(z.infolist()), z.start_dir
    cd_size = data.rindex(b"PK\x06\x06") - start
    # concrete values in the plain end record, pointing at a wrong place: zipfile ignores them
    data[eocd + 8: eocd + 20] = (n - 1).to_bytes(2, "little") * 2 + cd_size.to_bytes(4, "little") + (0).to_bytes(4, "little")
    (tmp_path / "c").mkdir()
    concrete = tmp_path / "c" / out.name
    concrete.write_bytes(bytes(data))
    with WheelArchive.open(concrete) as wa, zipfile.ZipFile(concrete) as z:
        assert [m.name for m in wa.members] == z.namelist()
    loc = data.rindex(b"PK\x06\x07")
    data[loc + 8: loc + 16] = (12345).to_bytes(8, "little")
    (tmp_path / "l").mkdir()
    elsewhere = tmp_path / "l" / out.name
    elsewhere.write_bytes(bytes(data))
    with pytest.raises(CiError, match="ZIP64"):
        WheelArchive.open(elsewhere)


def test_non_ascii_names_without_the_utf8_flag_are_rewritten_as_utf8(tmp_path: Path) -> None:
    """Finding 19: a cp437 name (no UTF-8 flag) was copied with its old local header while the new
    central directory spelled it in UTF-8: the two disagreed and pip refused the output."""
    w = build_wheel(tmp_path / "in", files={"demo/__init__.py": b"", "demo/cafX.py": b"x = 1\n"})
    entries = [(n, d.replace(b"demo/cafX.py", "demo/café.py".encode()) if n.endswith("RECORD") else d, m)
               for n, d, m in wheel_entries(w)]
    raw = raw_zip(tmp_path / "raw.zip", entries).read_bytes().replace(b"demo/cafX.py", b"demo/caf\x82.py")
    src = tmp_path / "src" / w.name
    src.parent.mkdir()
    src.write_bytes(raw)
    with zipfile.ZipFile(src) as z:
        assert "demo/café.py" in z.namelist()  # cp437 0x82 is é
    out = rewrite(src, tmp_path / "out", version="1.0+x", verify=True)
    with zipfile.ZipFile(out) as z:
        assert z.read("demo/café.py") == b"x = 1\n"
    assert pip_check_install(out, tmp_path / "site").returncode == 0
    assert (tmp_path / "site" / "demo" / "café.py").read_bytes() == b"x = 1\n"


@pytest.mark.parametrize("size", [1000, 40 << 20])  # read whole, and inflated and hashed by two threads
def test_a_wrong_crc_is_refused_though_record_matches(tmp_path: Path, size: int) -> None:
    """pip's zipfile checks the CRC on install: a member whose content matches RECORD but not the
    zip's CRC must be refused by verify (the CRC is computed on the hashing thread for big members)."""
    import struct
    w = build_wheel(tmp_path / "in", files={"demo/__init__.py": b"", "demo/big.bin": bytes(size)})
    data = bytearray(w.read_bytes())
    with zipfile.ZipFile(w) as z:
        info = z.getinfo("demo/big.bin")
        start = z.start_dir
    bad = struct.pack("<I", info.CRC ^ 1)
    data[info.header_offset + 14: info.header_offset + 18] = bad
    entry = start
    while True:  # the central directory entry of demo/big.bin
        nlen, xlen, clen = struct.unpack_from("<HHH", data, entry + 28)
        if data[entry + 46: entry + 46 + nlen] == b"demo/big.bin":
            break
        entry += 46 + nlen + xlen + clen
    data[entry + 16: entry + 20] = bad
    path = tmp_path / "bad" / w.name
    path.parent.mkdir()
    path.write_bytes(bytes(data))
    with WheelArchive.open(path) as wa, pytest.raises(CiError, match="CRC"):
        wa.verify()
