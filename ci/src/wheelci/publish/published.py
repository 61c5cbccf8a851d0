"""What the destination already has: the jobs of a matrix whose wheel is published are not built again
(`plan --skip-published INDEX`).

A job's wheel is known before it is built by what its file name will say: the project's name and version,
the local label or PEP 825 variant the job gives it, and its tags (what the project's wheel.py-api makes
of the job's Python, a manylinux platform of its machine). The label is `pt2.13.0.cu130` for a classic
wheel, `cu13` for a stable-ABI one, as the plan gives it. Only that name counts: a wheel that turns out to
link no LibTorch is labelled by its CUDA alone (wheelci.build.truthful_label), but a file of that name, or
of none, may be another build's (a release's plain CPU wheel), so such a job is built again, and its
upload skips a file already there with the same bytes. Reading the page and matching are separate:
`skipped` is a pure function of the page's file names.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Mapping
from urllib.parse import quote, urlsplit, urlunsplit

from wheelci.config.project import load_pyproject
from wheelci.errors import CiError
from wheelci.publish.endpoint import is_loopback, simple_url_for
from wheelci.util import http, log
from wheelci.wheel.names import WheelName, cuda_tag, normalize
from wheelci.workflowmatrix import DEFAULT_PYTHON

ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
PAGE_MAX = 64 << 20
_MACHINES = {"ubuntu-24.04-arm": "aarch64"}


@dataclass(frozen=True)
class Identity:
    """The project as its wheel's file name spells it."""

    name: str
    version: str


def identity(project_dir: Path) -> Identity:
    """The name and version, read before anything is built: an sdist's PKG-INFO, else pyproject.toml's
    static [project] name and version. A version known only once built (dynamic) cannot be matched."""
    from packaging.version import InvalidVersion, Version

    pkg_info = project_dir / "PKG-INFO"
    if pkg_info.is_file():
        headers = HeaderParser().parsestr(pkg_info.read_text("utf-8", "replace"))
        name, version = headers.get("Name"), headers.get("Version")
    else:
        meta = (load_pyproject(project_dir) or {}).get("project", {})
        meta = meta if isinstance(meta, dict) else {}
        name, version = meta.get("name"), meta.get("version")
        if isinstance(name, str) and version is None:
            raise CiError(f"--skip-published: {name}'s version is known only once it is built ([project] version "
                          "is dynamic or missing): give a static version, or plan from its sdist")
    if not isinstance(name, str) or not isinstance(version, str):
        raise CiError("--skip-published: no project name and version to match (pyproject.toml's [project], or "
                      "an sdist's PKG-INFO)")
    try:
        Version(version)
    except InvalidVersion:
        raise CiError(f"--skip-published: the project's version is not a PEP 440 version ({len(version)} characters)") from None
    return Identity(normalize(name), version)


def index_of(value: str, env: Mapping[str, str] = os.environ) -> str:
    """--skip-published's index: a URL, or `upload`: the simple index of the upload's TWINE_REPOSITORY_URL,
    where `wheelci upload` reads its files back (wheelci.publish.endpoint.simple_url_for)."""
    if not value.strip():
        raise CiError("--skip-published names no index (give its simple index URL, or upload)")
    if value.strip().lower() != "upload":
        return value.strip()
    url = env.get("TWINE_REPOSITORY_URL", "").strip()
    if not url:
        raise CiError("--skip-published upload: TWINE_REPOSITORY_URL names no upload index to read back")
    return simple_url_for(url)


def read_files(index: str, name: str, env: Mapping[str, str] = os.environ) -> list[str]:
    """The file names the index's page of `name` lists (none where the index has no such project yet);
    the credentials in the URL, else TWINE_USERNAME and TWINE_PASSWORD, as the upload takes them."""
    from wheelci.config.releases import parse_page

    client = http.Client(_with_credentials(index.strip(), env))
    if client.auth and urlsplit(client.base).scheme == "http" and not is_loopback(client.base):
        log.warning(f"--skip-published {http.shown(client.base)} is plain http: the index's credentials cross "
                    "the network unencrypted")
    page = f"{client.base.rstrip('/')}/{name}/"
    try:
        answer = client.get(page, {"Accept": ACCEPT}, cap=PAGE_MAX)
    except http.HttpError as e:
        if e.status == 404:
            return []
        raise CiError(f"--skip-published: {e}") from None
    return [f.filename for f in parse_page(answer.body, answer.headers.get("Content-Type", ""), answer.url)]


def _with_credentials(url: str, env: Mapping[str, str]) -> str:
    """The URL with TWINE_USERNAME/TWINE_PASSWORD as its userinfo, where it has none of its own."""
    user, password = env.get("TWINE_USERNAME"), env.get("TWINE_PASSWORD")
    try:
        parts = urlsplit(url)
    except ValueError:
        return url  # the client refuses it in one line, naming nothing of it
    if "@" in parts.netloc or not (user and password):
        return url
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{parts.netloc}"
    return urlunsplit(parts._replace(netloc=netloc))


def skipped(rows: list[dict[str, str]], files: list[str], project: Identity, py_api: str = "",
            local_version: str = "auto") -> tuple[list[dict[str, str]], list[str]]:
    """The rows whose wheel is not among `files`, and a note for each one that is (naming the file)."""
    published = [(f, w) for f in files if f.endswith(".whl") and (w := _parse(f)) is not None]
    kept, notes = [], []
    for row in rows:
        found = next((f for f, w in published if _is_its_wheel(row, w, project, py_api, local_version)), None)
        if found is None:
            kept.append(row)
        else:
            notes.append(f"{row['name']} (torch {row['torch']}): {found} is already published: not built again")
    return kept, notes


def _parse(filename: str) -> WheelName | None:
    try:
        return WheelName.parse(filename)
    except CiError:
        return None  # not a wheel name pip would take: no job's


def _is_its_wheel(row: dict[str, str], w: WheelName, project: Identity, py_api: str, local_version: str) -> bool:
    from packaging.version import InvalidVersion, Version

    if normalize(w.distribution) != project.name:
        return False
    try:
        version = Version(w.version)
    except InvalidVersion:
        return False
    if version.public != Version(project.version).public:
        return False
    variant = "--variant" in row["args"].split()
    cuda = _cuda_of(row)
    stable = "--stable-abi" in row["args"].split()
    if variant:  # a CUDA job's variant wheel (cu130, cu13), the CPU job's plain wheel
        want = None if cuda is None else cuda_tag(cuda, major=stable)
        if w.variant != want or version.local is not None:
            return False
    elif w.variant is not None or version.local not in _labels(row, cuda, stable, local_version):
        return False
    return _tags_fit(row, w, py_api)


def _labels(row: dict[str, str], cuda: str | None, stable: bool, local_version: str) -> set[str | None]:
    """The local label the job's wheel gets (packaging's spelling: lower case, dots), as the plan gives it."""
    if local_version == "none":
        return {None}
    if local_version != "auto":
        return {local_version.lower().replace("-", ".").replace("_", ".")}
    tag = cuda_tag(cuda, major=stable)
    return {tag} if stable else {f"pt{row['torch']}.{tag}"}


def _cuda_of(row: dict[str, str]) -> str | None:
    m = re.search(r"--cuda (\S+)", row["args"])
    return None if row["kind"] == "cpu" or m is None else m[1]


def _tags_fit(row: dict[str, str], w: WheelName, py_api: str) -> bool:
    """The wheel's tags are the job's: the interpreter and ABI tags the project's wheel.py-api makes of the
    job's Python (py3-none, cp3X-abi3 from its floor, else cp3Y-cp3Y), on a manylinux platform of its machine."""
    python = row.get("python") or DEFAULT_PYTHON
    minor = int(python.split(".")[1])
    machine = "aarch64" if "--archs aarch64" in row["args"] else _MACHINES.get(row.get("runner", ""), "x86_64")
    abi3 = re.fullmatch(r"cp3(\d+)", py_api)
    if py_api.startswith("py3"):
        wanted = ("py3", "none")
    elif abi3 and minor >= int(abi3[1]):
        wanted = (f"cp3{abi3[1]}", "abi3")
    else:
        wanted = (f"cp3{minor}", f"cp3{minor}")
    tags = {(i, a) for i in w.python.split(".") for a in w.abi.split(".")}
    return wanted in tags and any(re.fullmatch(rf"manylinux(1|2010|2014|_\d+_\d+)_{machine}", p)
                                  for p in w.platform.split("."))
