"""Fuzzing the parsers that read untrusted input: wheels (zip directory, RECORD, METADATA), unified
diffs and size limits. Any input gives a clean result or a CiError (one line, exit 2 at the CLI);
never another exception. And differentially, with zipfile (pip's reader) as the oracle: a wheel we
accept reads the same names and bytes through zipfile. Bounded: a few hundred examples each, no
deadline, derandomized so a CI failure reproduces."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wheelci.util.sizes import parse_size
from wheelci.errors import CiError
from wheelci.patch import apply_file_patch, parse_patch
from wheelci.wheel.record import parse_record
from wheelci.wheel.zipread import WheelArchive
from tests._wheels import build_wheel

FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TMP = Path(tempfile.mkdtemp(prefix="ci-fuzz-"))
atexit.register(shutil.rmtree, TMP, ignore_errors=True)  # the suite leaves no scratch behind
SEED = build_wheel(TMP / "seed", files={"demo/__init__.py": "x = 1\n" * 50, "demo/lib/libx.so": b"\x7fELF" + bytes(300)},
                   requires=("torch==2.13.0",)).read_bytes()


def exercise(data: bytes) -> None:
    """Everything the stages do with a wheel before trusting it."""
    path = TMP / "case" / "demo-1.0-py3-none-any.whl"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    try:
        with WheelArchive.open(path) as wa:
            wa.verify()
            _ = wa.metadata, wa.record, wa.unpacked_size
            for m in wa.files:
                wa.local_header(m)
    except CiError:
        pass


def differential(data: bytes) -> None:
    """zipfile is what pip installs with: whatever our reader accepts, it must read the same member
    names and bytes as zipfile does, or a wheel we checked is not the wheel pip installs."""
    path = TMP / "diff" / "demo-1.0-py3-none-any.whl"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    try:
        with WheelArchive.open(path) as wa:
            ours = {m.name: wa.read(m) for m in wa.files}
    except CiError:
        return
    try:
        with zipfile.ZipFile(path) as z:
            theirs = {i.filename: z.read(i) for i in z.infolist() if not i.is_dir()}
    except Exception as e:  # noqa: BLE001  any refusal by zipfile is a disagreement
        pytest.fail(f"our reader accepts a zip that zipfile refuses: {type(e).__name__}: {e}")
    assert ours == theirs

@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_mutated_real_wheel(flips):
    data = bytearray(SEED)
    for pos, value in flips:
        data[pos] = value
    exercise(bytes(data))
    differential(bytes(data))


@FUZZ
@given(st.integers(0, len(SEED)), st.binary(max_size=64))
def test_truncated_or_spliced_wheel(cut, junk):
    exercise(SEED[:cut] + junk)
    differential(SEED[:cut] + junk)


names = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=40)


@FUZZ
@given(st.dictionaries(names, st.binary(max_size=200), min_size=1, max_size=6), st.booleans())
def test_random_zip_files(entries, with_dist_info):
    path = TMP / "gen.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data)
        if with_dist_info:
            z.writestr("demo-1.0.dist-info/METADATA", b"Name: demo\nVersion: 1.0\n")
            z.writestr("demo-1.0.dist-info/RECORD", "\n".join(f"{n},," for n in entries).encode("utf-8", "replace"))
    exercise(path.read_bytes())
    differential(path.read_bytes())


@FUZZ
@given(st.text(max_size=400))
def test_record_text(text):
    try:
        parse_record(text)
    except CiError:
        pass


DIFF = "--- a/demo/x.py\n+++ b/demo/x.py\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"


@FUZZ
@given(st.text(max_size=300), st.text(max_size=200))
def test_diffs(noise, target):
    for text in (noise, DIFF + noise, DIFF.replace("b\n", noise, 1)):
        try:
            for fp in parse_patch(text, "fuzz.diff"):
                apply_file_patch(target, fp)
        except CiError:
            pass


@FUZZ
@given(st.text(max_size=30))
def test_sizes(text):
    try:
        assert 0 <= parse_size(text) < 2**63
    except CiError:
        pass


@pytest.mark.parametrize("text", ["1e400MB", "inf", "nan", "-1", "9" * 400])
def test_sizes_that_once_crashed(text):
    with pytest.raises(CiError):
        parse_size(text)

