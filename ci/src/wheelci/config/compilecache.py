"""A remote compile cache, as the user names it (`--compile-cache URL`, `[tool.wheelci] compile-cache`,
`WHEELCI_COMPILE_CACHE`: wheelci.config.options), read into the variables sccache takes: pure, no network
(but withheld_while, which takes the store's settings out of this process's environment for a build).

    redis://[USER:PASSWORD@]HOST[:PORT][/DB]   (rediss:// for TLS)   SCCACHE_REDIS_*
    http(s)://[USER:PASSWORD@]HOST[:PORT]/PATH  a WebDAV store (GET/PUT)   SCCACHE_WEBDAV_*
    s3://BUCKET[/PREFIX][?endpoint=URL&region=R&no-credentials=1]   SCCACHE_BUCKET, SCCACHE_ENDPOINT, ...
        keys from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN (never in the URL)
    gha                                         GitHub Actions' cache (ACTIONS_RESULTS_URL, ACTIONS_RUNTIME_TOKEN)

A credential (the URL's user and password, the S3 keys, the Actions token) is registered as a secret here,
where it enters, and is never part of `name`, the only form of the storage anything shows. sccache splits
nvcc into its per-architecture steps and caches each, so builds of different arch lists share them.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Iterator, Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from wheelci.config import stores
from wheelci.config.project import Backend
from wheelci.errors import CiError
from wheelci.util import secret

SCHEMES = stores.SCHEMES
S3_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
GHA_VARIABLES = ("ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN")
S3_QUERY = ("endpoint", "region", "no-credentials")


@dataclass(frozen=True)
class CompileCache:
    kind: str  # "redis" | "webdav" | "s3" | "gha"
    name: str  # the storage as shown (report, plan, logs): no user, password or query
    environ: dict[str, str] = field(default_factory=dict)  # sccache's variables (credentials among them: never shown)
    unusable: str | None = None  # why this machine cannot reach it (gha outside Actions): the build compiles locally


def _bad(what: str) -> CiError:
    return CiError(f"bad --compile-cache: {what} (want {stores.forms()}; the URL is not shown, it may hold a password)")


def parse(url: str, env: Mapping[str, str]) -> CompileCache:
    """The storage `url` names, and sccache's variables for it; `env` is where the S3 keys and the Actions
    tokens come from. Bad input raises CiError with one line that never repeats the URL (it may hold a password)."""
    text = url.strip()
    secret.add_url(text)
    if text in ("gha", "gha:", "gha://"):
        return _gha(env)
    try:
        parts = urlsplit(text)
        port, user, password = parts.port, parts.username, parts.password
    except ValueError:  # a port that is not a number: `user:pa/ss@host` read as host `user`
        raise _bad("not a URL (percent-encode `/`, `#`, `?` and `@` in its user or password)") from None
    if parts.fragment or "@" in parts.path or "@" in parts.query:  # a strict reader would take another host
        raise _bad("a `#` or `@` after its host (percent-encode `/`, `#`, `?` and `@` in its user or password)")
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES or not (parts.hostname or scheme == "s3" and parts.netloc):
        raise _bad(f"scheme {scheme!r} with no host" if scheme in SCHEMES else f"unknown scheme {scheme[:16]!r}")
    user, password = unquote(user or ""), unquote(password or "")
    secret.add(password, user=user)  # the user name stays readable, as everywhere
    host = parts.hostname or ""
    hostport = f"[{host}]" if ":" in host else host
    hostport += f":{port}" if port is not None else ""
    if scheme != "s3" and parts.query:  # nothing of a query reaches sccache: refused, never dropped
        raise _bad(f"a {scheme}:// URL takes no query (sccache has no setting for it); only s3:// takes one")
    if scheme in ("redis", "rediss"):
        return _redis(scheme, hostport, parts.path, user, password)
    if scheme == "s3":
        if user or password or "@" in parts.netloc:
            raise _bad("an s3:// URL takes no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        return _s3(parts.netloc, parts.path, parts.query, env)
    endpoint = f"{scheme}://{hostport}{parts.path or '/'}"
    out = {"SCCACHE_WEBDAV_ENDPOINT": endpoint, **_login("WEBDAV", user, password)}
    return CompileCache("webdav", f"webdav {endpoint}", out)


def _login(store: str, user: str, password: str) -> dict[str, str]:
    """sccache's variables for a store's user and password, only those the URL gave."""
    given = {f"SCCACHE_{store}_USERNAME": user, f"SCCACHE_{store}_PASSWORD": password}
    return {k: v for k, v in given.items() if v}


def _redis(scheme: str, hostport: str, path: str, user: str, password: str) -> CompileCache:
    db = path.strip("/")
    if db and not db.isdigit():
        raise _bad("a redis:// URL's path is a database number (redis://HOST:PORT/1)")
    endpoint = f"{scheme}://{hostport}"
    out = {"SCCACHE_REDIS_ENDPOINT": endpoint, **_login("REDIS", user, password)}
    if db:
        out["SCCACHE_REDIS_DB"] = db
    return CompileCache("redis", f"redis {endpoint}{f'/{db}' if db else ''}", out)


def _s3(bucket: str, path: str, query: str, env: Mapping[str, str]) -> CompileCache:
    try:
        given = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise _bad("an s3:// URL's query is endpoint=URL&region=R") from None
    unknown = sorted(set(given) - set(S3_QUERY))
    if unknown or any(len(v) != 1 for v in given.values()):
        raise _bad(f"an s3:// URL takes each of {', '.join(S3_QUERY)} once" + (f", not {unknown[0][:32]!r}" if unknown else ""))
    q = {k: v[0] for k, v in given.items()}
    out = {"SCCACHE_BUCKET": bucket}
    prefix = path.strip("/")
    if prefix:
        out["SCCACHE_S3_KEY_PREFIX"] = prefix
    endpoint = q.get("endpoint", "")
    if endpoint and (endpoint != endpoint.strip() or any(ord(c) < 0x21 or ord(c) == 0x7f for c in endpoint)):
        raise _bad("an s3:// URL's endpoint holds a space or a control character")
    if endpoint:
        secret.add_url(endpoint)
        try:
            at = urlsplit(endpoint)
            at.port  # noqa: B018  raises on a port that is not a number
        except ValueError:
            raise _bad("an s3:// URL's endpoint is not a URL (endpoint=https://HOST[:PORT])") from None
        if at.scheme.lower() not in ("http", "https") or not at.hostname:
            raise _bad("an s3:// URL's endpoint is an http:// or https:// URL with a host (endpoint=https://HOST[:PORT])")
        if at.username or at.password:
            raise _bad("an s3:// URL's endpoint takes no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        out["SCCACHE_ENDPOINT"] = endpoint
        out["SCCACHE_S3_USE_SSL"] = "false" if endpoint.lower().startswith("http://") else "true"
    if q.get("region"):
        out["SCCACHE_REGION"] = q["region"]
    if q.get("no-credentials", "").lower() in ("1", "true", "yes"):
        out["SCCACHE_S3_NO_CREDENTIALS"] = "true"
    for name in S3_KEYS:
        if env.get(name):
            secret.add(env[name])
            out[name] = env[name]
    where = f" at {endpoint}" if endpoint else ""
    return CompileCache("s3", f"s3 {bucket}{f'/{prefix}' if prefix else ''}{where}", out)


def _gha(env: Mapping[str, str]) -> CompileCache:
    missing = [v for v in GHA_VARIABLES if not env.get(v)]
    out = {"SCCACHE_GHA_ENABLED": "on", **{v: env[v] for v in GHA_VARIABLES if env.get(v)}}
    secret.add(env.get("ACTIONS_RUNTIME_TOKEN"))
    why = (f"{' and '.join(missing)} not set (outside GitHub Actions, or a job that does not expose them)"
           if missing else None)
    return CompileCache("gha", "gha (GitHub Actions cache)", out, why)


STORE_VARIABLE = "WHEELCI_COMPILE_CACHE"  # the store's URL, as a variable (wheelci.config.options)
_held: dict[str, str] = {}  # the store's settings this process took out of its environment (withheld_while)


def withheld(cache: CompileCache | None) -> frozenset[str]:
    """The variables the project's own code (its build, its tests: often a third party's) is not handed: the
    store is the tool's, and only sccache's server, started with them, talks to it. The store's URL (it may
    hold a password) always; the S3 keys and the Actions token where this store took them."""
    taken = set(cache.environ) & {*S3_KEYS, *GHA_VARIABLES} if cache is not None else set()
    return frozenset({STORE_VARIABLE, *taken})


def for_the_store(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with the store's settings this process holds back from its children (withheld_while): what
    the store is read from while a build runs."""
    return {**environ, **_held}


@contextlib.contextmanager
def withheld_while(cache: CompileCache | None) -> Iterator[None]:
    """This process's environment without the store's settings (withheld) for the block, a build: everything
    it starts, the project's setup.py, its build requirements' installs, verify's imports and its tests,
    inherits the rest, while sccache's server gets them from the store as read (for_the_store). It keeps the
    store's password out of what they print; a project that means harm can still read its parent's
    environment."""
    gone = {k: os.environ.pop(k) for k in withheld(cache) if k in os.environ}
    _held.update(gone)
    try:
        yield
    finally:
        for k in gone:
            _held.pop(k, None)
        os.environ.update(gone)


# From this torch on, cpp_extension puts the ccache it finds in front of its compilers, nvcc included and on
# both its ninja and its one-file-at-a-time paths (torch 2.12 and older: none; wheelci.compile.launch).
TORCH_FINDS_CCACHE = "2.13"


def cache_goes(backend: str, torch_finds_it: bool) -> str:
    """How a compile cache goes in front of a build's compilers (wheelci.compile.launch), host and container
    alike: "cmake" (CMake's launchers), "itself" (Meson, or a torch that puts ccache there), or "cxx" (the
    one-word CXX script, PYTORCH_NVCC and torch's own wrapper off)."""
    if backend == Backend.SCIKIT_BUILD_CORE:
        return "cmake"
    return "itself" if backend == Backend.MESON_PYTHON or torch_finds_it else "cxx"


def torch_finds_ccache(torch: str) -> bool:
    """Whether this torch release puts ccache in front of its compilers by itself."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(torch).release >= Version(TORCH_FINDS_CCACHE).release
    except InvalidVersion:
        return False
