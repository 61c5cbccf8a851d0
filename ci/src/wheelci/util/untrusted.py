"""Text from outside (a project's names and settings, its tests' output, a wheel's members, a server's
words) made safe for each place it is shown, so that it stays data there.

- `one_line`: redacted (util.secret), terminal escapes (ANSI CSI/OSC sequences) removed, every other control character, line or
  paragraph separator turned to a space: nothing can write a line of its own (a forged `ok`, a
  `::error::` workflow command at a line's start) or drive the terminal.
- `markdown`: redacted (util.secret: before anything changes the secret's characters or cuts it), one
  line, then HTML's `&`, `<`, `>` as entities and Markdown's punctuation backslashed:
  a cell of report.md (and the job summary) cannot open a tag or a comment that hides the outcome,
  a link, an image, emphasis or a table column.
- `code`: redacted, one line in an inline code span whose fence outlasts any backtick run inside it (pipes still
  escaped: GitHub's tables split on them even in code).
- `terminal_bytes`: a tool's own output as it streams, its colours kept (SGR) and every other escape
  removed: it cannot set the clipboard or a title (OSC), move the cursor or clear a line to redraw it.
- `workflow_commands_off`: lines a workflow log shows between `::stop-commands::TOKEN` and `::TOKEN::`
  (GitHub's own switch), a token the text cannot know, so that no line of it runs as a command.
"""

from __future__ import annotations

import re
from typing import Iterable

from wheelci.util import secret

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), other two-character escapes, and C1's CSI
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]")
# what could open emphasis, a link or image, a heading (after a blockquote's `> `), strikethrough or a
# table column, and the backslash itself
# table column, and the backslash itself; `_` only where it can open or close emphasis (not inside a
# word, as in test_name or ops_cpu, which GFM never reads as emphasis)
_MARKDOWN = re.compile(r"([\\`*\[\]#|~]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")


# what a tool's streamed output loses: every ESC that does not open an SGR sequence (colours, bold), so no
# escape survives in part or rebuilt from pieces, and the UTF-8 C1 controls (CSI, OSC as one character)
_NOT_SGR = re.compile(rb"\x1b(?!\[[0-9;:]*m)|\xc2[\x80-\x9f]")


def terminal_bytes(data: bytes) -> bytes:
    """A tool's output as a terminal or a log may show it: colours kept, no other escape can start."""
    return _NOT_SGR.sub(b"", data)


def one_line(text: object) -> str:
    """The text on one line: redacted first (a character turned to a space would hide a registered secret,
    or cut a URL's userinfo off its `@`), escapes gone, control and separator characters as spaces, runs of
    spaces one."""
    s = _ANSI.sub("", secret.redact(str(text)))
    s = "".join(c if c.isprintable() else " " for c in s)
    return " ".join(s.split())


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(0, width - 1)] + "…"


def markdown(text: object, width: int = 240) -> str:
    """Plain text for a Markdown line or table cell: redacted first (an escaped or cut secret no longer
    matches its registered value), then cut at `width` characters before escaping (an escape is never cut
    in half)."""
    s = cut(one_line(secret.redact(str(text))), width)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN.sub(lambda m: "\\" + m.group(0), s)


def code(text: object, width: int = 240) -> str:
    """Text as inline code: its own fence, longer than any run of backticks in it."""
    s = cut(one_line(secret.redact(str(text))), width).replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def workflow_commands_off(lines: Iterable[str]) -> list[str]:
    """The lines between GitHub's stop-commands markers, the token fresh and unguessable."""
    import secrets  # hmac and OpenSSL's hashes: not on every command's import (build --help)

    token = secrets.token_hex(16)
    return [f"::stop-commands::{token}", *(secret.redact(line) for line in lines), f"::{token}::"]
