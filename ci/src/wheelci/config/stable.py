"""Stable-ABI builds: one wheel per variant (cpu, cu12, cu13) serves every torch from a target on.

A library built against LibTorch's stable C ABI with `-DTORCH_TARGET_VERSION=X.Y` loads on every
torch >= X.Y (torch >= 2.10), so the matrix shrinks from one wheel per torch release and CUDA version
to one per CUDA major. What still ties a wheel to a CUDA major: the CUDA runtime and cuDNN it links
(torch of another major brings another runtime), hence a variant per major, built with that major's
lowest CUDA (what every driver of the major runs) against its newest torch. The facts come from the
matrix; nothing here runs anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wheelci.config import matrix as mx
from wheelci.errors import CiError
from wheelci.native.stable_abi import FLOOR as FIRST, target_define
from wheelci.wheel.names import cuda_tag

def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0]))


def minor_of(version: str) -> tuple[int, int]:
    major, minor = _key(version)[:2]
    return major, minor


def parse_target(text: str) -> tuple[int, int]:
    """`2.10` -> (2, 10); refused below the first stable-ABI torch."""
    m = re.fullmatch(r"(\d+)\.(\d+)", text.strip())
    if m is None:
        raise CiError(f"bad stable-abi {text!r} (want a torch minor version such as 2.10)")
    target = (int(m[1]), int(m[2]))
    if target < FIRST:
        raise CiError(f"stable-abi {text}: LibTorch's stable ABI starts at torch {FIRST[0]}.{FIRST[1]}")
    return target


def cuda_major(cuda: str | None) -> int | None:
    return None if cuda is None else int(cuda.split(".")[0])


def variant_of(cuda: str | None) -> str:
    return cuda_tag(cuda, major=True)


def pick_row(matrix: mx.Matrix, cuda: str, target: tuple[int, int]) -> mx.CudaRow:
    """`--cuda 13` names a variant: the lowest CUDA of that major with a torch >= target. An exact
    `--cuda 13.0` is taken as given."""
    if "." in cuda:
        return matrix.row(cuda)
    if not cuda.isdigit():
        raise CiError(f"bad --cuda {cuda!r} (want a CUDA version such as 13.0, or a major such as 13)")
    rows = [r for r in matrix.rows if r.version.split(".")[0] == cuda
            and any(minor_of(t.version) >= target for t in r.torch)]
    if not rows:
        raise CiError(f"no CUDA {cuda}.x row of the matrix has a torch >= {target[0]}.{target[1]}")
    return min(rows, key=lambda r: _key(r.version))


def newest_torch(row: mx.CudaRow, target: tuple[int, int]) -> str:
    found = [t.version for t in row.torch if minor_of(t.version) >= target]
    if not found:  # an exact --cuda X.Y whose torch releases all predate the target
        raise CiError(f"CUDA {row.version} has no torch >= {target[0]}.{target[1]} in the matrix (its newest: "
                      f"{max((t.version for t in row.torch), key=_key)}): a stable-ABI build needs one")
    return max(found, key=_key)


def pypi_builds(matrix: mx.Matrix, major: int | None, target: tuple[int, int]) -> list[tuple[str, str]]:
    """(torch, CUDA) for each PyPI default Linux build >= target: of that CUDA major, or any for CPU
    (a CPU library runs on every build). Oldest first."""
    found = {t.version: r.version for r in matrix.rows for t in r.torch
             if t.on_pypi and minor_of(t.version) >= target
             and (major is None or cuda_major(r.version) == major)}
    return sorted(found.items(), key=lambda kv: _key(kv[0]))


@dataclass(frozen=True)
class StablePlan:
    """What a stable-ABI build adds to the plan."""

    target: str  # "2.10": the oldest torch the wheel serves
    variant: str  # "cpu" | "cu12" | "cu13": the local version label
    cuda_major: int | None
    serves: str  # the range, in words, for --dry-run
    defines: tuple[str, ...]  # for C++ and nvcc
    cuda_defines: tuple[str, ...]  # for nvcc (and C++ of a CUDA build: the CUDA shims need USE_CUDA)
    verify: tuple[tuple[str, str | None], ...]  # (torch, CUDA or None) verify installs: oldest, built, newest
    cudnn_floor: str | None  # the oldest cuDNN any torch of the range pins: the wheel requires >= it


def plan_stable(matrix: mx.Matrix, target_text: str, cuda: str | None, torch: str) -> StablePlan:
    target = parse_target(target_text)
    if minor_of(torch) < target:
        raise CiError(f"stable-abi {target_text} is above the build's torch {torch}: its headers cannot declare "
                      f"what torch {target_text} has (build against torch >= {target_text})")
    major = cuda_major(cuda)
    builds = pypi_builds(matrix, major, target)
    # the torch built against, the oldest and the newest of the range, and its middle when that makes
    # fewer than three: each torch version once (the build's own CUDA build where it is one of them)
    picks = {torch: cuda}
    for version, row in (builds[0], builds[-1], builds[len(builds) // 2]) if builds else ():
        if len(picks) < 3:
            picks.setdefault(version, row)
    verify = tuple(sorted(picks.items(), key=lambda p: _key(p[0])))
    where = f" with CUDA {major}" if major else " (any build, CPU or CUDA)"
    on_pypi = f"; PyPI has {builds[0][0]} to {builds[-1][0]}" if builds else ""
    defines = (target_define(target),)
    return StablePlan(
        target=f"{target[0]}.{target[1]}", variant=variant_of(cuda), cuda_major=major,
        serves=f"torch >= {target[0]}.{target[1]}{where}{on_pypi}", defines=defines,
        cuda_defines=(*defines, "-DUSE_CUDA") if major else (),
        verify=verify, cudnn_floor=cudnn_floor(matrix, major, target))


def cudnn_floor(matrix: mx.Matrix, major: int | None, target: tuple[int, int]) -> str | None:
    """The oldest cuDNN that a torch of this CUDA major >= target pins (None for CPU)."""
    pins = [t.cudnn.split("==", 1)[1] for r in matrix.rows if major and cuda_major(r.version) == major
            for t in r.torch if minor_of(t.version) >= target and "==" in t.cudnn]
    return min(pins, key=_key) if pins else None


# NEEDED sonames of the CUDA runtime whose wheel the library requires by major (other CUDA libraries come
# with torch of the right major, which the import-time check enforces). soname stem -> package per major.
RUNTIME_WHEELS = {"libcudart.so": {12: "nvidia-cuda-runtime-cu12", 13: "nvidia-cuda-runtime"}}
CUDNN_WHEELS = {12: "nvidia-cudnn-cu12", 13: "nvidia-cudnn-cu13"}


def requirements(needed: set[str], target: str, major: int | None, cudnn_floor: str | None) -> list[str]:
    """Requires-Dist of a stable wheel: torch >= target (never ==), the CUDA runtime of the major it
    links, and cuDNN >= the oldest pin of the range (cuDNN 9.y runs code built against 9.z, z <= y)."""
    reqs = [f"torch>={target}"]
    for n in sorted(needed):
        stem, _, ver = n.partition(".so.")
        wheels = RUNTIME_WHEELS.get(stem + ".so")
        if wheels and ver.isdigit() and int(ver) in wheels:
            reqs.append(f"{wheels[int(ver)]}>={ver},<{int(ver) + 1}")
        if stem == "libcudnn" and ver.isdigit():
            if major not in CUDNN_WHEELS:
                raise CiError(f"the wheel needs {n} but its CUDA major ({major}) has no cuDNN wheel known")
            floor = f">={cudnn_floor}," if cudnn_floor and cudnn_floor.split(".")[0] == ver else f">={ver},"
            reqs.append(f"{CUDNN_WHEELS[major]}{floor}<{int(ver) + 1}")
    return reqs
