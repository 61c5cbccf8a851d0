"""Patch a built wheel in place of rebuilding it: `python -m ci.patch WHEEL --patch FILE -w DIR`.

Applies unified diffs (`git diff` style, paths relative to the wheel root, -p1) to members, can append
a local version label (2.13.0+cpu -> 2.13.0+cpu.LABEL: the .dist-info, METADATA and file name move
together) and edit Requires-Dist (e.g. drop torch's triton requirement to break the torch<->triton
cycle). Everything it does not touch is copied as compressed bytes by ci.wheel.zipwrite, so patching a
192 MB torch wheel costs well under a second instead of a 30 s unpack+repack.

Hunks must match exactly (no fuzz); a hunk may sit at another line than its header says (as
`patch` and `git apply` allow). A patch that does not apply names the file and hunk, and nothing
is written. RECORD hashes of the input are verified first unless --no-verify.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence

from wheelci.errors import CiError
from wheelci.native.loadorder import order_for_wheel, preload_members, top_package
from wheelci.wheel.metadata import edit_headers, get_headers
from wheelci.wheel.names import local_version, normalize
from wheelci.wheel.requirements import parse_requirement
from wheelci.wheel.rewrite import rewrite
from wheelci.wheel.zipread import WheelArchive

if TYPE_CHECKING:
    class EditHeaders(Protocol):
        """wheelci.wheel.metadata.edit_headers, as _requires_edit is given it."""

        def __call__(self, text: str, *, remove: Callable[[str, str], bool] | None = ...,
                     append: Iterable[tuple[str, str]] = ...) -> str: ...


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_EOL = "\\ No newline at end of file"


@dataclass
class Hunk:
    header: str
    old_start: int
    new_start: int
    old: list[str] = field(default_factory=list)  # lines with their newlines, as they must be found
    new: list[str] = field(default_factory=list)  # lines that replace them


@dataclass
class FilePatch:
    source: str  # the patch file, for messages
    old: str | None  # member path, None when the patch creates the file
    new: str | None  # None when it deletes the file
    hunks: list[Hunk] = field(default_factory=list)
    mode: int | None = None  # "new file mode 100755"

    @property
    def path(self) -> str:
        return self.new or self.old or ""


def _strip(path: str, source: str) -> str | None:
    """-p1 on a ---/+++ path; None for /dev/null."""
    path = path.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    if path.startswith('"'):
        raise CiError(f"{source}: quoted paths in patches are not supported: {path}")
    if "/" not in path:
        raise CiError(f"{source}: path {path!r} has no a/ or b/ prefix to strip (-p1)")
    return path.split("/", 1)[1]


def split_lines(text: str) -> list[str]:
    """Lines as git and patch see them: ended by "\n" only, ends kept. str.splitlines() also splits
    at "\r", U+2028, form feeds and more, which would shift every hunk of such a file."""
    lines = text.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    return out + [lines[-1]] if lines[-1] else out


def parse_patch(text: str, source: str) -> list[FilePatch]:
    """Parse a unified diff into per-file hunks (git extended headers understood, binary refused)."""
    lines = split_lines(text)
    out: list[FilePatch] = []
    mode: int | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            mode = None
        elif m := re.match(r"^new file mode (\d+)", line):
            mode = int(m.group(1), 8)
        elif line.startswith(("rename from", "copy from", "GIT binary patch", "Binary files")):
            raise CiError(f"{source}: renames, copies and binary patches are not supported")
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            fp = FilePatch(source, _strip(line[4:], source), _strip(lines[i + 1][4:], source), mode=mode)
            mode = None
            i += 2
            while i < len(lines) and (h := _HUNK.match(lines[i])):
                i = _parse_hunk(lines, i, h, fp)
            if not fp.hunks:
                raise CiError(f"{source}: no hunks for {fp.path}")
            out.append(fp)
            continue
        i += 1
    if not out:
        raise CiError(f"{source}: not a unified diff (no ---/+++ file headers)")
    return out


def _parse_hunk(lines: list[str], i: int, h: re.Match[str], fp: FilePatch) -> int:
    old_len = int(h.group(2)) if h.group(2) is not None else 1
    new_len = int(h.group(4)) if h.group(4) is not None else 1
    hunk = Hunk(lines[i].rstrip("\n"), int(h.group(1)), int(h.group(3)))
    i += 1
    o = n = 0
    last: list[list[str]] = []
    while i < len(lines) and (o < old_len or n < new_len or lines[i].startswith("\\")):
        line = lines[i]
        tag, body = line[:1], line[1:]
        if line.startswith("\\"):  # "\ No newline at end of file": the previous line has no newline
            for target in last:
                target[-1] = target[-1].rstrip("\n")
        elif tag in (" ", "-", "+") or line in ("\n", "\r\n"):
            if line in ("\n", "\r\n"):  # some editors strip the space of an empty context line
                tag, body = " ", line
            last = []
            if tag in (" ", "-"):
                hunk.old.append(body)
                last.append(hunk.old)
                o += 1
            if tag in (" ", "+"):
                hunk.new.append(body)
                last.append(hunk.new)
                n += 1
        else:
            break
        i += 1
    if o != old_len or n != new_len:
        raise CiError(f"{fp.source}: malformed hunk {hunk.header} for {fp.path} (line counts do not match)")
    fp.hunks.append(hunk)
    return i


def apply_file_patch(text: str, fp: FilePatch) -> str:
    """Apply fp's hunks to text; CiError naming the file and hunk that does not match."""
    lines = split_lines(text)
    offset = 0  # how far earlier hunks moved the lines
    floor = 0  # a hunk never matches before the end of the previous one
    for number, h in enumerate(fp.hunks, 1):
        want = (h.old_start if not h.old else h.old_start - 1) + offset
        at = _find(lines, h.old, max(want, floor), floor)
        if at is None:
            raise CiError(f"{fp.source}: hunk #{number} ({h.header}) does not apply to {fp.path}")
        lines[at: at + len(h.old)] = h.new
        offset += len(h.new) - len(h.old) + (at - want)
        floor = at + len(h.new)
    return "".join(lines)


def _find(lines: list[str], old: list[str], want: int, floor: int) -> int | None:
    """The position nearest `want` (not before floor) where `old` matches exactly."""
    n = len(old)
    for delta in range(0, len(lines) + 1):
        for at in ((want - delta, want + delta) if delta else (want,)):
            if floor <= at <= len(lines) - n and lines[at: at + n] == old:
                return at
        if want - delta < floor and want + delta > len(lines) - n:
            break
    return None


@dataclass(frozen=True)
class PatchResult:
    wheel: Path
    version: str
    changed: list[str]
    added: list[str]
    removed: list[str]


def patch_wheel(wheel: Path, out_dir: Path, patches: list[Path], *, label: str | None = None,
                remove_requires: Sequence[str] = (), add_requires: Sequence[str] = (),
                preload_from: Sequence[Path] = (), package: str | None = None,
                verify: bool = True) -> PatchResult:
    """One pass over the wheel: diffs, Requires-Dist edits, a local version and, with `preload_from`
    (the wheels or installed dirs providing its native dependencies), a dependency-order preload
    injected into its top package (ci.preload), so it imports one-directory-per-package."""

    parsed = [fp for p in patches for fp in parse_patch(_read_patch(p), p.name)]
    with WheelArchive.open(wheel) as wa:
        contents: dict[str, str | None] = {}  # member -> new text (None: deleted)
        modes: dict[str, int] = {}
        for fp in parsed:
            if fp.path == wa.record_name:
                raise CiError(f"{fp.source}: RECORD is regenerated, do not patch it")
            if fp.old is None:
                if fp.path in wa or contents.get(fp.path) is not None:
                    raise CiError(f"{fp.source}: {fp.path} already exists in the wheel")
                current = ""
            elif fp.old in contents:
                earlier = contents[fp.old]
                if earlier is None:
                    raise CiError(f"{fp.source}: {fp.old} was deleted by an earlier patch")
                current = earlier
            elif fp.old in wa:
                try:
                    current = wa.read(fp.old).decode("utf-8")
                except UnicodeDecodeError:
                    raise CiError(f"{fp.source}: {fp.old} is not a UTF-8 text file") from None
            else:
                raise CiError(f"{fp.source}: {fp.old} is not in {wheel.name}")
            contents[fp.path] = apply_file_patch(current, fp) if fp.new else None
            if fp.mode:
                modes[fp.path] = fp.mode
        if preload_from:
            init = f"{top_package([m.name for m in wa.members], wa.name.project, package)}/__init__.py"
            order = order_for_wheel(wheel, preload_from)
            injected = preload_members(wa, order, package=package, init_text=contents.get(init))
            contents.update({k: v.decode("utf-8") for k, v in injected.items()})
        edit = _requires_edit(remove_requires, add_requires, wa.metadata, edit_headers)
        version = local_version(wa.name.version, label) if label else None
        replace = {k: v.encode() for k, v in contents.items() if v is not None and k in wa}
        add = {k: (v.encode(), modes.get(k, 0o644)) for k, v in contents.items() if v is not None and k not in wa}
        removed = [k for k, v in contents.items() if v is None]
        if not (replace or add or removed or version or edit):
            raise CiError("nothing to do: give --patch/--patch-dir, --local-version or Requires-Dist edits")
        out = rewrite(wa, out_dir, replace=replace, add=add, remove=removed, version=version,
                      metadata_edit=edit, verify=verify)
        return PatchResult(out, version or wa.name.version, sorted(replace), sorted(add), sorted(removed))


def _read_patch(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")  # no newline translation: a CRLF diff stays CRLF
    except FileNotFoundError:
        raise CiError(f"no such patch file: {path}") from None
    except (UnicodeDecodeError, IsADirectoryError) as e:
        raise CiError(f"cannot read patch {path}: {e}") from None


def _requires_edit(remove: Sequence[str], add: Sequence[str], metadata: str,
                   edit_headers: EditHeaders) -> Callable[[str], str] | None:
    """A METADATA edit dropping Requires-Dist for the given names and appending new ones (validated)."""
    if not remove and not add:
        return None

    def name(spec: str) -> str:
        return normalize(parse_requirement(spec).name)

    drop = {normalize(n) for n in remove}
    for spec in add:
        parse_requirement(spec)
    present = {name(v) for v in _requires(metadata)}
    missing = sorted(drop - present)
    if missing:
        raise CiError(f"no Requires-Dist for {missing[0]} in METADATA (have: {', '.join(sorted(present)) or 'none'})")

    def edit(text: str) -> str:
        return edit_headers(
            text,
            remove=lambda k, v: k.lower() == "requires-dist" and name(v) in drop,
            append=[("Requires-Dist", spec.strip()) for spec in add])
    return edit


def _requires(metadata: str) -> list[str]:
    return get_headers(metadata, "Requires-Dist")


if __name__ == "__main__":  # `python -m wheelci.patch` (`python -m ci.patch` here): the command line runs it
    import runpy

    runpy.run_module("wheelci.commands.patch", run_name="__main__")
