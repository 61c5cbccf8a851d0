"""The compile cache's stores, as data: each kind's URL form and where its credentials come from. The
option's help, the refusal of a bad URL (wheelci.config.compilecache) and the docs' table are made from
STORES, so a store kind is added here once. Standard library only: `--help` imports it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Store:
    kind: str  # as report.json names it
    form: str  # the URL as the user writes it
    credentials: str  # where its credentials come from (never shown)
    schemes: tuple[str, ...]


STORES = (
    Store("redis", "redis://HOST[:PORT][/DB]", "the URL's user and password (`rediss://` for TLS)", ("redis", "rediss")),
    Store("webdav", "http(s)://HOST/PATH", "the URL's user and password", ("http", "https")),
    Store("s3", "s3://BUCKET[/PREFIX][?endpoint=URL&region=R]",
          "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) from the environment", ("s3",)),
    Store("gha", "gha", "GitHub Actions' ACTIONS_RESULTS_URL and ACTIONS_RUNTIME_TOKEN", ("gha",)),
)
SCHEMES = tuple(s for store in STORES for s in store.schemes)


def forms() -> str:
    """The stores' URL forms as one phrase: `redis://HOST..., http(s)://HOST/PATH (WebDAV), ... or gha`."""
    shown = [s.form + (" (WebDAV)" if s.kind == "webdav" else "") for s in STORES]
    return ", ".join(shown[:-1]) + " or " + shown[-1]
