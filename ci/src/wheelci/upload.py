"""Upload distributions to a private index with twine, then prove the index serves what we sent.

`python -m ci.upload --repository-url URL FILES...` runs twine's checks, uploads each file through
twine's Repository (credentials from TWINE_USERNAME/TWINE_PASSWORD, keyring or .pypirc, resolved by
twine and never printed), retries connection errors and 5xx with exponential backoff, and finally
reads the index's simple page for each project and checks every file's sha256. Each simple page is
read within --timeout in all and up to 64 MiB (a server that trickles or never ends fails in one line).

Why not `twine upload --skip-existing`: twine 6.2 dropped it for indexes other than PyPI, and a
name-only skip would hide a different file under the same name. Here `--skip-existing` skips a file
only when the simple page lists it with the same sha256; a different file under that name fails.

A retried POST may have landed before the connection died: a later "already exists" answer is then
checked against the simple page, and counts as uploaded only when the sha256 matches. A page that
links one file name twice with different hashes verifies nothing (installers pick either link).

Wheel variants (PEP 825): variant wheels upload like any wheel. A release's variants file
(`{name}-{version}-variants.json`, as ci.index writes it) given among FILES is checked against the
variant wheels given with it, and sent first, through the same upload form: an index that refuses the
name (pypiserver answers "400 Bad filename") cannot serve variants, and the upload stops there, before
any wheel lands, saying so. Variant wheels given without their variants file upload with a warning:
installers ignore them until the index serves that file.

Exit status: 0 all uploaded (or skipped as identical) and verified; 1 a finding (the index has a
different file, twine check failed, the upload failed after retries, the simple page disagrees);
2 bad usage or input (missing file, no repository, credentials rejected).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import ipaddress
import json
import logging
import os
import re
import threading
import time
from dataclasses import asdict, dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable, Iterable, Mapping
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from wheelci.errors import CiError, Finding
from wheelci.util import secret
from wheelci.util import log as progress
from wheelci.util.digest import sha256_file
from wheelci.wheel.names import WheelName, canonical_version, classify
from wheelci.wheel.names import normalize
from wheelci.wheel.variant import parse_variants_filename

# Upload URL -> simple index URL, for the public indexes whose layout is known; others: see simple_url_for.
KNOWN_SIMPLE = {
    "https://upload.pypi.org/legacy/": "https://pypi.org/simple/",
    "https://test.pypi.org/legacy/": "https://test.pypi.org/simple/",
}
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
# A simple page lists one project's files, not their bytes: PyPI's largest are a few MiB.
PAGE_MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class FileResult:
    filename: str
    project: str
    sha256: str
    status: str  # "uploaded" | "skipped" (the index already had the same sha256)
    attempts: int


@dataclass(frozen=True)
class UploadResult:
    repository_url: str
    simple_url: str
    files: tuple[FileResult, ...]

    @property
    def uploaded(self) -> list[str]:
        return [f.filename for f in self.files if f.status == "uploaded"]

    @property
    def skipped(self) -> list[str]:
        return [f.filename for f in self.files if f.status == "skipped"]


# ---------------------------------------------------------------- pure helpers


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


class _Text(HTMLParser):
    """An error page's words: its <pre> blocks (where bottle, and so pypiserver, puts the reason), else
    its text outside <head>, <style> and <script>."""

    def __init__(self) -> None:
        super().__init__()
        self.pre: list[str] = []
        self.text: list[str] = []
        self._skip = 0
        self._in_pre = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
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


# ---------------------------------------------------------------- the upload


@dataclass
class _Target:
    path: Path
    project: str
    sha256: str
    version: str = ""
    variants_file: bool = False  # a release's PEP 825 variants file, not a distribution


def _targets(files: Iterable[str | os.PathLike]) -> list[_Target]:
    """The files to upload, a release's variants files first (see the module docstring)."""
    out: list[_Target] = []
    seen: dict[str, Path] = {}
    for f in files:
        path = Path(f)
        if not path.is_file():
            raise CiError(f"no such file: {path}")
        c = classify(path.name)
        named = (c[1], c[2]) if c else parse_variants_filename(path.name)
        if named is None:
            raise CiError(f"not a wheel, sdist or variants file: {path}")
        if path.name in seen:
            raise CiError(f"{path.name} given twice: {seen[path.name]} and {path}")
        seen[path.name] = path
        project, version = named
        out.append(_Target(path, project, sha256_file(path), version, variants_file=c is None))
    if not out:
        raise CiError("no files to upload")
    return sorted(out, key=lambda t: not t.variants_file)


def check_variants(targets: list[_Target], warn: Callable[[str], None]) -> None:
    """Each variants file given must agree with the variant wheels given with it (as ci.index checks
    them); a release's variant wheels given without one upload with a warning."""
    from wheelci.wheel import variant as v
    from wheelci.wheel.zipread import WheelArchive

    def release(t: _Target) -> tuple[str, str]:
        return t.project, canonical_version(t.version.partition("+")[0])

    wheels: dict[tuple[str, str], list] = {}
    for t in targets:
        if not t.variants_file and t.path.name.endswith(".whl") and WheelName.parse(t.path.name).variant:
            with WheelArchive.open(t.path) as wa:
                wheels.setdefault(release(t), []).append((t.path.name, v.read_wheel(wa)))
    given = {release(t): t for t in targets if t.variants_file}
    for key, t in given.items():
        if t.path.stat().st_size > v.DOC_CAP:
            raise CiError(f"{t.path}: over {v.DOC_CAP >> 10} KiB; not a variants file")
        why = v.contradiction(v.parse(t.path.read_bytes(), str(t.path)), wheels.get(key, []))
        if why:
            raise CiError(f"{t.path} contradicts the variant wheels given with it: {why}")
    for key, docs in sorted(wheels.items()):
        v.merge(f"{key[0]} {key[1]}", docs)  # the labels agree among themselves
        if key not in given:
            warn(f"warning: {key[0]} {key[1]}: variant wheels without the release's variants file: installers "
                 "ignore them until the index serves it (give the one ci.index wrote once every variant is built)")


def _settings(repository_url: str | None, repository: str | None, config_file: str | None):
    from twine import exceptions, settings, utils
    make = functools.partial(
        settings.Settings, username=os.environ.get("TWINE_USERNAME"), password=os.environ.get("TWINE_PASSWORD"),
        non_interactive=True, disable_progress_bar=True,
        config_file=config_file or os.environ.get("TWINE_CONFIG_FILE") or utils.DEFAULT_CONFIG_FILE,
        cacert=os.environ.get("TWINE_CERT"))
    try:
        if repository_url:
            return make(repository_url=repository_url)
        assert repository is not None, "upload() asks for a repository URL or name before this"
        return make(repository_name=repository)
    except exceptions.TwineException as e:
        raise CiError(str(e).splitlines()[0]) from None


def _credentials(s) -> tuple[str | None, str | None]:
    """Username and password from twine's resolver; none found means an anonymous upload. twine logs a
    keyring it cannot ask with its traceback: a handler on its logger keeps that off stderr."""
    from twine import exceptions

    logging.getLogger("twine").addHandler(logging.NullHandler())
    try:
        username = s.username
    except exceptions.TwineException:
        username = None
    try:
        password = s.password
    except exceptions.TwineException:
        password = None
    return username, password


def _twine_check(targets: list[_Target], warn: Callable[[str], None]) -> None:
    """twine check (metadata parses, long description renders); its console output is captured."""
    from twine import exceptions
    from twine.commands import check

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[assignment]  # this one handler's emit: keep each record
    log = logging.getLogger("twine")
    log.addHandler(handler)
    try:
        for t in [t for t in targets if not t.variants_file]:  # twine reads distributions only
            records.clear()
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    failed = check.check([str(t.path)])
            except exceptions.TwineException as e:
                raise Finding(f"twine check failed for {t.path.name}: {str(e).splitlines()[0]}") from None
            msgs = [" ".join(r.getMessage().split()) for r in records]
            if failed:
                raise Finding(f"twine check failed for {t.path.name}: {msgs[0] if msgs else 'see twine check'}")
            for m in msgs:
                warn(f"twine check: {t.path.name}: {m}")
    finally:
        log.removeHandler(handler)


def _chunks(response, size: int = 1 << 16) -> Iterable[bytes]:
    """The body as it arrives: read1 returns what one socket read got, where iter_content waits for a
    whole chunk (a server trickling a byte at a time would stall it past any deadline check)."""
    read1 = getattr(response.raw, "read1", None)
    if read1 is None:  # urllib3 < 2.3: the caller's deadline still holds, the reader just stops later
        yield from response.iter_content(size)
        return
    while chunk := read1(size, decode_content=True):
        yield chunk


def _read_page(session, url: str, seconds: float, deadline: float, cap: int):
    """GET url; the body (text) of a 200 answer, read until the deadline and at most cap bytes."""
    r = session.get(url, headers={"Accept": ACCEPT}, allow_redirects=False, stream=True)
    with contextlib.closing(r):
        if r.status_code != 200:
            return r, None
        body = bytearray()
        for chunk in _chunks(r):
            body += chunk
            if len(body) > cap:
                from wheelci.util.sizes import format_size
                raise MalformedPage(f"the simple page {strip_userinfo(url)} is over {format_size(cap)}; "
                                    "refused (a listing, not a file)")
            if time.monotonic() > deadline:
                raise _too_slow(url, seconds)
        return r, body.decode(r.encoding or "utf-8", errors="replace")


def _too_slow(url: str, seconds: float) -> MalformedPage:
    return MalformedPage(f"the simple page {strip_userinfo(url)} did not arrive within {seconds:g} s "
                         "(--timeout bounds the whole page)")


def fetch_page(session, url: str, seconds: float, cap: int = PAGE_MAX_BYTES):
    """(response, body or None) for one GET of a simple page, the whole of it within `seconds`.
    requests' timeout bounds each socket read, not the request: a server trickling a byte a second
    would hold us forever, an endless body would fill memory. So the GET runs in a daemon thread given
    up on at the deadline (headers can trickle too); the thread stops at its next chunk."""
    deadline = time.monotonic() + seconds
    box: dict[str, object] = {}

    def get() -> None:
        try:
            box["page"] = _read_page(session, url, seconds, deadline, cap)
        except BaseException as e:  # noqa: BLE001  raised again in the caller's thread
            box["error"] = e

    worker = threading.Thread(target=get, name="ci.upload simple page", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        raise _too_slow(url, seconds)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["page"]


class _Index:
    """Reads simple pages with the upload's session (same auth and TLS settings), each GET within
    `timeout` seconds in all."""

    def __init__(self, session, simple_url: str, timeout: float = 300.0) -> None:
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
            try:
                return parse_listing(text, r.headers.get("Content-Type", ""))
            except MalformedPage as e:
                raise MalformedPage(f"{strip_userinfo(url)}: {e}") from None
        return {}


def tls_error(url: str, exc: BaseException) -> CiError:
    """Certificate problems are configuration, not flakiness: never retried, exit 2."""
    m = re.search(r"certificate verify failed: ([^(')\]]+)", str(exc))
    why = m.group(1).strip() if m else short_reason(exc)
    return CiError(f"TLS verification failed for {urlsplit(url).netloc.rpartition('@')[2]} ({why}): set "
                   "TWINE_CERT (or REQUESTS_CA_BUNDLE) to the CA bundle that signs its certificate")


def _default_timeout(session, seconds: float) -> None:
    """twine's session has no timeout: a server that accepts and never answers would hang us forever.
    The read timeout bounds each wait for bytes (not the whole transfer), so big uploads still work."""
    request = session.request

    def with_timeout(method, url, **kw):  # noqa: ANN001, ANN202
        kw.setdefault("timeout", (min(30.0, seconds), seconds))
        return request(method, url, **kw)
    session.request = with_timeout


def upload(files: Iterable[str | os.PathLike], repository_url: str | None = None, *,
           repository: str | None = None, skip_existing: bool = False, simple_url: str | None = None,
           config_file: str | None = None, retries: int = 4, backoff: float = 1.0,
           timeout: float = 300.0, check: bool = True,
           log: Callable[[str], None] | None = None) -> UploadResult:
    """Check, upload, verify. Raises CiError (bad input, rejected credentials) or Finding."""
    from twine.repository import Repository

    say = log or progress.info
    if retries < 0:
        raise CiError("--retries must be >= 0")
    if timeout <= 0:
        raise CiError("--timeout must be > 0")
    targets = _targets(files)
    repository_url = repository_url or os.environ.get("TWINE_REPOSITORY_URL")
    repository = repository or os.environ.get("TWINE_REPOSITORY")
    if not repository_url and not repository:
        raise CiError("no index given: pass --repository-url URL or --repository NAME (a .pypirc section)")
    s = _settings(repository_url, repository, config_file)
    url = s.repository_config["repository"]  # a .pypirc `repository =` may keep its user:pass@
    username, password = _credentials(s)
    secret.add(password, user=username)  # .pypirc and keyring: every channel redacts them from here on
    secret.add_url(url)
    redact = redactor([password, *env_secrets(), *url_secrets(repository_url, simple_url, url)],
                      users=[username, os.environ.get("TWINE_USERNAME"), *url_users(simple_url, url)])
    shown = redact(strip_userinfo(url))
    raw_say = say
    say = lambda m: raw_say(redact(m))  # noqa: E731
    if urlsplit(url).scheme == "http" and not is_loopback(url):
        say(f"warning: {shown} is plain http: credentials and files cross the network unencrypted")
    simple = simple_url or simple_url_for(url)

    check_variants(targets, say)
    if check:
        _twine_check(targets, say)

    logging.getLogger("twine").addHandler(logging.NullHandler())  # we report; twine stays quiet
    repo = Repository(url, username, password, disable_progress_bar=True)
    repo.set_certificate_authority(s.cacert)
    repo.set_client_certificate(s.client_cert)
    _default_timeout(repo.session, timeout)
    up = _Uploader(repo, url, shown, _Index(repo.session, simple, timeout), redact, say,
                   skip_existing=skip_existing, retries=retries, backoff=backoff)
    try:
        for t in targets:
            up.send(t)
        verify(up.index, targets, say, up.fail)
    finally:
        repo.close()
    return UploadResult(shown, redact(strip_userinfo(simple)), tuple(up.results))


class _Uploader:
    """One run's uploads, file by file: what landed so far (a later failure names it, so the user
    knows what the index now holds), the simple pages read so far, and the retry policy. Connection
    errors, timeouts and 5xx are retried with backoff; every other answer is final."""

    def __init__(self, repo, url: str, shown: str, index: _Index, redact: Callable[[str], str],
                 say: Callable[[str], None], *, skip_existing: bool, retries: int, backoff: float) -> None:
        self.repo, self.url, self.shown, self.index = repo, url, shown, index
        self.redact, self.say = redact, say
        self.skip_existing, self.retries, self.backoff = skip_existing, retries, backoff
        self.results: list[FileResult] = []
        self.listings: dict[str, dict[str, Listed]] = {}

    def fail(self, cls: type[CiError], msg: str) -> CiError:
        """The error to raise, redacted, naming the files uploaded before it."""
        done = [r.filename for r in self.results if r.status == "uploaded"]
        tail = f" (uploaded before this: {', '.join(done)})" if done else ""
        return cls(self.redact(msg + tail))

    def same_on_index(self, t: _Target, fresh: bool = False) -> bool | None:
        """True: listed with our sha256; False: listed with another; None: not listed."""
        if fresh or t.project not in self.listings:
            try:
                self.listings[t.project] = self.index.listing(t.project)
            except MalformedPage as e:
                raise self.fail(CiError, str(e)) from None
        if t.path.name not in self.listings[t.project]:
            return None
        theirs = self.listings[t.project][t.path.name]
        if isinstance(theirs, Conflict):
            raise self.fail(Finding, f"the index lists {t.path.name} more than once with different sha256 "
                                     f"({theirs}): an installer may fetch either")
        if theirs is None:
            raise self.fail(Finding, f"the index lists {t.path.name} without a sha256: cannot compare it")
        return theirs == t.sha256

    def send(self, t: _Target) -> None:
        """Upload one file, or skip it when the index has the same bytes (--skip-existing)."""
        from twine import exceptions
        from twine.package import PackageFile

        if self.skip_existing:
            same = self.same_on_index(t)
            if same:
                self.say(f"skipping {t.path.name}: the index has it with the same sha256")
                self.results.append(FileResult(t.path.name, t.project, t.sha256, "skipped", 0))
                return
            if same is False:
                raise self.fail(Finding, f"the index already has a different {t.path.name} (sha256 differs)")
        try:
            package = None if t.variants_file else PackageFile.from_filename(str(t.path), None)
        except exceptions.TwineException as e:
            raise self.fail(CiError, f"{t.path.name}: {str(e).splitlines()[0]}") from None
        attempt = 0
        while True:
            attempt += 1
            self.say(f"uploading {t.path.name} to {self.shown}" + (f" (attempt {attempt})" if attempt > 1 else ""))
            problem = self._attempt(t, package, attempt)
            if problem is None:
                return
            if attempt > self.retries:
                raise self.fail(Finding, f"uploading {t.path.name} failed after {attempt} attempt"
                                         f"{'s' if attempt > 1 else ''}: {problem}")
            delay = self.backoff * 2 ** (attempt - 1)
            self.say(self.redact(f"{t.path.name}: {problem}; retrying in {delay:g}s"))
            time.sleep(delay)

    def _attempt(self, t: _Target, package, attempt: int) -> str | None:
        """One POST. None: the file is on the index; else the passing problem to retry. A TLS error is
        configuration, never retried."""
        import requests
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                resp = (self.repo.upload(package, max_redirects=1) if package  # one try; we retry with backoff
                        else _post_file(self.repo, self.url, t))
        except requests.exceptions.SSLError as e:
            raise self.fail(CiError, str(tls_error(self.url, e))) from None
        except requests.ConnectionError as e:
            return f"connection error: {short_reason(e)}"
        except requests.Timeout as e:
            return f"timeout: {short_reason(e)}"
        except requests.RequestException as e:
            raise self.fail(Finding, f"uploading {t.path.name} failed: {short_reason(e)}") from None
        return self._answer(t, resp, attempt)

    def _answer(self, t: _Target, resp, attempt: int) -> str | None:
        """What the index's answer means: None uploaded; a 5xx is a problem to retry; rejected
        credentials and a redirect are configuration (exit 2); any other refusal is a finding."""
        code = resp.status_code
        if code in (200, 201):
            self.results.append(FileResult(t.path.name, t.project, t.sha256, "uploaded", attempt))
            return None
        if code in (401, 403):
            raise self.fail(CiError, f"{self.shown} rejected the credentials (HTTP {code} {resp.reason}); "
                                     "check TWINE_USERNAME/TWINE_PASSWORD, keyring or .pypirc")
        if code == 409 or (code == 400 and "exist" in f"{resp.reason} {resp.text}".lower()):
            self._exists(t, code, attempt)
            return None
        if 300 <= code < 400:
            where = strip_userinfo(urljoin(self.url, resp.headers.get("Location", "")))
            raise self.fail(CiError, f"{self.shown} redirects the upload (HTTP {code}) to {where}: "
                                     "give the final URL as --repository-url")
        if 500 <= code < 600:
            return f"HTTP {code} {resp.reason}"
        text = answer_text(resp.text, resp.headers.get("Content-Type", ""))
        raise self.fail(Finding, f"{self.shown} refused {t.path.name}: HTTP {code} {resp.reason}"
                                 + (f": {text}" if text else "") + (NO_VARIANTS if t.variants_file else ""))

    def _exists(self, t: _Target, code: int, attempt: int) -> None:
        """An "already exists" answer: a retried POST whose first try landed counts as uploaded (or
        skipped, with --skip-existing) only when the simple page lists our sha256; anything else fails."""
        same = self.same_on_index(t, fresh=True)
        if same and (attempt > 1 or self.skip_existing):  # our earlier attempt landed
            self.results.append(FileResult(t.path.name, t.project, t.sha256,
                                           "uploaded" if attempt > 1 else "skipped", attempt))
            return
        if same:
            raise self.fail(Finding, f"the index already has {t.path.name} (same sha256); "
                                     "pass --skip-existing to skip it")
        raise self.fail(Finding, f"the index already has a different {t.path.name} "
                                 f"(HTTP {code}{'' if same is False else ', not listed'})")


NO_VARIANTS = ("; this index does not take a release's variants file, so installers cannot choose among "
               "variant wheels there: upload the plain and local-labelled wheels only, or serve the directory "
               "with ci.index")


def _post_file(repo, url: str, t: _Target):
    """A variants file through the upload form twine uses for distributions (which its PackageFile
    cannot describe): the index decides whether it takes the name."""
    fields = {":action": "file_upload", "protocol_version": "1", "name": t.project, "version": t.version,
              "sha256_digest": t.sha256}
    with open(t.path, "rb") as f:
        return repo.session.post(url, data=fields, files={"content": (t.path.name, f, "application/json")},
                                 allow_redirects=False)


def verify(index: _Index, targets: list[_Target], say: Callable[[str], None],
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


# ---------------------------------------------------------------- CLI


def main(args: argparse.Namespace) -> int:
    redact = redactor([*env_secrets(), *url_secrets(args.repository_url, args.simple_url)])
    try:
        result = upload(args.files, args.repository_url, repository=args.repository,
                        skip_existing=args.skip_existing, simple_url=args.simple_url,
                        config_file=args.config_file, retries=args.retries, backoff=args.backoff,
                        timeout=args.timeout, check=not args.no_check)
    except CiError as e:  # errors raised before upload() knew every secret (twine's settings) too
        raise type(e)(redact(str(e))) from None
    if args.json:
        from wheelci.cli import emit_json
        emit_json({**asdict(result), "uploaded": result.uploaded, "skipped": result.skipped})
    else:
        for f in result.files:
            print(f"{f.status} {f.filename} sha256={f.sha256}")
        print(f"verified on {result.simple_url}: {len(result.uploaded)} uploaded, "
              f"{len(result.skipped)} skipped")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from wheelci.cli import parser
    p = parser("ci.upload", "Upload wheels/sdists to a private index with twine (check, retry, "
                            "skip identical files, verify sha256 on the simple page).")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--repository-url", metavar="URL",
                       help="upload endpoint (default: $TWINE_REPOSITORY_URL)")
    where.add_argument("--repository", metavar="NAME",
                       help="a section of .pypirc (default: $TWINE_REPOSITORY)")
    p.add_argument("--simple-url", metavar="URL",
                   help="the index's simple URL for checks (default: UPLOAD_URL/simple/, or "
                        ".../simple/ for a .../legacy/ endpoint)")
    p.add_argument("--skip-existing", action="store_true",
                   help="skip files the index already has with the same sha256 (a different file fails)")
    p.add_argument("--config-file", metavar="PATH", help="a .pypirc (default: $TWINE_CONFIG_FILE or ~/.pypirc)")
    p.add_argument("--retries", type=int, default=4, help="retries on connection errors and 5xx (default 4)")
    p.add_argument("--backoff", type=float, default=1.0, metavar="SECONDS",
                   help="first retry delay, doubled each time (default 1)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="give up on a connection silent this long, and on a simple page not read "
                        "in full within it (default 300)")
    p.add_argument("--no-check", action="store_true", help="skip twine check")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("files", nargs="+", metavar="FILE", type=Path,
                   help="wheels, sdists and variants files ({name}-{version}-variants.json, as ci.index writes them)")
    return p


if __name__ == "__main__":
    from wheelci.cli import run
    run(build_parser(), main)
