"""The one owner of every directory a command writes its outputs into: a build's -w, split's, repair's
and preload's -w, the index's --out, the container's wheel directory.

A user's output directory is shared (a wheelhouse other jobs write into, a docs site beside the index),
so what a command may do there is the same everywhere and lives here:

- made and locked (`output_dir`): the directories it creates are removed again, when empty, if the run
  fails; a second run on the same directory waits for the first (wheelci.util.lock), never interleaves.
- owned by manifest (MANIFEST): the names this tool wrote there, by who wrote them; only those are ever
  replaced, removed or set aside, and a file of the same name that is not ours is refused untouched.
- staged and committed (`staging`, `commit`): outputs are made in a directory beside the destination
  (same filesystem) and renamed in with SIGINT/SIGTERM/SIGHUP held, so an output set is never half in.
- no links followed: a rename replaces a link, never writes through it; `drop_links` removes links
  planted among the entries of a tree this tool keeps.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from wheelci.errors import CiError
from wheelci.util import layout
from wheelci.util.atomic import make_dirs, remove_empty, write_text
from wheelci.util.lock import locked_dirs

MANIFEST = layout.MANIFEST  # {"version": 1, "groups": {who: [names]}}: what this tool wrote here
LEGACY_MANIFESTS = (".wheelci-split.json",)  # the same record, as earlier releases of split kept it
RECORDED_FILES = layout.REPORTS  # besides wheels, the names a manifest may list: a build's report
ASIDE = ".wheelci-previous-"  # a directory of what a failed run set aside: ASIDE + a UTC time
HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM/SIGHUP wait until the block is done: a commit of several renames is one step."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def refuse_nested(*dirs: tuple[str, Path]) -> None:
    """CiError when two of these (option, directory) are one directory or one lies inside the other: a
    run that replaces parts of one would replace or publish what the other holds."""
    for i, (name_a, a) in enumerate(dirs):
        for name_b, b in dirs[i + 1:]:
            ra, rb = a.resolve(), b.resolve()
            if ra == rb:
                raise CiError(f"{name_a} {a} and {name_b} {b} are the same directory: give each a directory of its own")
            for (n_in, p_in, r_in), (n_out, p_out, r_out) in (((name_a, a, ra), (name_b, b, rb)),
                                                              ((name_b, b, rb), (name_a, a, ra))):
                if r_out in r_in.parents:
                    raise CiError(f"{n_in} {p_in} is inside {n_out} {p_out}: a build replaces parts of its work "
                                  "directory and sets wheels aside in -w; give each a directory of its own")


def drop_links(root: Path, names: Iterable[str]) -> list[str]:
    """Remove the entries of `root` with these names that are links, FIFOs, sockets or devices (this tool
    never makes one there), so nothing is written through a planted one, blocks on it (a FIFO's open or
    shutil.rmtree waits forever) or fails on a dangling one; the names removed."""
    dropped = []
    for name in names:
        entry = root / name
        try:
            kind = entry.lstat().st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(kind) or not (stat.S_ISREG(kind) or stat.S_ISDIR(kind)):
            entry.unlink()
            dropped.append(name)
    return dropped


@dataclass
class OutputDir:
    """An output directory this run holds (locked): what the manifest says is ours, and how to add to it."""

    path: Path
    groups: dict[str, list[str]] = field(default_factory=dict)  # the manifest: who wrote which names
    adopted: set[str] = field(default_factory=set)  # ours by another record (an earlier build's report)

    @property
    def owned(self) -> set[str]:
        return {n for names in self.groups.values() for n in names} | self.adopted

    def adopt(self, names: Iterable[str]) -> None:
        """Names an earlier run vouched for in a record of its own (written before this manifest existed)."""
        self.adopted |= {n for n in names if _plain_name(n)}

    def record(self, who: str, names: Iterable[str]) -> None:
        """Record names as `who`'s before writing them in place (a build's report): ownership first, so a
        cut-short run leaves what it wrote ours, and only what the manifest lists is ever replaced or moved."""
        with signals_held():
            self._record({**self.groups, who: sorted({*self.groups.get(who, []), *names})})

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """A directory beside the outputs (the same filesystem: the commit is renames), removed after."""
        stage = Path(tempfile.mkdtemp(prefix=".wheelci-stage-", dir=self.path))
        try:
            yield stage
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def commit(self, staged: Sequence[Path], who: str, *, replace_group: bool = False,
               writer: str = "wheelci") -> list[Path]:
        """Rename the staged files in, recorded as `who`'s; with replace_group, what `who` wrote before and
        did not write again is removed with them. A name here that is not ours is refused before any move
        (the error names `writer`, the command as the user ran it)."""
        names = [p.name for p in staged]
        owned = self.owned
        foreign = [n for n in names if (self.path / n).exists() or (self.path / n).is_symlink()]
        foreign = [n for n in foreign if n not in owned]
        if foreign:
            raise CiError(f"{self.path} already holds {', '.join(foreign)}, which {writer} did not write; refusing to "
                          "replace it (move it away, or write to another directory)")
        earlier = [n for n in self.groups.get(who, []) if n not in names] if replace_group else []
        kept = [n for n in self.groups.get(who, []) if n not in names and n not in earlier]
        with signals_held():
            self._record({**self.groups, who: sorted({*kept, *names})})  # ownership first: a cut-short run leaves ours
            for old in earlier:  # a file of ours; a directory of that name is the user's, left alone
                if not (self.path / old).is_dir() or (self.path / old).is_symlink():
                    (self.path / old).unlink(missing_ok=True)
            for p in staged:
                os.replace(p, self.path / p.name)
        return [self.path / n for n in names]

    def set_aside(self, names: Iterable[str]) -> str | None:
        """Move these entries (ours) into a new ASIDE directory here, in one held step; its name, or None
        when none of them is there. What is set aside is no longer in the manifest: it is the user's."""
        owned = self.owned  # never a name no record of ours lists, whoever asks
        present = [n for n in dict.fromkeys(names) if _plain_name(n) and n in owned and ((self.path / n).exists()
                                                                           or (self.path / n).is_symlink())
                   and not ((self.path / n).is_dir() and not (self.path / n).is_symlink())]  # a directory: the user's
        if not present:
            return None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = Path(tempfile.mkdtemp(prefix=f"{ASIDE}{stamp}-", dir=self.path))
        os.chmod(aside, 0o755)
        with signals_held():
            self._record({who: [n for n in names_ if n not in present] for who, names_ in self.groups.items()})
            for n in present:
                os.replace(self.path / n, aside / n)
        return aside.name

    def _record(self, groups: dict[str, list[str]]) -> None:
        self.groups = {who: names for who, names in groups.items() if names}
        write_text(self.path / MANIFEST, json.dumps({"version": 1, "groups": self.groups}, indent=1, sort_keys=True) + "\n")
        for legacy in LEGACY_MANIFESTS:  # read into this one: ours, and stale from now on
            if (self.path / legacy).is_file() and not (self.path / legacy).is_symlink():
                (self.path / legacy).unlink()


def _plain_name(name: object) -> bool:
    """A name of an entry directly in the directory: what a manifest may list (never a path out of it)."""
    return isinstance(name, str) and bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


def read_manifest(path: Path) -> dict[str, list[str]]:
    """The manifest of an output directory (an earlier split's record too); {} when none reads back.
    A link is not read: this tool writes its manifest as a plain file."""
    for name in (MANIFEST, *LEGACY_MANIFESTS):
        f = path / name
        if f.is_symlink() or not f.is_file():
            continue
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        groups = data.get("groups") if name == MANIFEST and isinstance(data, dict) else data
        if isinstance(groups, dict):  # what this tool records is wheels and a build's report: no other name
            return {str(k): [n for n in v if _plain_name(n) and (n.endswith(".whl") or n in RECORDED_FILES)]
                    for k, v in groups.items() if isinstance(v, list)}
    return {}


@contextlib.contextmanager
def output_dir(path: Path | str, what: str, *, also_lock: Sequence[Path] = (),
               using: str | None = None) -> Iterator[OutputDir]:
    """Hold the output directory `path` (the option `what`; made where missing, with its parents) for the
    whole run, and the directories `also_lock` with it (an index's wheel directory); a run that waits for
    another says it is using `using` (default: `what`). A run that fails or is interrupted removes the
    directories it made, where they are empty (never what is in them)."""

    path = Path(path)
    if (path.exists() and not path.is_dir()) or (path.is_symlink() and not path.exists()):
        raise CiError(f"{what} {path}: not a directory")
    held = contextlib.ExitStack()
    for _ in range(100):
        try:
            made = make_dirs(path)
        except OSError as e:
            raise CiError(f"cannot create {what} {path}: {e.strerror}") from None
        try:
            held.enter_context(locked_dirs([path, *also_lock], using or what))
            break
        except CiError:
            if path.is_dir():
                raise
            # removed by the run this one waited for (a failed run takes away the directory it made): again
    else:
        raise CiError(f"cannot hold {what} {path}: other runs keep removing it")
    try:
        with held:
            yield OutputDir(path, read_manifest(path))
    except BaseException:
        remove_empty(made)
        raise
