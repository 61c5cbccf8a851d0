"""Secrets: one registry of values a run must never show, and one redaction every channel applies.

A credential reaches a run in a URL's userinfo (--torch-index-url, --upload, PIP_*_URL and any other
URL given), in an --env or [tool.wheelci] env value, or through twine (TWINE_*, .pypirc, keyring). Each is
registered where it enters (`add`, `add_url`, `add_environ`); every writer passes its text through
`redact`: the CLI's stdout and stderr (every progress line, `+ cmd` echo, error line and --json
document), report.json and report.md, the job summary and the tool logs in the work directory. A
channel added later inherits this by writing through one of them.

Values shorter than MIN_LENGTH are not hunted in free text (redacting every `1` would destroy the
log); where such a value is shown as a variable it is masked by name (`masked`).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any, Iterable, Mapping
from urllib.parse import parse_qsl, quote, unquote, urlsplit

MASK = "***"
MIN_LENGTH = 6
# greedy up to the last `@` before the path: a password may hold `@` (pip and urllib read it so)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s'\"]*@")
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\"]+")
# A query's key=value pair wherever a URL shows it: raw, HTML-escaped (`&amp;`) or inside JSON (`\u0026`)
_QUERY_PAIR = re.compile(r"(?i)([?&;]|&amp;|\\u0026)([A-Za-z0-9_.~%+-]{1,100})=([^&#\s'\"<>;\\]*)")
# The one rule for which variables are secrets by their name (a CI's tokens, twine's password, a cloud's
# key pair, an SSH key), as shell patterns over the upper-cased name; docs/guarantees.md shows it as
# names_doc() writes it (a test keeps the two equal).
SECRET_NAMES = ("*_KEY", "*_KEY_ID", "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*AUTH*", "*CREDENTIAL*",
                "SSH_*", "*API_KEY*", "*APIKEY*", "*PRIVATE_KEY*", "*PRIVATEKEY*")


def is_secret_name(name: str) -> bool:
    """Whether a variable of this name holds a credential, by SECRET_NAMES (case-insensitive)."""
    from fnmatch import fnmatchcase

    upper = name.upper()
    return any(fnmatchcase(upper, pattern) for pattern in SECRET_NAMES)


def secret_query_key(key: str) -> bool:
    """Whether a URL query's value is a credential by its key (access_token, api_key, X-Amz-Signature, sig)."""
    name = re.sub(r"[^A-Za-z0-9]", "_", key)
    return is_secret_name(name) or bool(re.search(
        r"(?i)(?:^|_)(?:key|sig|signature|password|passwd|pass|pwd|jwt|session|sessionid|hmac|accesskey)(?:$|_)", name))


def names_doc() -> str:
    """SECRET_NAMES as docs/guarantees.md shows them, between its secret-names markers."""
    return ("A variable is a secret when its name, upper-cased, matches one of: "
            + ", ".join(f"`{p}`" for p in SECRET_NAMES) + ".")

_values: set[str] = set()
_users: set[str] = set()
_needles: list[str] = []  # every form of every value, longest first (rebuilt on add)


def add(*values: str | None, user: str | None = None) -> None:
    """Register secret values (as given, URL-quoted, and inside a Basic auth header with `user`); a value
    of several lines also line by line, as a log shows it."""
    lines = [ln.strip() for v in values if v and "\n" in v for ln in v.splitlines()]
    new = {v for v in (*values, *lines) if v and len(v) >= MIN_LENGTH} - _values
    if user:
        _users.update({user, unquote(user)})
    if not new and not user:
        return
    _values.update(new)
    forms = {f for v in _values for f in (v, _quoted(v), unquote(v), *_escaped(v))}
    forms |= {base64.b64encode(f"{u}:{v}".encode("utf-8", "surrogateescape")).decode() for u in _users for v in _values}
    _needles[:] = sorted((f for f in forms if len(f) >= MIN_LENGTH), key=len, reverse=True)


def _escaped(value: str) -> tuple[str, ...]:
    """The value as a JSON document or a log of one holds it (`"`, `\\` and non-ASCII escaped)."""
    return tuple(json.dumps(value, ensure_ascii=a)[1:-1] for a in (True, False))


def _quoted(value: str) -> str:
    """A value percent-encoded as a URL carries it; any byte, a variable's that is not UTF-8 included (the
    environment is decoded with surrogateescape)."""
    return quote(value.encode("utf-8", "surrogateescape"), safe="")


def add_url(url: str | None) -> None:
    """A URL's password (its user name stays readable: devpi puts user names in index paths). What a
    lenient parser could read as userinfo counts too: everything before the last `@` of the authority,
    even across a `/` or a space (`https://u:a/b c@host/`), since some client somewhere reads it so."""
    if not url or "://" not in url:
        return
    try:
        parts = urlsplit(url)
        password, user = parts.password, parts.username
    except ValueError:
        password = user = None
    if password:
        add(password, unquote(password), user=user)
    query = re.split(r"#", url.split("?", 1)[1], maxsplit=1)[0] if "?" in url else ""
    for key, value in parse_qsl(query, keep_blank_values=False):
        if secret_query_key(key):
            add(value, _quoted(value))  # ?access_token=..., a signed URL's X-Amz-Signature
    head = re.split(r"[?#]", url.split("://", 1)[1], maxsplit=1)[0]
    if "@" in head:
        info = head.rsplit("@", 1)[0]
        name, sep, rest = info.partition(":")
        if sep:
            add(rest, unquote(rest), user=name)
        elif "/" not in info and " " not in info:
            add(info, unquote(info))  # a token as the whole userinfo (https://TOKEN@host/)


def add_text(text: str | None) -> None:
    """The passwords of every URL inside a text (an option's value, an environment value), the text
    read whole as well (a password may hold a space)."""
    for url in {*_URL.findall(text or ""), *([text] if text and "://" in text else [])}:
        add_url(url)


def add_environ(env: Mapping[str, str]) -> None:
    """What an environment carries: URL passwords in any value, and every value of a variable whose
    name says it is a credential (GITHUB_TOKEN, TWINE_PASSWORD, PRIVATE_INDEX_PASSWORD)."""
    for name, value in env.items():
        add_text(value)
        if is_secret_name(name):
            add(value)


def shown_names(public: Iterable[str]) -> set[str]:
    """The names declared public whose values may be shown: never one named as a secret (SECRET_NAMES),
    whatever public-env says."""
    return {name for name in public if not is_secret_name(name)}


def add_variables(env: Mapping[str, str], public: Iterable[str] = ()) -> None:
    """Build variables (--env, [tool.wheelci] env): every value is secret unless its name is declared public
    (and is not named as a secret)."""
    shown = shown_names(public)
    for name, value in env.items():
        add_text(value)
        if name not in shown:
            add(value)


def masked(env: Mapping[str, str], public: Iterable[str] = ()) -> dict[str, str]:
    """Variables as they are shown: NAME=*** unless NAME is declared public (and not named as a secret)."""
    shown = shown_names(public)
    return {k: redact(v) if k in shown else MASK for k, v in env.items()}


_STOP_COMMANDS = re.compile(r"::stop-commands::([0-9a-f]{32})")


def redact(text: str) -> str:
    """The text with every registered value and every URL's userinfo replaced (the values first: a
    password holding `@` would otherwise be cut in two by the userinfo rule, and half of it kept). The
    markers that turn a workflow log's commands off and on again (util.untrusted.workflow_commands_off)
    are kept whole: a secret such as `stop-commands` would otherwise rewrite them, and the lines between
    them would run as commands."""
    tokens = set(_STOP_COMMANDS.findall(text)) if "::stop-commands::" in text else set()
    if not tokens:
        return _redact(text)
    markers = re.compile("(" + "|".join(re.escape(m) for t in sorted(tokens)
                                         for m in (f"::stop-commands::{t}", f"::{t}::")) + ")")
    return "".join(part if i % 2 else _redact(part) for i, part in enumerate(markers.split(text)))


def _redact(text: str) -> str:
    for needle in _needles:
        if needle in text:
            text = text.replace(needle, MASK)
    if "@" in text:
        text = _USERINFO.sub(r"\1", text)
    if "=" in text and ("?" in text or "&" in text or ";" in text or "\\u0026" in text):
        text = _QUERY_PAIR.sub(_pair, text)  # any URL's query, a path's as a server logs it (`GET /x?token=`)
    return text


def mask_query(url: str) -> str:
    """A URL with the values of its credential-named query keys masked (?access_token=***), whoever
    gave it: the user, an index page's link, a redirect's Location or a store's error text."""
    head, sep, tail = url.partition("?")
    if not sep:
        return url
    return head + _QUERY_PAIR.sub(_pair, "?" + tail)


def _pair(m: re.Match[str]) -> str:
    """A query's key=value with the value masked where the key names a credential."""
    if m.group(3) and m.group(3) != MASK and secret_query_key(unquote(m.group(2))):
        return f"{m.group(1)}{m.group(2)}={MASK}"
    return m.group(0)


def redact_bytes(data: bytes) -> bytes:
    """redact for a tool's output, whatever its encoding (undecodable bytes pass through)."""
    if not _needles and b"@" not in data and not (b"=" in data and (b"?" in data or b"&" in data or b";" in data)):
        return data
    return redact(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def redact_data(obj: Any) -> Any:
    """redact over a JSON-like document: every string in it, keys included."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {redact_data(k): redact_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_data(v) for v in obj]
    return obj


class RedactingStream:
    """A text stream (sys.stdout, sys.stderr) whose writes are redacted; its `.buffer` redacts bytes."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        raw = getattr(stream, "buffer", None)
        self.buffer = _RedactingBuffer(raw) if raw is not None else None

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding: the stream's own
        return getattr(self._stream, name)


class _RedactingBuffer:
    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def write(self, data: bytes) -> int:
        self._raw.write(redact_bytes(bytes(data)))
        return len(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)
