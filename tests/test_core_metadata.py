"""ci.wheel.metadata, the one METADATA reader, and ci.wheel.requirements, the one requirement reader:
folded headers read as installers read them (packaging.metadata and the email parser agree with us),
edits that never inject a header, and a folded License carried whole into a split companion."""

from __future__ import annotations

import email
import os
from pathlib import Path

import pytest
from packaging.metadata import parse_email

from wheelci.errors import CiError
from wheelci.wheel.metadata import (check_identity, edit_headers, get_headers, header_lines, parse_metadata,
                                    set_header)
from wheelci.wheel.requirements import parse_requirement, requirement_name
from tests._wheels import build_wheel, read_members, run_stage
from tests import _proc

LICENSE = ("License: Copyright (c) the demo authors.\n"
           "        Permission is granted to use this.\n"
           "        \n"
           "        No warranty.")
TEXT = ("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n" + LICENSE + "\n"
        "Requires-Dist: filelock\n  >=3\nRequires-Dist: numpy\n\nThe body.\n\nLicense: not a header\n")


def test_a_folded_header_is_one_value_as_packaging_reads_it():
    raw, unparsed = parse_email(TEXT)
    meta = parse_metadata(TEXT)
    assert meta.fields("license")[0].value == raw["license"]  # continuation lines kept, as written
    assert get_headers(TEXT, "License") == [raw["license"].replace("\n", "")]  # unfolded: every line, on one
    assert header_lines(TEXT, ["Requires-Python", "License"]) == [LICENSE]
    assert get_headers(TEXT, "Requires-Dist") == ["filelock  >=3", "numpy"]
    assert meta.body == "The body.\n\nLicense: not a header\n"  # after the blank line: body, never a header
    assert get_headers(TEXT, "license") == get_headers(TEXT, "LICENSE")


def test_the_headers_end_where_pip_stops_reading_them():
    """A line that is neither a header nor a continuation starts the body, for the email parser pip uses."""
    text = "Name: demo\nVersion: 1.0\nthis is no header\nRequires-Dist: evil\n"
    assert email.message_from_string(text).get_all("Requires-Dist") is None
    assert get_headers(text, "Requires-Dist") == []
    assert "Requires-Dist: evil" in edit_headers(text, append=[("Requires-Dist", "good")]).split("\n\n", 1)[1]


def test_edits_drop_folded_headers_whole_and_keep_line_ends_and_body():
    crlf = TEXT.replace("\n", "\r\n")
    out = edit_headers(crlf, remove=lambda k, v: k == "Requires-Dist" and v.startswith("filelock"),
                       append=[("Requires-Dist", "torch==2.13.0")])
    assert get_headers(out, "Requires-Dist") == ["numpy", "torch==2.13.0"]
    assert ">=3" not in out and "\n" not in out.replace("\r\n", "")  # the continuation went with its header
    assert out.endswith("\r\n\r\nThe body.\r\n\r\nLicense: not a header\r\n")
    assert parse_email(out)[0]["license"] == parse_email(TEXT)[0]["license"].replace("\n", "\r\n")
    assert get_headers(set_header(TEXT, "Version", "1.0+local"), "Version") == ["1.0+local"]


@pytest.mark.parametrize("key,value", [("Version", "1.0\nRequires-Dist: evil"), ("Requires-Dist", "a\r\n b"),
                                       ("Bad Key", "x"), ("Key:", "x")])
def test_no_edit_writes_a_header_that_spans_lines(key: str, value: str):
    with pytest.raises(CiError, match="refusing to write METADATA header"):
        if key == "Version":
            set_header(TEXT, key, value)
        else:
            edit_headers(TEXT, append=[(key, value)])


def test_name_and_version_are_one_unfolded_header_each():
    with pytest.raises(CiError, match="Version header is folded"):
        check_identity(TEXT.replace("Version: 1.0", "Version: 1.0\n  .post1"))
    with pytest.raises(CiError, match="2 Name headers"):
        check_identity(TEXT.replace("Name: demo\n", "Name: demo\nname: other\n"))
    check_identity(TEXT)  # the folded License is no identity header


@pytest.mark.parametrize("line,name", [("Torch[opt-einsum]>=1.1", "torch"), ('torch ;python_version>"3"', "torch"),
                                       ("Foo_Bar.baz @ https://example.invalid/x.whl", "foo-bar-baz"),
                                       ("nvidia-cudnn-cu12==9.10.2.21", "nvidia-cudnn-cu12"),
                                       ("torch>=", None), ("-e .", None), ("", None)])
def test_one_requirement_reader(line: str, name: str | None):
    assert requirement_name(line) == name
    if name is None:
        with pytest.raises(CiError, match="invalid Requires-Dist"):
            parse_requirement(line, "Requires-Dist")


def test_patch_removes_a_folded_requires_dist(tmp_path: Path):
    whl = build_wheel(tmp_path / "in", headers="Requires-Dist: filelock\n  >=3\nRequires-Dist: numpy")
    r = run_stage("ci.patch", whl, "--remove-requires", "FileLock", "-w", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    out = next((tmp_path / "out").glob("*.whl"))
    meta = read_members(out)["demo-1.0.dist-info/METADATA"].decode()
    assert parse_email(meta)[0]["requires_dist"] == ["numpy"]


def _gcc(out: Path, source: str, *args: str) -> None:
    import subprocess

    src = out.with_suffix(".c")
    src.write_text(source)
    _proc.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(src), f"-Wl,-soname,{out.name}", *args],
              check=True, capture_output=True)


def test_split_copies_a_folded_license_whole(tmp_path: Path):
    """The companion carries the main wheel's License as written: every line of it, not its first."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for i in (1, 2):  # incompressible: together over the limit, each under it
        blob = tmp_path / f"blob{i}.bin"
        blob.write_bytes(os.urandom(100_000))
        _gcc(lib / f"libbig{i}.so", f'__asm__(".section .rodata\\n.global blob{i}\\nblob{i}: .incbin \\"{blob}\\"'
             f'\\n.previous");\nextern const unsigned char blob{i}[];\nint big{i}(void) {{ return blob{i}[0] & 0; }}\n')
    _gcc(lib / "libfront.so", "int big1(void); int big2(void);\nint front(void) { return big1() + big2(); }\n",
         f"-L{lib}", "-lbig1", "-lbig2", "-Wl,-rpath,$ORIGIN")
    files = {"demo/__init__.py": "", **{f"demo/lib/{p.name}": p.read_bytes() for p in lib.iterdir()}}
    whl = build_wheel(tmp_path / "dist", files=files, tag="py3-none-linux_x86_64", headers=LICENSE,
                      modes={f"demo/lib/{p.name}": 0o755 for p in lib.iterdir()})
    r = run_stage("ci.split", whl, "--limit", "150KB", "-w", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    companion = next((tmp_path / "out").glob("demo_libs-*.whl"))
    meta = read_members(companion)["demo_libs-1.0.dist-info/METADATA"].decode()
    raw, unparsed = parse_email(meta)
    assert raw["license"] == parse_email(TEXT)[0]["license"]
    assert "No warranty." in raw["license"] and not unparsed
