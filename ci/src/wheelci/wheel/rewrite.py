"""Editing a wheel in one pass: replace, add and remove members, rename it, edit its METADATA.

    out = rewrite(src, dest_dir,
                  replace={"pkg/a.py": b"..."},    # new content, keeps the member's mode
                  add={"pkg/_preload.py": b"..."}, # new members (or (bytes|Path, mode) tuples)
                  remove=["pkg/big.so"],
                  version="1.0+local",             # renames .dist-info, METADATA Version, file name
                  distribution=None,               # same for the project name
                  metadata_edit=lambda text: text, # any further METADATA change
                  verify=False)                    # re-hash untouched members against RECORD first

The shared core of ci.patch, ci.split, ci.preload and ci.repair: what it does not touch is copied as
compressed bytes (ci.wheel.zipwrite), so patching one file of a 192 MB torch wheel costs that file.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Mapping

from wheelci.errors import CiError
from wheelci.util import log
from wheelci.wheel.metadata import check_identity, set_header
from wheelci.wheel.names import escape
from wheelci.wheel.zipread import WheelArchive
from wheelci.wheel.zipwrite import Content, WheelWriter

SIGNATURES = ("RECORD.jws", "RECORD.p7s")  # signatures of RECORD: void once RECORD changes


def newest_time(wa: WheelArchive) -> tuple[int, int]:
    """The latest (time, date) among members: the deterministic stamp for new content."""
    m = max(wa.members, key=lambda m: (m.dos_date, m.dos_time), default=None)
    return (m.dos_time, m.dos_date) if m else (0, 33)


def rewrite(src: WheelArchive | Path | str, dest_dir: Path | str, *,
            replace: Mapping[str, Content] | None = None,
            add: Mapping[str, Content | tuple[Content, int]] | None = None,
            remove: Iterable[str] = (),
            version: str | None = None,
            distribution: str | None = None,
            metadata_edit: Callable[[str], str] | None = None,
            verify: bool = False,
            force_zip64: bool = False,
            variant: str | None = None) -> Path:
    """Write an edited copy of src into dest_dir and return its path (src is never modified).

    `replace` keeps each member's position and mode; `add` appends (content or (content, mode));
    `remove` drops members. `version`/`distribution` rename the .dist-info and .data directories,
    METADATA's Version/Name and the file name together. With `verify`, every untouched member is
    re-hashed against the source RECORD first (CiError on mismatch); without it, RECORD sizes are
    still checked against the zip directory. `variant` gives the output a PEP 825 variant label (the
    caller adds its .dist-info/variant.json); otherwise the source's label, if any, is kept.
    """
    own = not isinstance(src, WheelArchive)
    wa = src if isinstance(src, WheelArchive) else WheelArchive.open(src)
    try:
        return _rewrite(wa, Path(dest_dir), dict(replace or {}), dict(add or {}), set(remove), version,
                        distribution, metadata_edit, verify, force_zip64, variant)
    finally:
        if own:
            wa.close()


def _rewrite(wa: WheelArchive, dest_dir: Path, replace: dict[str, Content],
             add: dict[str, Content | tuple[Content, int]], remove: set[str], version: str | None,
             distribution: str | None, metadata_edit: Callable[[str], str] | None, verify: bool,
             force_zip64: bool, variant: str | None = None) -> Path:
    for name in sorted(set(replace) | remove):
        if name not in wa:
            raise CiError(f"{wa.path.name} has no member {name}")
    for name in add:
        if name in wa and name not in remove:
            raise CiError(f"{wa.path.name} already has {name} (use replace)")
    check_identity(wa.metadata)  # an ambiguous name or version is never copied on
    record = wa.record
    checked = None
    if verify:  # runs while the output is written (mostly kernel copies); nothing lands before it passes
        checker = ThreadPoolExecutor(max_workers=1)
        checked = checker.submit(wa.verify)
        checker.shutdown(wait=False)
    else:
        for m in wa.files:
            entry = record.get(m.name)
            if entry and entry.size is not None and entry.size != m.usize and m.name not in replace \
                    and m.name not in remove:
                raise CiError(f"RECORD size mismatch for {m.name}: RECORD says {entry.size}, zip has {m.usize}")
    old = wa.name
    new = old.with_(version=version or old.version, distribution=escape(distribution) if distribution else old.distribution,
                    variant=variant or old.variant)
    # .data/ is spelled as the archive spells its .dist-info, which may differ from the file name's
    # spelling (`Demo-1.0.dist-info` in `demo-1.0-...whl`): rename whichever is there.
    as_dist_info = wa.dist_info[: -len(".dist-info")] + ".data"
    renames = {f"{wa.dist_info}/": f"{new.dist_info}/", f"{as_dist_info}/": f"{new.data_dir}/",
               f"{old.data_dir}/": f"{new.data_dir}/"}

    def renamed(name: str) -> str:
        for a, b in renames.items():
            if name.startswith(a):
                return b + name[len(a):]
        return name

    meta_name = f"{wa.dist_info}/METADATA"
    if version or distribution or metadata_edit:
        text = replace.pop(meta_name, None)
        meta = text.decode("utf-8") if isinstance(text, bytes) else (text.read_text() if text else wa.metadata)
        check_identity(meta)
        if version:
            meta = set_header(meta, "Version", version)
        if distribution:
            meta = set_header(meta, "Name", distribution)
        if metadata_edit:
            meta = metadata_edit(meta)
        replace[meta_name] = meta.encode("utf-8")
    w = WheelWriter(new, default_time=newest_time(wa), force_zip64=force_zip64)
    signatures = {f"{wa.dist_info}/{s}" for s in SIGNATURES} & {m.name for m in wa.members}
    for name in sorted(signatures - remove):
        log.info(f"note: dropped {name}: it signs the old RECORD, which this rewrite replaces")
    for m in wa.members:
        if m.name in remove or m.name == wa.record_name or m.name in signatures:
            continue
        if m.name in replace:
            w.add(renamed(m.name), replace[m.name], (m.mode or 0o100644))
        else:
            w.copy(wa, m, renamed(m.name))
    for name, content in add.items():
        data, mode = content if isinstance(content, tuple) else (content, 0o644)
        w.add(renamed(name), data, mode)
    try:
        return w.write(dest_dir, before_commit=checked.result if checked else None)
    finally:
        if checked is not None:
            checked.cancel()
            with contextlib.suppress(BaseException):
                checked.result()  # never leave the verifier running behind an error
