"""Unpack an sdist (.tar.gz) to build it: every member checked before anything is written, and what it
unpacks to bounded by what it holds.

Checked first: no absolute paths, no `..`, no devices, one top directory, every link resolved through
the archive's other links to a place inside the top directory, nothing written through a link. Then
extracted with tarfile's `data` filter as a second guard.

Bounded: a tar header can declare any size, and a few hundred gzipped bytes can declare terabytes.
Headers are read through `_BoundedGzip`, which never allocates more than the stream holds (a long-name
or pax header declaring 1 TB is read as the bytes that are there). GNU sparse members are refused: a
sparse file's holes are bytes the archive does not hold (a 164-byte sdist unpacked a 1 GB
pyproject.toml that the build then read into memory). A hard link must name a regular file that
comes before it, and counts as a copy of it (a build copies the tree, and a copy does not keep hard
links): the links together may add at most as many bytes as the regular files hold.
"""

from __future__ import annotations

import contextlib
import gzip
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Iterator

from wheelci.errors import CiError
from wheelci.util.sizes import format_size

SDIST_SUFFIXES = (".tar.gz", ".tgz")
MAX_LINK_HOPS = 40  # the kernel's limit (ELOOP)
MAX_NAME = 4096  # PATH_MAX: a longer member name is no path the build could open
MAX_DEPTH = 256  # directory levels in a member name; link checks walk them, so their cost stays linear
# What an sdist may unpack to, in proportion to its own size: source compresses about 4-10x, so 100x (and
# at least 1 GiB) serves any real project, while a 3 MB sdist of zeros can no longer fill 3 GiB of disk.
UNPACK_RATIO, UNPACK_FLOOR = 100, 1 << 30
MEMBERS_PER_BYTE, MEMBERS_FLOOR = 1 / 50, 20_000  # a 1 MB sdist of 200,000 empty files took a dry run 72 s
_CHUNK = 1 << 20


def is_sdist(path: Path) -> bool:
    return path.name.endswith(SDIST_SUFFIXES)


class _BoundedGzip(gzip.GzipFile):
    """A gzip stream whose read(n) allocates what it returns, never n: tarfile reads a header's
    declared size in one call, and a buffered read of n bytes allocates n up front."""

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0 or size <= _CHUNK:
            return super().read(size)
        parts = []
        while size > 0:
            part = super().read(min(size, _CHUNK))
            if not part:
                break
            parts.append(part)
            size -= len(part)
        return b"".join(parts)


@contextlib.contextmanager
def open_tar(sdist: Path) -> Iterator[tarfile.TarFile]:
    """The sdist as a TarFile whose headers are read bounded (_BoundedGzip); any way the archive is
    unreadable, in the block too, is one CiError."""
    try:
        with _BoundedGzip(sdist, "rb") as raw, tarfile.open(fileobj=raw, mode="r:") as tar:
            yield tar
    except (tarfile.TarError, EOFError, OSError, zlib.error, ValueError) as e:
        # ValueError: tarfile's own parsing of a malformed header (a sparse map cut short, a bad number)
        raise CiError(f"{sdist.name}: not a readable sdist ({e})") from None


def _check_member(member: tarfile.TarInfo, sdist: Path) -> str | None:
    """The member's top directory (None for the archive's root, `.` or `./`), or CiError."""
    if len(member.name) > MAX_NAME or len(member.linkname) > MAX_NAME:
        raise CiError(f"{sdist.name}: a member name longer than {MAX_NAME} bytes; refused before extraction")
    name = PurePosixPath(member.name)
    if len(name.parts) > MAX_DEPTH or len(PurePosixPath(member.linkname).parts) > MAX_DEPTH:
        raise CiError(f"{sdist.name}: member {member.name[:200]!r} is more than {MAX_DEPTH} directories deep; "
                      "refused before extraction")
    if not name.parts:
        if member.isdir():
            return None  # `tar -C dir .` writes the root itself first
        raise CiError(f"{sdist.name}: member {member.name!r} names the archive's root but is not a directory; "
                      "refused before extraction")
    if name.is_absolute() or ".." in name.parts:
        raise CiError(f"{sdist.name}: member {member.name!r} points outside the sdist; refused before extraction")
    if member.issparse():
        raise CiError(f"{sdist.name}: member {member.name!r} is a sparse file, whose holes the archive does not "
                      "hold; refused before extraction (an sdist holds plain files)")
    if not (member.issym() or member.islnk() or member.isfile() or member.isdir()):
        raise CiError(f"{sdist.name}: member {member.name!r} is not a file or directory; refused")
    return name.parts[0]


def _check_sizes(members: list[tarfile.TarInfo], sdist: Path) -> None:
    """Each hard link names a regular file that comes before it (what tarfile extracts it from), the
    links together add at most as many bytes as the regular files hold, and the whole unpacks to no more
    than UNPACK_RATIO times the sdist (nor more members than its size can hold)."""
    packed = sdist.stat().st_size
    if len(members) > max(MEMBERS_FLOOR, packed * MEMBERS_PER_BYTE):
        raise CiError(f"{sdist.name}: {len(members)} members in {format_size(packed)}; refused before extraction")
    files: dict[tuple[str, ...], int] = {}
    linked = 0
    for m in members:
        parts = PurePosixPath(m.name).parts
        if m.islnk():
            size = files.get(PurePosixPath(m.linkname).parts)
            if size is None:
                raise CiError(f"{sdist.name}: hard link {m.name!r} -> {m.linkname!r} names no regular file "
                              "before it; refused before extraction")
            linked += size
        elif m.isreg():
            files[parts] = m.size  # a later member of the same name replaces it: counted once
        else:
            files.pop(parts, None)
    held = sum(files.values())
    if linked > held:
        raise CiError(f"{sdist.name}: its hard links would unpack {format_size(linked)} of copies from "
                      f"{format_size(held)} of files; refused before extraction")
    written = sum(m.size for m in members if m.isreg()) + linked  # a repeated name is written each time
    if written > max(UNPACK_FLOOR, UNPACK_RATIO * packed):
        raise CiError(f"{sdist.name}: would unpack {format_size(written)} from {format_size(packed)}; "
                      "refused before extraction")


class _LinkLoop(Exception):
    """A link resolution that takes more than MAX_LINK_HOPS links, or climbs deeper than MAX_DEPTH."""


def resolve_in_archive(start: tuple[str, ...], target: str,
                       links: dict[tuple[str, ...], str]) -> tuple[str, ...] | None:
    """Where `target`, read from directory `start`, lands once extracted: the path from the extraction
    root, each symlink member on the way followed as the kernel will; None above the root or absolute.
    A link read on its own proves nothing: `a -> .` then `b -> a/..` leaves through a, and
    `x/a -> ..` then `y -> x/a/..` climbs two levels that read as none. Raises _LinkLoop."""
    here = list(start)
    todo = list(reversed(PurePosixPath(target).parts))
    hops = 0
    while todo:
        part = todo.pop()
        if part == "/":
            return None
        if part == "..":
            if not here:
                return None
            here.pop()
            continue
        here.append(part)
        if len(here) > MAX_DEPTH:
            raise _LinkLoop
        link = links.get(tuple(here))
        if link is not None:
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise _LinkLoop
            here.pop()
            todo.extend(reversed(PurePosixPath(link).parts))
    return tuple(here)


def _check_links(members: list[tarfile.TarInfo], top: str, sdist: Path) -> None:
    """Every link, resolved through the others, stays inside the top directory, and no member is
    written through a link: what lands on disk is what was checked, whatever the members' order
    (tarfile's filter checks a link against the disk of that moment, before the links it walks exist)."""
    links = {PurePosixPath(m.name).parts: m.linkname for m in members if m.issym()}
    linked = {PurePosixPath(m.name).parts for m in members if m.issym() or m.islnk()}
    seen: set[tuple[str, ...]] = set()
    for m in members:
        parts = PurePosixPath(m.name).parts
        under = next((parts[:i] for i in range(1, len(parts)) if parts[:i] in linked), None)
        if under is not None:
            raise CiError(f"{sdist.name}: member {m.name!r} is written through the link {'/'.join(under)!r}; "
                          "refused before extraction")
        if parts in linked and parts in seen:
            raise CiError(f"{sdist.name}: link {m.name!r} appears twice with another member of that name; "
                          "refused before extraction")
        seen.add(parts)
    for m in members:
        if not (m.issym() or m.islnk()):
            continue
        start = PurePosixPath(m.name).parts[:-1] if m.issym() else ()
        try:
            lands = resolve_in_archive(start, m.linkname, links)
        except _LinkLoop:
            raise CiError(f"{sdist.name}: link {m.name!r} -> {m.linkname!r} goes round a loop of links (or more "
                          f"than {MAX_DEPTH} directories deep); refused before extraction") from None
        if lands is None or lands[:1] != (top,):
            raise CiError(f"{sdist.name}: link {m.name!r} -> {m.linkname!r} leads outside the sdist; "
                          "refused before extraction")


def extract_sdist(sdist: Path, dest: Path) -> Path:
    """The sdist's project directory, extracted under dest after every member was checked."""
    with open_tar(sdist) as tar:
        members = tar.getmembers()
        tops = {top for m in members if (top := _check_member(m, sdist)) is not None}
        if len(tops) != 1:
            raise CiError(f"{sdist.name}: an sdist has one top directory, this has {len(tops)}")
        _check_links(members, next(iter(tops)), sdist)
        _check_sizes(members, sdist)
        dest.mkdir(parents=True, exist_ok=True)
        tar.extractall(dest, members=members, filter="data")
    return dest / tops.pop()
