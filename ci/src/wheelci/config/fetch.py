"""A project named by its requirement (`causal-conv1d==1.7.0`, `natten`, `xformers>=0.0.30`): its sdist,
from the package index pip is pointed at (PIP_INDEX_URL, else PyPI), read as PEP 691 JSON or PEP 503 HTML,
checked against the sha256 the index gives, cached by that digest.

Why not `pip download --no-binary :all:`: pip builds the sdist's metadata to learn its dependencies, which
runs setup.py, which imports torch (not installed there), and fails; the index's page already names the
file. The request goes through the one HTTP client (credentials to the index's origin only, a deadline).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import Version

from wheelci.config.releases import ACCEPT, INDEX, PAGE_MAX, IndexFile, parse_page
from wheelci.errors import CiError
from wheelci.util import http
from wheelci.util.atomic import atomic_path
from wheelci.util.cache import cache_dir
from wheelci.util.digest import sha256_file
from wheelci.util.untrusted import cut, one_line

SDIST_MAX = 1 << 30  # the largest sdist read (flash-attn's is 8 MB, with cutlass bundled)
INDEX_VARIABLE = "PIP_INDEX_URL"  # pip's own: the index a team already points its installs at
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SDIST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\.tar\.gz")


@dataclass(frozen=True)
class Fetched:
    """What a requirement resolved to: the file, where it came from (credentials out), its digest."""

    requirement: str
    name: str
    version: str
    filename: str
    url: str
    sha256: str
    path: Path

    def describe(self) -> str:
        return f"{self.filename} (sha256 {self.sha256}), fetched from {self.url}"


def requirement(text: str) -> Requirement | None:
    """`text` as a project's requirement, where it reads as one and not as a path (pip's rule: a word with
    no slash that names no file); None otherwise. A URL or a marker is no project name: refused."""
    if "/" in text or os.sep in text or text.startswith(".") or text.endswith((".tar.gz", ".zip")):
        return None
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    if not _NAME.fullmatch(req.name):
        return None
    if req.url or req.marker:
        raise CiError(f"{cut(one_line(text), 80)}: a project is named by its name and version (NAME, NAME==1.2.3, "
                      "NAME>=1.2), without a URL or marker")
    return req


def index_url(env: Mapping[str, str]) -> str:
    return (env.get(INDEX_VARIABLE) or INDEX).strip().rstrip("/")


def pick(req: Requirement, files: list[IndexFile], index: str) -> tuple[IndexFile, Version]:
    """The sdist the requirement names among a project page's files: the newest version it allows (a
    pre-release or a yanked file only where the requirement pins it with ==) (pure)."""
    pinned = any(s.operator == "===" or (s.operator == "==" and "*" not in s.version) for s in req.specifier)
    pre = pinned or bool(req.specifier.prereleases)  # `>=1.0rc1` asks for pre-releases too
    allowed: list[tuple[Version, IndexFile]] = []
    versions: set[Version] = set()
    yanked = False
    for f in files:
        if not _SDIST_NAME.fullmatch(f.filename):  # a name that is no file name (a slash, a space, a newline)
            continue
        try:
            name, version = parse_sdist_filename(f.filename)
        except InvalidSdistFilename:
            continue
        if canonicalize_name(name) != canonicalize_name(req.name) or not f.filename.endswith(".tar.gz"):
            continue
        versions.add(version)
        if f.yanked and not pinned:
            yanked = True
            continue
        if req.specifier.contains(version, prereleases=True):
            allowed.append((version, f))
    # pre-releases only where asked for, or where they are all there is (pip's rule)
    found = [(v, f) for v, f in allowed if pre or not v.is_prerelease] or allowed
    if not found:
        newest = ", ".join(str(v) for v in sorted(versions)[-3:]) or "none"
        why = "; the others are yanked (pin one with == to take it)" if yanked else ""
        raise CiError(f"{req}: no sdist of it on {http.shown(index)} (sdists there: {newest}{why})")
    version, chosen = max(found, key=lambda p: p[0])
    return chosen, version


def project_files(name: str, env: Mapping[str, str]) -> tuple[list[IndexFile], str]:
    """The files the index's page of a project lists, and the index (PIP_INDEX_URL, else PyPI)."""
    index = index_url(env)
    if not index.startswith(("http://", "https://")):
        raise CiError(f"{INDEX_VARIABLE} {http.shown(index)}: a project is fetched from an http(s) index")
    client = http.Client(index)
    page = f"{client.base}/{canonicalize_name(name)}/"
    try:
        answer = client.get(page, {"Accept": ACCEPT}, cap=PAGE_MAX)
    except http.HttpError as e:
        if e.status == 404:
            raise CiError(f"{name}: no such file or directory, and no project of that name on "
                          f"{http.shown(index)}") from None
        raise
    return parse_page(answer.body, answer.headers.get("Content-Type", ""), answer.url), index


def fetch(text: str, env: Mapping[str, str], cache: Path | None = None) -> Fetched:
    """The requirement's sdist, from the cache where a file of the index's digest is there, else fetched
    into it (whole, checked, then renamed in: a killed fetch leaves nothing under the name)."""
    req = requirement(text)
    if req is None:
        raise CiError(f"{cut(one_line(text), 80)}: not a project requirement (NAME or NAME==VERSION)")
    files, index = project_files(req.name, env)
    chosen, version = pick(req, files, index)
    if not chosen.sha256:
        raise CiError(f"{http.shown(chosen.url)}: the index gives no sha256 for it, so it cannot be checked")
    # by its digest: another index's file of the same name is another entry, never this one replaced
    path = (cache or cache_dir("sdists", env=env)) / chosen.sha256[:32] / chosen.filename
    if not (path.is_file() and not path.is_symlink() and sha256_file(path) == chosen.sha256):
        data = http.Client(index).get(chosen.url, cap=SDIST_MAX).body  # the index's credentials, to its origin only
        got = hashlib.sha256(data).hexdigest()
        if got != chosen.sha256:
            raise CiError(f"{http.shown(chosen.url)}: its sha256 is {got}, the index says {chosen.sha256}: refused")
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
    return Fetched(str(req), canonicalize_name(req.name), str(version), chosen.filename, http.shown(chosen.url),
                   chosen.sha256, path)

