"""What the index already lists: a project's simple page (PEP 691 JSON or PEP 503 HTML), read with the
upload's session and parsed to {filename: sha256}; `--skip-existing` and an "already exists" answer
are judged by it, and `verify` proves at the end that every file sent is there with our sha256.

A page is read within --timeout in all and up to 64 MiB, in a daemon thread given up on at the
deadline: requests' timeout bounds each socket read, so a server that trickles or never ends would
otherwise hold the upload forever or fill memory. A page that links one file name twice with different
hashes verifies nothing (installers pick either link): it is a Conflict, never one of the hashes.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Callable
from urllib.parse import unquote, urljoin, urlsplit

from wheelci.errors import CiError, Finding
from wheelci.util.http import chunks, within
from wheelci.publish.endpoint import short_reason, strip_userinfo, tls_error
from wheelci.publish.targets import Target
from wheelci.wheel.names import normalize
from wheelci.util.sizes import format_size

if TYPE_CHECKING:  # the upload's session (twine's): requests loads only when an upload runs
    import requests

ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
# A simple page lists one project's files, not their bytes: PyPI's largest are a few MiB.
PAGE_MAX_BYTES = 64 << 20


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


class MalformedPage(CiError):
    """A simple page that is not what PEP 691 describes, or too large or too slow to read: bad input
    from the server, exit 2."""


@dataclass(frozen=True)
class Conflict:
    """One file name listed more than once with different hashes: pip and uv may fetch either file
    (uv took the first, where our reading once kept the last), so no upload is verified by it."""

    hashes: tuple[str | None, ...]

    def __str__(self) -> str:
        return ", ".join(h or "none" for h in self.hashes)


Listed = str | None | Conflict  # a file's sha256 on a simple page (lowercase), None without one


def _add(listing: dict[str, Listed], name: str, digest: str | None) -> None:
    """Record one link; a second link to the same name with another hash makes it a Conflict."""
    if name not in listing:
        listing[name] = digest
        return
    prev = listing[name]
    seen = prev.hashes if isinstance(prev, Conflict) else (prev,)
    if digest not in seen:
        listing[name] = Conflict((*seen, digest))


def parse_listing(body: str, content_type: str) -> dict[str, Listed]:
    """A project's simple page (PEP 691 JSON or PEP 503 HTML) -> {filename: lowercase sha256, None, or
    a Conflict}. Hex digests compare case-insensitively; a page that is not what PEP 691 describes is
    a CiError."""
    if "json" in content_type:
        return _parse_json_listing(body)
    p = _Links()
    p.feed(body)
    listing: dict[str, Listed] = {}
    for href in p.hrefs:
        url, _, frag = href.partition("#")
        name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        m = re.search(r"(?:^|&)sha256=([0-9a-fA-F]{64})", frag)
        _add(listing, name, m.group(1).lower() if m else None)
    return listing


def _parse_json_listing(body: str) -> dict[str, Listed]:
    """PEP 691's files list. Anything else there is refused in one line, never guessed at."""
    try:
        data = json.loads(body)
    except ValueError as e:
        raise MalformedPage(f"malformed PEP 691 JSON page: {e}") from None
    files = data.get("files", []) if isinstance(data, dict) else None
    if not isinstance(files, list):
        raise MalformedPage("malformed PEP 691 JSON page: no list of files")
    listing: dict[str, Listed] = {}
    for f in files:
        name = f.get("filename") if isinstance(f, dict) else None
        hashes = (f.get("hashes") or {}) if isinstance(f, dict) else None
        if not isinstance(name, str) or not isinstance(hashes, dict):
            raise MalformedPage("malformed PEP 691 JSON page: a file without a filename or hashes")
        digest = hashes.get("sha256")
        if digest is not None and not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
            raise MalformedPage(f"malformed PEP 691 JSON page: {name!r} has sha256 {digest!r}")
        _add(listing, name, digest.lower() if digest else None)
    return listing


def _read_page(session: requests.Session, url: str, seconds: float, deadline: float,
               cap: int) -> tuple[requests.Response, str | None]:
    """GET url; the body (text) of a 200 answer, read until the deadline and at most cap bytes."""
    r = session.get(url, headers={"Accept": ACCEPT}, allow_redirects=False, stream=True)
    with contextlib.closing(r):
        if r.status_code != 200:
            return r, None
        body = bytearray()
        for chunk in chunks(r):
            body += chunk
            if len(body) > cap:
                raise MalformedPage(f"the simple page {strip_userinfo(url)} is over {format_size(cap)}; "
                                    "refused (a listing, not a file)")
            if time.monotonic() > deadline:
                raise _too_slow(url, seconds)
        return r, body.decode(r.encoding or "utf-8", errors="replace")


def _too_slow(url: str, seconds: float) -> MalformedPage:
    return MalformedPage(f"the simple page {strip_userinfo(url)} did not arrive within {seconds:g} s "
                         "(--timeout bounds the whole page)")


def fetch_page(session: requests.Session, url: str, seconds: float,
               cap: int = PAGE_MAX_BYTES) -> tuple[requests.Response, str | None]:
    """(response, body or None) for one GET of a simple page, the whole of it within `seconds`, with the
    upload's session (twine's credentials and TLS settings) under the one HTTP client's deadline
    (wheelci.util.http.within): a server trickling a byte a second, or an endless body, is refused."""
    try:
        return within(seconds, lambda deadline: _read_page(session, url, seconds, deadline, cap), "upload: simple page")
    except TimeoutError:
        raise _too_slow(url, seconds) from None


class SimpleIndex:
    """Reads simple pages with the upload's session (same auth and TLS settings), each GET within
    `timeout` seconds in all."""

    def __init__(self, session: requests.Session, simple_url: str, timeout: float = 300.0) -> None:
        self.session = session
        self.simple_url = simple_url if simple_url.endswith("/") else simple_url + "/"
        self.shown = strip_userinfo(self.simple_url)
        self.timeout = timeout

    def listing(self, project: str) -> dict[str, Listed]:
        import requests
        import urllib3
        url = f"{self.simple_url}{normalize(project)}/"
        origin = urlsplit(url)[:2]
        for _ in range(5):  # follow redirects on the same origin only: pypiserver sends
            try:          # unknown projects to PyPI, whose files must not count as ours
                r, text = fetch_page(self.session, url, self.timeout)
            except requests.exceptions.SSLError as e:
                raise tls_error(url, e) from None
            except (requests.RequestException, urllib3.exceptions.HTTPError) as e:  # read1 is urllib3's
                raise Finding(f"cannot read the simple page {strip_userinfo(url)}: {short_reason(e)}") from None
            if r.is_redirect:
                nxt = urljoin(url, r.headers.get("Location", ""))
                if urlsplit(nxt)[:2] != origin:
                    return {}
                url = nxt
                continue
            if r.status_code == 404:
                return {}
            if r.status_code != 200:
                raise Finding(f"cannot read the simple page {strip_userinfo(url)}: HTTP {r.status_code} {r.reason}")
            assert text is not None, "_read_page reads a 200's body"
            try:
                return parse_listing(text, r.headers.get("Content-Type", ""))
            except MalformedPage as e:
                raise MalformedPage(f"{strip_userinfo(url)}: {e}") from None
        return {}


def verify(index: SimpleIndex, targets: list[Target], say: Callable[[str], None],
           fail: Callable[..., CiError], waits: tuple[float, ...] = (0.5, 1.0, 2.0)) -> None:
    """Every file must be on its project's simple page with our sha256 (a short wait for lagging caches)."""
    pending = list(targets)
    for wait in (*waits, None):
        try:
            listings = {p: index.listing(p) for p in sorted({t.project for t in pending})}
        except MalformedPage as e:
            raise fail(CiError, str(e)) from None
        missing = []
        for t in pending:
            theirs = listings[t.project].get(t.path.name, "")
            if theirs == "":
                missing.append(t)
            elif isinstance(theirs, Conflict):
                raise fail(Finding, f"the simple page lists {t.path.name} more than once with different "
                                    f"sha256 ({theirs}): an installer may fetch either")
            elif theirs is None:
                raise fail(Finding, f"the simple page lists {t.path.name} without a sha256: cannot verify it")
            elif theirs != t.sha256:
                raise fail(Finding, f"the simple page serves a different {t.path.name}: "
                                    f"sha256 {theirs} != {t.sha256}")
        if not missing:
            say(f"verified {len(targets)} file(s) on {index.shown}")
            return
        if wait is None:
            raise fail(Finding, f"after uploading, {index.shown} does not list "
                                f"{', '.join(t.path.name for t in missing)}")
        pending = missing
        time.sleep(wait)
