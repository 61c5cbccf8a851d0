"""The ELF fuzz worker: mutates real shared libraries and reads each mutant through every ELF reader of
ci.native.elf, each case in its own forked child under a memory and CPU-time budget.

    python -m tests._elffuzz SEED_DIR FIRST COUNT [--cpu SECONDS] [--selftest]

Prints one JSON object: {"outcomes": {"clean": n, "refused": n}, "failures": [...]}. A failure is a case
that raised anything but CiError, went over its memory budget (MemoryError under RLIMIT_AS) or its
time budget (killed by RLIMIT_CPU, or by SIGALRM for a wait the CPU limit does not see); each names its case number, so `FIRST 1`
reproduces it. Cases are derived from their number alone (random.Random(case)): deterministic.
"""

from __future__ import annotations

import io
import json
import os
import random
import resource
import signal
import sys
import traceback
from pathlib import Path
from typing import BinaryIO, TypedDict, cast

MEMORY_BUDGET = 256 << 20  # address space a case may add to the worker's
CPU_SECONDS = 10  # per case (a case takes milliseconds); --cpu N sets another
WALL_SECONDS = 60  # per case, for what the CPU limit does not see
INTERESTING = (0, 1, 2, 7, 8, 0x10, 0x38, 0x40, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000,
               0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 16, (1 << 64) - 1)


def hot_regions(data: bytes) -> list[tuple[int, int]]:
    """The byte ranges that hold structure (headers, tables, the dynamic segment, the symbol and
    version sections), read from the unmutated seed with the reader under test."""
    from wheelci.native import elfread

    stream = io.BytesIO(data)
    h = elfread.read_header(stream)
    assert h is not None
    out = [(0, 64), (h.phoff, h.phoff + h.phnum * h.phentsize), (h.shoff, h.shoff + h.shnum * h.shentsize)]
    out += [(s.offset, s.offset + s.filesz) for s in elfread.segments(stream, h) if s.type == elfread.PT_DYNAMIC]
    kinds = (elfread.SHT_DYNSYM, elfread.SHT_GNU_VERSYM, elfread.SHT_GNU_VERNEED)
    out += [(s.offset, s.offset + min(s.size, 4096)) for s in elfread.sections(stream, h) if s.type in kinds]
    return [(a, b) for a, b in out if 0 <= a < b <= len(data)]


def mutate(seed: bytes, regions: list[tuple[int, int]], rng: random.Random) -> bytes:
    """1-6 mutations: a byte, or a 2/4/8-byte field set to an interesting value, mostly inside the
    structure; now and then a cut or a repeated chunk."""
    data = bytearray(seed)
    for _ in range(rng.randint(1, 6)):
        kind = rng.random()
        if kind < 0.05 and len(data) > 1:
            del data[rng.randrange(1, len(data)):]
            continue
        if kind < 0.08:
            a = rng.randrange(len(data))
            b = min(len(data), a + rng.randint(1, 256))
            data[b:b] = data[a:b] * rng.randint(1, 8)
            continue
        lo, hi = rng.choice(regions) if rng.random() < 0.85 else (0, len(data))
        width = rng.choice((1, 2, 4, 8))
        at = lo + rng.randrange(max(1, hi - lo)) // width * width
        if at + width > len(data):
            continue
        value = rng.choice(INTERESTING) if rng.random() < 0.7 else rng.getrandbits(8 * width)
        if rng.random() < 0.2:
            value = len(data) + rng.randint(-16, 16)
        data[at:at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
    return bytes(data)


def exercise(data: bytes) -> str:
    """Every ELF reader of the stages over one file: "clean" or "refused" (a CiError)."""
    from wheelci.errors import CiError
    from wheelci.native import elf, extension

    chunks = lambda: (data[i:i + 4093] for i in range(0, len(data), 4093))  # noqa: E731  a wheel member's
    outcome = "clean"
    readers = (
        lambda: elf.read_dynamic(io.BytesIO(data)),
        # the seekable view every reader of a wheel member reads through: a binary stream, typed as its base class
        lambda: elf.read_dynamic(cast(BinaryIO, elf.member_view(chunks, len(data)))),
        lambda: elf.versioned_references(io.BytesIO(data)),
        lambda: elf.undefined_symbols(io.BytesIO(data)),
        lambda: elf._has_sections(io.BytesIO(data), elf.DEVICE_CODE_SECTIONS),
        lambda: elf.read_dynamic(io.BytesIO(data)) and elf._read_all_names(io.BytesIO(data)),
        lambda: extension.exports_pyinit(chunks, len(data)),
    )
    for read in readers:
        try:
            read()
        except CiError:
            outcome = "refused"
    return outcome


def _selftest_case(n: int) -> None:
    """Misbehaving readers the harness must catch: a stray exception, a memory hog, an endless loop."""
    if n % 3 == 0:
        raise TypeError("a reader's own bug")
    if n % 3 == 1:
        hog = [bytearray(1 << 20) for _ in range(1 << 12)]  # 4 GiB
        del hog
    while True:
        pass


class Case(TypedDict, total=False):
    """How case `case` ended: the readers' outcome, or the failure the harness caught."""

    case: int
    outcome: str
    failure: str


def run_case(seeds: list[bytes], regions: list[list[tuple[int, int]]], n: int, selftest: bool, cpu: int) -> Case:
    """Fork; the child sets its budgets and runs case n; the parent reads how it ended."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        code, text = 0, ""
        try:
            vm = int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmSize:"))) * 1024
            resource.setrlimit(resource.RLIMIT_AS, (vm + MEMORY_BUDGET, vm + MEMORY_BUDGET))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            signal.alarm(WALL_SECONDS)  # the default action ends the child: a wait the CPU limit cannot see
            if selftest:
                _selftest_case(n)
            rng = random.Random(n)
            i = rng.randrange(len(seeds))
            text = exercise(mutate(seeds[i], regions[i], rng))
        except MemoryError:
            code, text = 4, "over the memory budget"
        except BaseException:  # noqa: BLE001  any other exception is the finding
            code, text = 3, traceback.format_exc(limit=-4)
        os.write(write_end, text.encode()[:4000])
        os._exit(code)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as f:
        text = f.read().decode(errors="replace")
    if os.WIFSIGNALED(status):
        return {"case": n, "failure": f"over the time budget (signal {os.WTERMSIG(status)})"}
    code = os.WEXITSTATUS(status)
    return {"case": n, "outcome": text} if code == 0 else {"case": n, "failure": text}


def main(argv: list[str]) -> None:
    seed_dir, first, count = Path(argv[0]), int(argv[1]), int(argv[2])
    selftest = "--selftest" in argv
    cpu = int(argv[argv.index("--cpu") + 1]) if "--cpu" in argv else CPU_SECONDS
    import wheelci.native.elf  # noqa: F401  imported once, before the children fork

    seeds = [p.read_bytes() for p in sorted(seed_dir.iterdir())]
    regions = [hot_regions(s) for s in seeds]
    outcomes: dict[str, int] = {}
    failures = []
    for n in range(first, first + count):
        result = run_case(seeds, regions, n, selftest, cpu)
        if "failure" in result:
            failures.append(result)
        else:
            outcomes[result["outcome"]] = outcomes.get(result["outcome"], 0) + 1
    json.dump({"outcomes": outcomes, "failures": failures}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
