"""An index as the upload sees it from outside: its URLs (the simple URL from the upload URL, whether
it is loopback, the URL printable without its user:password@), the secrets they and twine's
environment carry (registered in wheelci.util.secret, so every line printed is redacted), and what
went wrong talking to it, in one line (a connection error, an HTML error page, a TLS failure).

Below both the twine client and the simple-page reader, which talk to the same index and must name it,
and its failures, the same way.
"""

from __future__ import annotations

import ipaddress
import os
import re
from html.parser import HTMLParser
from typing import Callable, Iterable, Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

from wheelci.errors import CiError
from wheelci.util import secret

# Upload URL -> simple index URL, for the public indexes whose layout is known; others: see simple_url_for.
KNOWN_SIMPLE = {
    "https://upload.pypi.org/legacy/": "https://pypi.org/simple/",
    "https://test.pypi.org/legacy/": "https://test.pypi.org/simple/",
}


def strip_userinfo(url: str) -> str:
    """The URL without user:password@ (so it can be printed)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def simple_url_for(repository_url: str) -> str:
    """Where the simple pages live, from the upload URL: PyPI-like `.../legacy/` -> sibling `simple/`,
    otherwise `<upload URL>/simple/` (pypiserver). Override with --simple-url for other layouts."""
    url = repository_url if repository_url.endswith("/") else repository_url + "/"
    if url in KNOWN_SIMPLE:
        return KNOWN_SIMPLE[url]
    if url.endswith("/legacy/"):
        return url[: -len("legacy/")] + "simple/"
    return url + "simple/"


class _Text(HTMLParser):
    """An error page's words: its <pre> blocks (where bottle, and so pypiserver, puts the reason), else
    its text outside <head>, <style> and <script>."""

    def __init__(self) -> None:
        super().__init__()
        self.pre: list[str] = []
        self.text: list[str] = []
        self._skip = 0
        self._in_pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._skip += tag in ("head", "style", "script")
        self._in_pre += tag == "pre"

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("head", "style", "script") and self._skip > 0
        self._in_pre -= tag == "pre" and self._in_pre > 0

    def handle_data(self, data: str) -> None:
        (self.pre if self._in_pre else self.text if not self._skip else []).append(data)


def answer_text(body: str, content_type: str, limit: int = 200) -> str:
    """An index's error answer as one short line: the words of an HTML page, not its markup."""
    if "html" in content_type.lower() or body.lstrip()[:1] == "<":
        page = _Text()
        page.feed(body)
        body = " ".join(page.pre) or " ".join(page.text)
    return " ".join(body.split())[:limit]


def url_secrets(*urls: str | None) -> list[str]:
    """The password parts of URLs (quoted as written, and unquoted)."""
    return [v for url in urls if url and (pw := urlsplit(url).password) for v in (pw, unquote(pw))]


def url_users(*urls: str | None) -> list[str]:
    """The user names of URLs (as written, and unquoted as requests sends them in a Basic header)."""
    return [v for url in urls if url and (u := urlsplit(url).username) for v in (u, unquote(u))]


def redactor(secrets: Iterable[str | None], users: Iterable[str | None] = ()) -> Callable[[str], str]:
    """Register the secrets (with the users, for their Basic headers) in the one registry
    (wheelci.util.secret) and return its redaction: every line we print or return goes through it.
    User names alone are not secrets (devpi puts them in index URLs), so they stay readable."""
    given = [s_ for s_ in secrets if s_]
    named: list[str | None] = [u for u in users if u]
    for u in named or [None]:
        secret.add(*given, user=u)
    return secret.redact


def env_secrets(env: Mapping[str, str] = os.environ) -> list[str]:
    """Secrets a run may be given through the environment (twine's variables)."""
    return [v for k in ("TWINE_PASSWORD",) if (v := env.get(k))] + url_secrets(env.get("TWINE_REPOSITORY_URL"))


def short_reason(exc: BaseException) -> str:
    """One line for a requests connection error, without its long pool/URL preamble."""
    text = str(exc)
    m = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
    if m:
        return m.group(0).strip()
    for needle in ("Connection aborted", "Connection reset", "RemoteDisconnected", "timed out",
                   "BrokenPipe", "IncompleteRead"):
        if needle.lower() in text.lower():
            return needle.lower().replace("remotedisconnected", "server closed the connection")
    return type(exc).__name__


def tls_error(url: str, exc: BaseException) -> CiError:
    """Certificate problems are configuration, not flakiness: never retried, exit 2."""
    m = re.search(r"certificate verify failed: ([^(')\]]+)", str(exc))
    why = m.group(1).strip() if m else short_reason(exc)
    return CiError(f"TLS verification failed for {urlsplit(url).netloc.rpartition('@')[2]} ({why}): set "
                   "TWINE_CERT (or REQUESTS_CA_BUNDLE) to the CA bundle that signs its certificate")
