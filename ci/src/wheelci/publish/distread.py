"""What a directory of distributions holds, read for ci.index: the wheels, sdists and variants files
found under DIR (`scan`), each hashed and its core metadata read and checked against its file name
(`read_dist`).

Apart from the pages and the writes because this is the one place ci.index opens a distribution: wheels
through ci.wheel.zipread, the zip reader every stage shares, with core metadata capped at its
METADATA_CAP (a compression bomb is refused, not inflated), and sdists through a bounded tar or zip
read. The zip/tar/email modules load only when a file must be read, which keeps the unchanged re-run
near interpreter start-up time.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from wheelci.config.sdist import open_tar
from wheelci.errors import CiError
from wheelci.util.digest import sha256_file
from wheelci.wheel.metadata import METADATA_CAP, parse_metadata as read
from wheelci.wheel.names import WheelName, classify, normalize, same_version
from wheelci.wheel.variant import DOC_CAP, dumps, parse, parse_variants_filename, read_wheel
from wheelci.wheel.zipread import WheelArchive

# Sidecar files beside distributions that are ours or expected there: skipped without a warning.
QUIET_SUFFIXES = (".metadata", ".asc", ".sig", ".publish.attestation")
PAGE_NAMES = ("index.html", "index.json")  # index pages (ours when --out is DIR): never distributions


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class Dist:
    """One distribution file as the pages show it."""

    filename: str
    path: str  # relative to DIR, posix separators
    project: str  # PEP 503 normalized
    version: str
    size: int
    sha256: str
    requires_python: str | None
    metadata_sha256: str | None  # wheels only: hash of the .metadata file's bytes
    variant: str | None = None  # a variant wheel's label (PEP 825)
    variant_json: str | None = None  # its variant.json; for a variants file, the file


# ---------------------------------------------------------------- reading files


def wheel_metadata(path: Path) -> bytes:
    """The bytes of a wheel's .dist-info/METADATA (the PEP 658 file is exactly these bytes).

    Read through ci.wheel.zipread, the reader every stage uses: zipfile reads another set of members from
    a crafted zip, so ci.index would publish metadata of a wheel ci.check refuses. Capped by the size
    the zip directory gives (and checked while inflating): a deflate bomb is refused, never inflated.
    """
    try:
        with WheelArchive.open(path) as wa:
            name = f"{wa.dist_info}/METADATA"
            if name not in wa:
                raise CiError(f"{path.name}: no {name} in the wheel")
            return wa.read(name, METADATA_CAP)
    except OSError as e:
        raise CiError(f"{path.name}: not a readable wheel ({e.strerror})") from None


def _capped(f: IO[bytes], size: int, cap: int, what: str) -> bytes:
    """A member's bytes, refused over cap: by the size its archive gives, before inflating anything,
    and by reading at most one byte more than cap, for an archive whose size lies."""
    data = f.read(cap + 1) if size <= cap else b""
    if size > cap or len(data) > cap:
        raise CiError(f"{what} is over the {cap >> 20} MiB this tool reads for it ({max(size, len(data))}"
                      f"{'' if size > cap else '+'} bytes uncompressed)")
    return data


def sdist_metadata(path: Path) -> bytes | None:
    """PKG-INFO of an sdist (top-level directory only), or None when it has none. Read with the
    METADATA cap: a gzip or deflate bomb never gets more memory than that."""
    import tarfile
    import zipfile
    try:
        if path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                for i in zf.infolist():
                    if i.filename.count("/") == 1 and i.filename.endswith("/PKG-INFO"):
                        with zf.open(i) as f:
                            return _capped(f, i.file_size, METADATA_CAP, f"{path.name}: {i.filename}")
            return None
        with open_tar(path) as tf:  # headers read bounded: a 90-byte sdist can declare a 1 TB name
            for m in tf:
                if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"):
                    member = tf.extractfile(m)
                    return _capped(member, m.size, METADATA_CAP, f"{path.name}: {m.name}") if member else None
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as e:
        raise CiError(f"{path.name}: not a readable sdist ({e})") from None
    return None


def parse_metadata(raw: bytes) -> dict[str, str]:
    """Name, Version and Requires-Python from core metadata (ci.wheel.metadata, the one reader)."""
    meta = read(raw.decode("utf-8", "replace"))
    return {k: found[0] for k in ("Name", "Version", "Requires-Python") if (found := meta.get_all(k)) and found[0]}


def read_dist(root: Path, rel: str, kind: str, project: str, version: str,
              st: os.stat_result) -> tuple[Dist, bytes | None]:
    """Hash a file and read its metadata; checks the metadata agrees with the file name."""
    path = root / rel
    if kind == "variants":
        return read_variants_file(path, rel, project, version, st), None
    raw = wheel_metadata(path) if kind == "wheel" else sdist_metadata(path)
    meta = parse_metadata(raw) if raw else {}
    if kind == "wheel" and not {"Name", "Version"} <= meta.keys():
        raise CiError(f"{path.name}: METADATA lacks Name or Version")
    if "Name" in meta and normalize(meta["Name"]) != project:
        raise CiError(f"{path.name}: metadata names project {meta['Name']!r}, the file name {project!r}")
    if "Version" in meta and not same_version(meta["Version"], version):  # an sdist's PKG-INFO too:
        # pip and uv build the sdist and install what its metadata says, not what the page listed
        raise CiError(f"{path.name}: metadata version {meta['Version']} != file name version {version}")
    label = path.name.endswith(".whl") and _wheel_label(path.name)
    dist = Dist(
        filename=path.name, path=rel, project=project, version=version, size=st.st_size,
        sha256=sha256_file(path), requires_python=meta.get("Requires-Python"),
        metadata_sha256=hashlib.sha256(raw).hexdigest() if kind == "wheel" and raw else None,
        variant=label or None, variant_json=wheel_variant(path) if label else None)
    return dist, (raw if kind == "wheel" else None)


def _wheel_label(filename: str) -> str | None:
    return WheelName.parse(filename).variant


def wheel_variant(path: Path) -> str:
    """A variant wheel's .dist-info/variant.json, checked against its label (ci.wheel.variant)."""
    with WheelArchive.open(path) as wa:
        return dumps(read_wheel(wa)).decode()  # normalized: the same properties compare equal


def read_variants_file(path: Path, rel: str, project: str, version: str, st: os.stat_result) -> Dist:
    """A `{name}-{version}-variants.json` found in DIR: checked, hashed and kept whole (a few hundred bytes)."""
    with open(path, "rb") as f:
        data = f.read(DOC_CAP + 1)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CiError(f"{rel}: not UTF-8 JSON") from None
    parse(text, rel)
    return Dist(filename=path.name, path=rel, project=project, version=version, size=st.st_size,
                sha256=hashlib.sha256(data).hexdigest(), requires_python=None, metadata_sha256=None,
                variant_json=text)


# ---------------------------------------------------------------- scanning


def scan(root: Path, out: Path) -> tuple[dict[str, tuple[str, str, str, os.stat_result]], list[str]]:
    """Distributions under root (not under out or hidden dirs): rel path -> (kind, project, version, stat)."""
    found: dict[str, tuple[str, str, str, os.stat_result]] = {}
    skipped: list[str] = []
    out_resolved = out.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        dirnames[:] = sorted(n for n in dirnames
                             if not n.startswith(".") and (d / n).resolve() != out_resolved)
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            rel = (d / name).relative_to(root).as_posix()
            c = classify(name)
            if c is None and (v := parse_variants_filename(name)):
                c = ("variants", *v)
            if c is None:
                if not name.endswith(QUIET_SUFFIXES) and name not in PAGE_NAMES:
                    skipped.append(rel)
                continue
            found[rel] = (*c, (d / name).stat())
    return found, skipped
