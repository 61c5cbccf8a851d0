"""The simple index's pages, rendered from the distributions' records: PEP 503 HTML (double-quoted
attributes: rules_python's parser needs them) with `#sha256=` fragments, `data-requires-python` and
the PEP 714 core-metadata keys (the legacy ones only when asked), and PEP 691/700 JSON.

Pure (no file is read or written here), so that every page is known before ci.index writes anything
and bad input leaves the output as it was.
"""

from __future__ import annotations

import html
import json
import posixpath
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import quote

from wheelci.publish.distread import Dist
from wheelci.wheel.names import canonical_version

API_VERSION = "1.1"  # PEP 700: versions + size


def file_url(d: Dist, to_root: str | None, base_url: str | None) -> str:
    """Link to a file from its project page: under base_url, or relative (works over file:// and http).

    to_root: the relative path from a project page's directory to DIR (e.g. "../.." for DIR/simple/p/).
    """
    quoted = "/".join(quote(p) for p in d.path.split("/"))
    if base_url:
        return f"{base_url.rstrip('/')}/{quoted}"
    return posixpath.normpath(posixpath.join(to_root or ".", quoted))


@dataclass(frozen=True)
class Link:
    """A file a project page links besides its distributions: a release's variants file."""

    filename: str
    url: str  # relative to the project page, or absolute
    sha256: str
    size: int


def project_html(project: str, dists: list[Dist], to_root: str | None, base_url: str | None,
                 legacy_keys: bool = False, links: Iterable[Link] = ()) -> str:
    lines = ["<!DOCTYPE html>", "<html>", "<head>",
             '<meta name="pypi:repository-version" content="1.1">',
             f"<title>Links for {html.escape(project)}</title>", "</head>", "<body>",
             f"<h1>Links for {html.escape(project)}</h1>"]
    for d in dists:
        attrs = [f'href="{html.escape(file_url(d, to_root, base_url))}#sha256={d.sha256}"']
        if d.requires_python:
            attrs.append(f'data-requires-python="{html.escape(d.requires_python)}"')
        if d.metadata_sha256:
            attrs.append(f'data-core-metadata="sha256={d.metadata_sha256}"')
            if legacy_keys:
                attrs.append(f'data-dist-info-metadata="sha256={d.metadata_sha256}"')
        lines.append(f"<a {' '.join(attrs)}>{html.escape(d.filename)}</a><br>")
    for link in links:
        lines.append(f'<a href="{html.escape(link.url)}#sha256={link.sha256}">{html.escape(link.filename)}</a><br>')
    lines += ["</body>", "</html>", ""]
    return "\n".join(lines)


def project_json(project: str, dists: list[Dist], to_root: str | None, base_url: str | None,
                 legacy_keys: bool = False, links: Iterable[Link] = ()) -> str:
    files = []
    for d in dists:
        f: dict[str, object] = {"filename": d.filename, "url": file_url(d, to_root, base_url),
                                "hashes": {"sha256": d.sha256}, "size": d.size}
        if d.requires_python:
            f["requires-python"] = d.requires_python
        if d.metadata_sha256:
            f["core-metadata"] = {"sha256": d.metadata_sha256}
            if legacy_keys:
                f["dist-info-metadata"] = f["core-metadata"]
        files.append(f)
    files += [{"filename": link.filename, "url": link.url, "hashes": {"sha256": link.sha256}, "size": link.size}
              for link in links]
    versions = sorted({canonical_version(d.version) for d in dists})
    return json.dumps({"meta": {"api-version": API_VERSION}, "name": project,
                       "versions": versions, "files": files}, indent=1) + "\n"


def root_html(projects: list[str]) -> str:
    links = [f'<a href="{quote(p)}/">{html.escape(p)}</a><br>' for p in projects]
    return "\n".join(["<!DOCTYPE html>", "<html>", "<head>",
                      '<meta name="pypi:repository-version" content="1.1">',
                      "<title>Simple index</title>", "</head>", "<body>", *links,
                      "</body>", "</html>", ""])


def root_json(projects: list[str]) -> str:
    return json.dumps({"meta": {"api-version": API_VERSION},
                       "projects": [{"name": p} for p in projects]}, indent=1) + "\n"


def render(dists: list[Dist], to_root: str | None, base_url: str | None,
           legacy_keys: bool = False, links: dict[str, list[Link]] | None = None, prefix: str = "") -> dict[str, str]:
    """All pages, as {path relative to OUT: text}. to_root: from a project page's directory to DIR.
    `links`: per project, further files to link; `prefix`: a root below OUT (`cu130/`)."""
    links = links or {}
    by_project: dict[str, list[Dist]] = {p: [] for p in links}
    for d in sorted(dists, key=lambda d: (d.project, d.filename)):
        by_project.setdefault(d.project, []).append(d)
    names = sorted(by_project)
    pages = {f"{prefix}index.html": root_html(names), f"{prefix}index.json": root_json(names)}
    for project in names:
        ds, extra = by_project[project], links.get(project, [])
        pages[f"{prefix}{project}/index.html"] = project_html(project, ds, to_root, base_url, legacy_keys, extra)
        pages[f"{prefix}{project}/index.json"] = project_json(project, ds, to_root, base_url, legacy_keys, extra)
    return pages
