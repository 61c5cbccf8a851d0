"""The CUDA build matrix (wheelci/config/matrix.toml) as typed, validated rows.

The facts live in the TOML file with their sources; this module only types them and answers the
questions every stage asks (which torch lines a CUDA row builds, which archs its nvcc accepts).
Stdlib only, so it also imports inside a manylinux image's bare Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from wheelci.util import toml as tomllib
from wheelci.wheel.names import cuda_tag

from wheelci.config.strict import check_keys
from wheelci.errors import CiError

MATRIX_FILE = Path(__file__).with_name("matrix.toml")

# manylinux policies, oldest (widest-compatible) first: a wheel can be no older than what it links.
POLICIES = ("manylinux2014", "manylinux_2_28", "manylinux_2_34")

_ARCH = re.compile(r"(\d+)\.(\d+)([af]?)(\+PTX)?")  # fullmatch: `$` passes a trailing newline


@dataclass(frozen=True)
class TorchLine:
    """What every torch X.Y wheel needs from an extension built against it."""

    minor: str
    python: tuple[str, ...]
    manylinux: str
    cxx11_abi: bool


@dataclass(frozen=True)
class TorchBuild:
    """One torch release built for one CUDA version."""

    version: str
    cudnn: str
    on_pypi: bool  # PyPI's default Linux wheel of this version IS this CUDA build
    source: str


@dataclass(frozen=True)
class Image:
    manylinux: str
    name: str
    origin: str  # "ameli" | "quay" | "ours"
    gcc: int
    cxx11_abi: bool  # its compiler can emit the cxx11 ABI (devtoolset on manylinux2014 cannot)
    source: str
    build_args: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class CudaRow:
    version: str
    full_version: str
    torch_index_url: str
    default_torch: str  # "": no torch of its own in the matrix (one is named, and read from the index)
    gcc_max: int
    arch_list: str
    accepted_archs: tuple[str, ...]
    nvcc_flags: tuple[str, ...]
    nvcc_wheels: tuple[str, ...]  # NVIDIA's wheels of this toolkit's nvcc (where the arch/GCC facts are measured)
    nvcc_wheel_has_nvcc: bool  # those wheels ship the nvcc driver itself (cu13), not only ptxas (cu11/cu12)
    toolkit_wheels: tuple[str, ...]  # with nvcc_wheels, a whole compiling toolkit (cicc, CCCL, cudart headers)
    torch: tuple[TorchBuild, ...]
    images: tuple[Image, ...]

    @property
    def tag(self) -> str:
        """The PyTorch index suffix: 11.8 -> cu118."""
        return cuda_tag(self.version)

    def torch_build(self, version: str) -> TorchBuild | None:
        return next((t for t in self.torch if t.version == version), None)


@dataclass(frozen=True)
class Matrix:
    default_torch: str
    cpu_index_url: str
    our_image_repo: str
    our_dockerfile: str
    arm_gpus: dict[str, str]  # compute capability -> the Arm-hosted GPUs that have it (aarch64 plans)
    torch_lines: tuple[TorchLine, ...]
    rows: tuple[CudaRow, ...]

    @property
    def versions(self) -> list[str]:
        return [r.version for r in self.rows]

    def row(self, cuda: str) -> CudaRow:
        for r in self.rows:
            if r.version == cuda:
                return r
        raise CiError(f"unsupported CUDA version {cuda!r} (supported: {', '.join(self.versions)})")

    def torch_line(self, torch: str) -> TorchLine:
        minor = ".".join(torch.split("+")[0].split(".")[:2])
        for line in self.torch_lines:
            if line.minor == minor:
                return line
        known = ", ".join(t.minor for t in self.torch_lines)
        raise CiError(f"unsupported torch {torch!r} (torch lines in the matrix: {known})")


def _keys(cls: type, **toml_names: str) -> tuple[str, ...]:
    """The TOML keys of a table: its dataclass's fields, under their TOML name where that differs."""
    return tuple(toml_names.get(f.name, f.name) for f in fields(cls))


_TOP = _keys(Matrix, torch_lines="torch_line", rows="cuda")
_ROW = _keys(CudaRow, images="image")
_TORCH = _keys(TorchBuild)
_IMAGE = _keys(Image)
_LINE = _keys(TorchLine)


def _image(d: dict[str, Any]) -> Image:
    check_keys(d, _IMAGE, "a [[cuda.image]] of the matrix")
    return Image(manylinux=d["manylinux"], name=d["name"], origin=d["origin"], gcc=int(d["gcc"]),
                 cxx11_abi=bool(d["cxx11_abi"]), source=d["source"],
                 build_args={k: str(v) for k, v in d.get("build_args", {}).items()})


def _torch(d: dict[str, Any]) -> TorchBuild:
    check_keys(d, _TORCH, "a [[cuda.torch]] of the matrix")
    return TorchBuild(d["version"], d["cudnn"], bool(d.get("on_pypi", False)), d["source"])


def _row(d: dict[str, Any]) -> CudaRow:
    check_keys(d, _ROW, f"the matrix's [[cuda]] {d.get('version', '')!s}".rstrip())
    return CudaRow(
        version=d["version"], full_version=d["full_version"], torch_index_url=d["torch_index_url"],
        default_torch=d["default_torch"], gcc_max=int(d["gcc_max"]), arch_list=d["arch_list"],
        accepted_archs=tuple(d["accepted_archs"]), nvcc_flags=tuple(d["nvcc_flags"]),
        nvcc_wheels=tuple(d["nvcc_wheels"]), nvcc_wheel_has_nvcc=bool(d["nvcc_wheel_has_nvcc"]),
        toolkit_wheels=tuple(d.get("toolkit_wheels", ())),
        torch=tuple(_torch(t) for t in d.get("torch", ())),
        images=tuple(_image(i) for i in d["image"]),
    )


def parse(text: str) -> Matrix:
    """Parse matrix TOML text; a malformed file is a CiError naming what is wrong."""
    try:
        d = check_keys(tomllib.loads(text), _TOP, "the CUDA matrix")
        return Matrix(
            default_torch=d["default_torch"], cpu_index_url=d["cpu_index_url"],
            our_image_repo=d["our_image_repo"], our_dockerfile=d["our_dockerfile"],
            arm_gpus={str(k): str(v) for k, v in d["arm_gpus"].items()},
            torch_lines=tuple(TorchLine(t["minor"], tuple(t["python"]), t["manylinux"], bool(t["cxx11_abi"]))
                              for t in (check_keys(t, _LINE, "a [[torch_line]] of the matrix") for t in d["torch_line"])),
            rows=tuple(_row(r) for r in d["cuda"]),
        )
    except CiError as e:
        raise CiError(f"bad CUDA matrix: {e}") from None
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as e:
        raise CiError(f"bad CUDA matrix: {type(e).__name__}: {e}") from None


@lru_cache(maxsize=None)
def load(path: Path = MATRIX_FILE) -> Matrix:
    return parse(Path(path).read_text())


def rows() -> tuple[CudaRow, ...]:
    return load().rows


def accepted_archs(cuda: str) -> tuple[str, ...]:
    """The compute capabilities (e.g. "86", "90a") this CUDA version's nvcc accepts."""
    return load().row(cuda).accepted_archs


def split_arch_list(text: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST accepts ';', ' ' or ',' as separators."""
    return [a for a in re.split(r"[;, ]+", text.strip()) if a]


def arch_code(entry: str) -> str:
    """'8.6' -> '86', '9.0a+PTX' -> '90a'; CiError for anything else."""
    m = _ARCH.fullmatch(entry)
    if not m:
        raise CiError(f"bad CUDA arch {entry!r} (want e.g. 8.6, 9.0a or 9.0+PTX)")
    return f"{m[1]}{m[2]}{m[3]}"


def arch_list_macro(text: str) -> str:
    """nvcc's __CUDA_ARCH_LIST__ for a build of this arch list: each architecture's number once, ascending
    ('8.6;9.0a+PTX;7.5' -> '750,860,900': arch-specific and family targets count as their number)."""
    numbers = {int(arch_code(e).rstrip("af")) * 10 for e in split_arch_list(text)}
    return ",".join(str(n) for n in sorted(numbers))


def check_arch_list(cuda: str, text: str) -> str:
    """Validate an arch list against nvcc's accepted archs; return it normalized with ';'."""
    entries = split_arch_list(text)
    if not entries:
        raise CiError("empty CUDA arch list")
    accepted = accepted_archs(cuda)
    rejected = [e for e in entries if arch_code(e) not in accepted]
    if rejected:
        lowest = min((a for a in accepted), key=lambda a: int(re.sub(r"\D", "", a)))
        raise CiError(f"nvcc {cuda} rejects arch {', '.join(rejected)} (it accepts compute_{lowest} and up: "
                      f"{', '.join(accepted)})")
    return ";".join(entries)
