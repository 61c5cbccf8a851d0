"""Core metadata (METADATA, PKG-INFO): the one reader, and the edits the stages make to it.

It is read as installers read it: the stdlib's email parser under the compat32 policy, as
packaging.metadata and importlib.metadata do. So a folded header keeps its continuation lines: a License
written over several lines is one value, never its first line only. The headers end at the first blank
line, or at the first line that is neither a header nor a continuation (everything after it is body, for
pip as for us). Edits re-render the headers from what was read and leave the body as it was; a value that
would span lines (a newline from a user's option) is refused, so no edit can inject a header.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from wheelci.errors import CiError

METADATA_CAP = 16 << 20  # what is read whole into memory: torch's METADATA is about 10 KB
_FOLD = re.compile(r"\n(?=[ \t])")


@dataclass(frozen=True)
class Header:
    key: str  # as written
    value: str  # as written after `key:`, continuation lines kept (each after "\n", with its indentation)

    @property
    def unfolded(self) -> str:
        """The value on one line (RFC 5322 unfolding: each line break before whitespace removed), stripped."""
        return _FOLD.sub("", self.value).strip()

    def render(self) -> str:
        return f"{self.key}:" + (" " if self.value and self.value[0] != "\n" else "") + self.value


@dataclass(frozen=True)
class Metadata:
    headers: tuple[Header, ...]
    body: str  # the long description after the headers, as written ("" for none)
    newline: str  # the text's own line ending: "\n" or "\r\n"

    def fields(self, key: str) -> list[Header]:
        key = key.lower()
        return [h for h in self.headers if h.key.lower() == key]

    def get_all(self, key: str) -> list[str]:
        """Every value of `key` (header names are case-insensitive), each unfolded onto one line."""
        return [h.unfolded for h in self.fields(key)]

    def render(self) -> str:
        nl = self.newline
        head = nl.join(h.render().replace("\n", nl) for h in self.headers) + nl
        return head + nl + self.body if self.body else head


def parse_metadata(text: str) -> Metadata:
    """The headers and body of core metadata, as the email parser (compat32) reads them."""
    from email import policy
    from email.parser import Parser

    msg = Parser(policy=policy.compat32).parsestr(text)
    first_break = re.search(r"\r?\n", text)
    newline = first_break.group(0) if first_break else "\n"
    headers = tuple(Header(k, v.replace("\r\n", "\n")) for k, v in msg.items())
    body = msg.get_payload()
    return Metadata(headers, body if isinstance(body, str) else "", newline)


def get_headers(text: str, key: str) -> list[str]:
    """Every value of `key` in METADATA text, each unfolded onto one line."""
    return parse_metadata(text).get_all(key)


def header_lines(text: str, keys: Iterable[str]) -> list[str]:
    """The first header of each of `keys` that METADATA has, as written (continuation lines kept), to
    copy into another METADATA."""
    meta = parse_metadata(text)
    return [found[0].render() for key in keys if (found := meta.fields(key))]


def _one_line(key: str, value: str) -> None:
    if "\n" in value or "\r" in value or not re.fullmatch(r"[!-9;-~]+", key):
        raise CiError(f"refusing to write METADATA header {key}: {value!r} (a header is one line, and its "
                      "name printable ASCII without a colon)")


def set_header(text: str, key: str, value: str) -> str:
    """METADATA with the value of its first `key` header replaced (the body untouched)."""
    _one_line(key, value)
    meta = parse_metadata(text)
    at = next((i for i, h in enumerate(meta.headers) if h.key.lower() == key.lower()), None)
    if at is None:
        raise CiError(f"METADATA has no {key} header")
    headers = list(meta.headers)
    headers[at] = Header(key, value)
    return replace(meta, headers=tuple(headers)).render()


def check_identity(text: str) -> None:
    """Name and Version must each be one unfolded header. A second one, or a continuation line, leaves
    tools to disagree on which applies, and set_header would replace the whole value."""
    meta = parse_metadata(text)
    for key in ("Name", "Version"):
        found = meta.fields(key)
        if len(found) > 1:
            raise CiError(f"METADATA has {len(found)} {key} headers: which one applies is ambiguous")
        if found and "\n" in found[0].value:
            raise CiError(f"METADATA's {key} header is folded over several lines: write it on one line")


def edit_headers(text: str, *, remove: Callable[[str, str], bool] | None = None,
                 append: Iterable[tuple[str, str]] = ()) -> str:
    """Drop the headers where remove(key, unfolded value) is true (continuation lines and all), and
    append new one-line headers after the others."""
    meta = parse_metadata(text)
    added = []
    for key, value in append:
        _one_line(key, value)
        added.append(Header(key, value))
    kept = [h for h in meta.headers if not (remove and remove(h.key.strip(), h.unfolded))]
    return replace(meta, headers=(*kept, *added)).render()
