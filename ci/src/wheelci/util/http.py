"""The one HTTP client for what the tool reads from the network (torch releases on an index: its page,
PEP 658 metadata, a wheel's METADATA by range requests).

Built on requests, already a dependency (twine uploads through it): its Session pools connections and
takes proxies, CA bundles and netrc from the environment as pip does. Three things it does not do are
done here, because an index is untrusted:
- Credentials are scoped to one origin (scheme, host, port): the base URL's userinfo (percent-decoded,
  so `/`, `#` and `@` in a password work as %2F, %23, %40), else netrc, else keyring (a user without a
  password) is sent with every request to that origin (the page, `.metadata`, each range read) and to no
  other. requests keeps Authorization on an http→https redirect to the same host and knows no origin of
  its own, so redirects are followed here, each hop deciding afresh (another origin: no credentials).
- A deadline per request, as well as per socket read: requests' timeout bounds each read, so a server
  dripping a byte every few seconds would hold a plan forever. The request runs in a daemon thread
  given up on at the deadline (headers can drip too), which also stops at its next chunk.
- Only GET and HEAD, both idempotent: a dropped connection, 429 or 5xx is retried with backoff, within
  the same deadline.
Every refusal is one line (CiError) naming the URL without userinfo; no credential is ever in it.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Mapping, TypeVar
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from wheelci.errors import CiError
from wheelci.util import secret

DEADLINE = 120.0  # seconds for one request in all: connect, redirects, retries, headers and body
READ_TIMEOUT = 30.0  # seconds for one socket read
MAX_REDIRECTS = 10
RETRIES = 3
BACKOFF = 0.5
_RETRY_STATUS = {429, 500, 502, 503, 504}
_REDIRECT_STATUS = {301, 302, 303, 307, 308}
T = TypeVar("T")


class HttpError(CiError):
    """One refused request: `status` is the HTTP status where there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Origin:
        try:
            parts = urlsplit(url)
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
        except ValueError:
            raise HttpError(f"{shown(url)}: no host and port can be read from it") from None
        return cls(parts.scheme.lower(), (parts.hostname or "").lower(), port)


@dataclass(frozen=True)
class Answer:
    url: str  # the final URL (after redirects), without userinfo
    status: int
    headers: Mapping[str, str]  # looked up whatever the case the server wrote (HTTP/2 writes lower case)
    body: bytes


def _stripped(url: str) -> str:
    """The URL without userinfo nor fragment, its query whole; ValueError where it cannot be parsed."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    return urlunsplit(parts._replace(fragment=""))


def _bare(url: str) -> str:
    """The URL a request goes to: without userinfo (the credentials go in a header, to its origin only) nor
    a fragment, its query whole (a signed link's token is what the server checks)."""
    try:
        return _stripped(url)
    except ValueError:
        return url


def shown(url: str) -> str:
    """The URL as it may be shown or kept: without userinfo (a mirror's token), a fragment, or the value of a
    credential-named query key (an index page's `?access_token=`)."""
    try:
        return secret.mask_query(_stripped(url))
    except ValueError:
        return "<a malformed URL>"


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """(the URL without userinfo, (user, password) percent-decoded or None). A URL a strict parser reads
    otherwise than a lenient one (a raw `/`, `#` or `?` in a password) is refused, never guessed at."""
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018  raises on a port that is not a number (`u:pa/ss@h` read as host u, port pa)
    except ValueError:  # its reason quotes what it read as the port: maybe half a password
        raise CiError(f"{_what(url)} is not a usable URL (no host and port can be read from it); percent-encode `/`, `#`, `?` and `@` "
                      "in its user or password (%2F, %23, %3F, %40)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CiError(f"{_what(url)} is not an http(s) URL")
    if parts.fragment or "@" in parts.path or "@" in parts.query:
        raise CiError(f"{_what(url)} is not a usable URL (a `#` or `@` after its host); percent-encode `/`, "
                      "`#`, `?` and `@` in its user or password (%2F, %23, %3F, %40)")
    bare = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    if parts.username is None:
        return bare, None
    user, password = unquote(parts.username), unquote(parts.password or "")
    secret.add(password, parts.password, user=parts.username)
    return bare, (user, password)


def _what(url: str) -> str:
    """What a refusal names of a URL it could not read: nothing of it (a password may be anywhere in it)."""
    return "the URL given"


def _stored_credentials(url: str, user: str | None) -> tuple[str, str] | None:
    """netrc's entry for the URL's host, else keyring's password for a user named without one."""
    import requests.utils

    try:
        found = requests.utils.get_netrc_auth(url)
    except Exception:  # noqa: BLE001  a broken netrc is no credential
        found = None
    if found and (user is None or found[0] == user):
        secret.add(found[1], user=found[0])
        return found[0], found[1]
    if user is None:
        return None
    try:
        import keyring  # twine's dependency; absent or without a backend, there is none

        password = keyring.get_password(f"{urlsplit(url).scheme}://{urlsplit(url).netloc}", user)
    except Exception:  # noqa: BLE001  no keyring, no backend, a locked one
        return None
    if password:
        secret.add(password, user=user)
        return user, password
    return None


@dataclass
class Client:
    """Requests to URLs, credentials sent to `url`'s origin only; `deadline` seconds per request in all."""

    url: str
    deadline: float = DEADLINE
    read_timeout: float = READ_TIMEOUT
    retries: int = RETRIES
    backoff: float = BACKOFF
    base: str = field(init=False)
    origin: Origin = field(init=False)
    auth: tuple[str, str] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.base, auth = split_credentials(self.url)
        self.origin = Origin.of(self.base)
        if auth is None or not auth[1]:
            auth = _stored_credentials(self.base, auth[0] if auth else None) or auth
        self.auth = auth

    def credentials_for(self, url: str) -> tuple[str, str] | None:
        return self.auth if Origin.of(url) == self.origin else None

    def get(self, url: str, headers: Mapping[str, str] | None = None, cap: int = 64 << 20,
            method: Literal["GET", "HEAD"] = "GET", ok: tuple[int, ...] = (200,)) -> Answer:
        """One request within the deadline: redirects followed (credentials re-decided at each hop),
        passing failures retried; a status outside `ok` or a body over `cap` bytes is one HttpError."""
        url = _bare(url)
        try:
            answer = within(self.deadline, lambda deadline: self._with_retries(
                url, dict(headers or {}), cap, method, deadline, ok), f"http {method}")
        except TimeoutError:
            raise HttpError(f"{url}: no complete answer within {self.deadline:g} s (too slow), given up") from None
        if answer.status not in ok:
            raise HttpError(_refusal(url, answer, self.credentials_for(answer.url) is not None), answer.status)
        return answer

    def _with_retries(self, url: str, headers: dict[str, str], cap: int, method: str, deadline: float,
                      ok: tuple[int, ...]) -> Answer:
        """One request's whole life, in its own session: a worker given up on at the deadline never shares
        a connection with the next request, and its sockets close with it."""
        import requests

        with requests.Session() as session:
            return self._attempts(session, url, headers, cap, method, deadline, ok)

    def _attempts(self, session: Any, url: str, headers: dict[str, str], cap: int, method: str, deadline: float,
                  ok: tuple[int, ...]) -> Answer:
        import requests

        attempt = 0
        while True:
            attempt += 1
            try:
                answer = self._follow(session, url, headers, cap, method, deadline, ok)
                if answer.status not in _RETRY_STATUS or attempt > self.retries:
                    return answer
            except requests.exceptions.SSLError as e:
                raise HttpError(f"{url}: TLS failed ({_tls_reason(e)}); set REQUESTS_CA_BUNDLE to the CA bundle "
                                "that signs its certificate") from None
            except (requests.ConnectionError, requests.Timeout) as e:
                if attempt > self.retries:
                    raise HttpError(f"{url}: cannot read it ({_short_reason(e)}) after {attempt} attempts") from None
            except requests.RequestException as e:
                raise HttpError(f"{url}: {_short_reason(e)}") from None
            pause = self.backoff * 2 ** (attempt - 1)
            if time.monotonic() + pause > deadline:
                raise _Late()
            time.sleep(pause)

    def _follow(self, session: Any, url: str, headers: dict[str, str], cap: int, method: str, deadline: float,
                ok: tuple[int, ...]) -> Answer:
        seen = [url]
        while True:
            r = self._send(session, url, headers, method, deadline)
            with r:
                location = r.headers.get("Location")
                if r.status_code not in _REDIRECT_STATUS or not location:
                    # a refusal's body is not read: its status is the whole answer
                    body = _body(r, url, cap, deadline) if method == "GET" and r.status_code in ok else b""
                    return Answer(url, r.status_code, r.headers.copy(), body)  # case-insensitive, as HTTP's names are
            try:  # a hostile Location (`http://h:notaport/`, `:99999`, `http://[::1/`) is the server's fault
                nxt = urljoin(url, location)
                usable = urlsplit(nxt)
                usable.port  # noqa: B018  raises on a port that is no port
            except ValueError:
                raise HttpError(f"{url}: redirected to a malformed URL (no host and port can be read), not "
                                "followed") from None
            nxt = _bare(nxt)
            if usable.scheme not in ("http", "https"):
                raise HttpError(f"{url}: redirected to a {urlsplit(nxt).scheme or 'relative'} URL, not followed")
            if nxt in seen:
                raise HttpError(f"{url}: a redirect loop (back to {nxt})")
            if len(seen) > MAX_REDIRECTS:
                raise HttpError(f"{url}: more than {MAX_REDIRECTS} redirects")
            seen.append(nxt)
            url = nxt

    def _send(self, session: Any, url: str, headers: dict[str, str], method: str, deadline: float) -> Any:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Late()
        # another origin gets _NO_AUTH, not None: requests would add netrc's entry for that host (netrc
        # is per host, an origin per port too)
        auth = self.credentials_for(url) or _NO_AUTH
        try:
            return session.request(method, url, headers=headers, auth=auth, allow_redirects=False,
                                   stream=True, timeout=(min(left, self.read_timeout), min(left, self.read_timeout)))
        except ValueError:  # requests reads an answer's Location as it comes (`http://[::1/`: no host to read)
            raise HttpError(f"{url}: a malformed URL in the request or its answer's redirect (no host and port can "
                            "be read), not followed") from None


def _no_auth(request: Any) -> Any:
    return request


_NO_AUTH = _no_auth


def within(seconds: float, work: Callable[[float], T], name: str) -> T:
    """work(deadline) run in a daemon thread and given up on at the deadline (TimeoutError): requests'
    timeouts bound each socket read, never a whole request (headers and bodies can drip). The thread
    stops at its next chunk (`chunks`, checking the deadline it was given). Uploads' simple-page reads
    (wheelci.publish.listing) and Client.get share this one mechanism."""
    deadline = time.monotonic() + seconds
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work(deadline)
        except BaseException as e:  # noqa: BLE001  raised again in the caller's thread
            box["error"] = e

    worker = threading.Thread(target=run, name=name, daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive() or isinstance(box.get("error"), _Late):
        raise TimeoutError(name)
    if "error" in box:
        raise box["error"]
    value: T = box["value"]  # what work returned, run() put it there
    return value


def chunks(response: Any, size: int = 1 << 16) -> Iterator[bytes]:
    """A streamed body as it arrives: read1 returns what one socket read got, where iter_content waits
    for a whole chunk (a server trickling a byte at a time would keep the worker past its deadline)."""
    read1 = getattr(response.raw, "read1", None)
    if read1 is None:  # urllib3 < 2.3: the caller's deadline still holds, the worker just stops later
        yield from response.iter_content(size)
        return
    while chunk := read1(size, decode_content=True):
        yield chunk


class _Late(Exception):
    """The deadline passed inside the worker (between chunks, or before a retry)."""


def _body(r: Any, url: str, cap: int, deadline: float) -> bytes:
    declared = r.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > cap:
        raise HttpError(f"{url}: larger than {_size(cap)} (it says {_size(int(declared))}), not read")
    parts: list[bytes] = []
    total = 0
    for chunk in chunks(r):
        total += len(chunk)
        if total > cap:
            raise HttpError(f"{url}: larger than {_size(cap)}, not read")
        if time.monotonic() > deadline:
            raise _Late()
        parts.append(chunk)
    return b"".join(parts)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def _refusal(url: str, answer: Answer, had_credentials: bool) -> str:
    import http

    try:
        reason = http.HTTPStatus(answer.status).phrase
    except ValueError:
        reason = ""
    line = f"{url}: HTTP {answer.status}" + (f" {reason}" if reason else "")
    if answer.status in (401, 403):
        line += (" (the credentials were refused)" if had_credentials else
                 " (no credentials for this origin: give them in the URL as user:token@, in netrc or keyring)")
    return line


def _short_reason(exc: BaseException) -> str:
    """One line for a requests error, without its pool and URL preamble, never a credential."""
    text = str(exc)
    m = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
    if m:
        return secret.redact(m.group(0).strip())
    for needle in ("Connection refused", "Connection aborted", "Connection reset", "RemoteDisconnected",
                   "timed out", "IncompleteRead", "Exceeded 30 redirects"):
        if needle.lower() in text.lower():
            return needle.lower().replace("remotedisconnected", "server closed the connection")
    return type(exc).__name__


def _tls_reason(exc: BaseException) -> str:
    m = re.search(r"certificate verify failed: ([^(')\]]+)", str(exc))
    return secret.redact(m.group(1).strip()) if m else _short_reason(exc)
