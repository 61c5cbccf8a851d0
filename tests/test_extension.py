"""ci.native.extension: which ELF files are Python extension modules (they export PyInit_*), read from
the dynamic segment only, on gcc-built files of every hash-table style, and on bytes mutated from them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from wheelci.errors import CiError
from wheelci.native.extension import exports_pyinit, extension_modules
from wheelci.wheel.zipread import WheelArchive
from tests._wheels import build_wheel
from tests import _proc


def gcc(out: Path, source: str, *args: str) -> bytes:
    src = out.with_suffix(".c")
    src.write_text(source)
    _proc.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *args], check=True, capture_output=True)
    return out.read_bytes()


def exports(data: bytes, chunk: int = 4096) -> bool:
    """exports_pyinit over data delivered in chunks, as a zip member inflates."""
    return exports_pyinit(lambda: (data[i:i + chunk] for i in range(0, len(data), chunk)), len(data))


MODULE = "void *PyInit_foo(void) { return 0; }\nint helper(void) { return 1; }\n"


@pytest.mark.parametrize("style", ["sysv", "gnu", "both"])
def test_an_exported_pyinit_makes_an_extension_module_whatever_the_hash_table(tmp_path, style):
    """The symbol count comes from DT_HASH (sysv) or is walked from DT_GNU_HASH (gnu): both are read."""
    module = gcc(tmp_path / "libfoo.so", MODULE, f"-Wl,--hash-style={style}")  # named like a library
    assert exports(module) is True
    library = gcc(tmp_path / "libbar.so", "int bar(void) { return 2; }\n", f"-Wl,--hash-style={style}")
    assert exports(library) is False


def test_a_pyinit_the_file_only_imports_or_hides_is_not_an_export(tmp_path):
    """The name in the string table is not enough: an undefined reference (an embedding library calling
    a module's init) or a hidden one (not in the dynamic symbols at all) makes no extension module."""
    importer = gcc(tmp_path / "libembed.so", "void *PyInit_foo(void);\nvoid *call(void) { return PyInit_foo(); }\n")
    assert b"PyInit_foo" in importer and exports(importer) is False
    hidden = gcc(tmp_path / "libhidden.so", "__attribute__((visibility(\"hidden\"))) void *PyInit_foo(void) "
                 "{ return 0; }\nvoid *use(void) { return PyInit_foo(); }\n")
    assert exports(hidden) is False


def test_in_a_wheel_only_the_modules_are_named(tmp_path):
    module = gcc(tmp_path / "m.so", MODULE)
    library = gcc(tmp_path / "l.so", "int bar(void) { return 2; }\n")
    wheel = build_wheel(tmp_path / "dist", "mix", "1.0", {"mix/__init__.py": "", "mix/_native.so": module,
                                                          "mix/lib/libbar.so": library, "mix/data.bin": b"x" * 100},
                        tag="py3-none-linux_x86_64")
    with WheelArchive.open(wheel) as wa:
        assert extension_modules(wa, ["mix/_native.so", "mix/lib/libbar.so", "mix/data.bin"]) == {"mix/_native.so"}


def test_not_elf_is_not_a_module(tmp_path):
    assert exports(b"") is False and exports(b"#!/bin/sh\n" * 20) is False


def test_mutated_files_give_an_answer_or_one_clear_error(tmp_path):
    """Bytes flipped in the headers, the dynamic segment and the tables of a real module: the reader
    answers, or raises CiError; never another exception, never an endless loop (each case is bounded
    by the file: the cases together take well under a second here)."""
    module = gcc(tmp_path / "m.so", MODULE, "-Wl,--hash-style=gnu")
    rng = random.Random(28)
    hot = 4096  # where the headers, hash table, symbols and strings are
    outcomes = {True: 0, False: 0, "error": 0}
    for _ in range(400):
        data = bytearray(module)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(min(hot, len(data)))] = rng.randrange(256)
        if rng.random() < 0.2:
            del data[rng.randrange(64, len(data)):]  # cut off
        try:
            outcomes[exports(bytes(data), chunk=rng.choice([1 << 10, 1 << 16]))] += 1
        except CiError:
            outcomes["error"] += 1
    assert outcomes[True] and outcomes["error"], outcomes  # the mutations reached both outcomes
