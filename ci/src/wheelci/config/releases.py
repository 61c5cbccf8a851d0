"""A torch release as its index describes it, for the releases the matrix does not list yet.

What an extension needs from a torch release is in that release's own metadata: the CUDA toolkit it
pins (`cuda-toolkit[...]==13.2.2`, or `nvidia-cuda-runtime-cu12==12.8.90` before cuda-toolkit), its
cuDNN pin, the Pythons it has wheels for (Requires-Python and the wheel tags) and its manylinux policy
(the Linux wheel's tag), which also gives its C++ ABI: every manylinux_2_28 torch is cxx11-ABI. So a
release that reaches the index tomorrow plans with no change here.

The metadata is read once per release: PEP 658 metadata where the index serves it, else the wheel's
METADATA through HTTP range requests (the zip's directory and one member, not 500 MB). The result is
cached as JSON under the tool's cache, with the URL it came from, which the plan shows.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from email.parser import HeaderParser
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Mapping

from wheelci.config import matrix as mx
from wheelci.errors import CiError
from wheelci.util import http, variables
from wheelci.util.atomic import write_text
from wheelci.util.cache import cache_dir, read_stamp
from wheelci.util.untrusted import cut, one_line

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

INDEX = "https://pypi.org/simple"
INDEX_VARIABLE = variables.TORCH_INDEX  # another index to read torch releases from (a mirror, a local one)
ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
PAGE_MAX = 64 << 20  # PyPI's torch page is about 4 MB
METADATA_MAX = 4 << 20
DIRECTORY_MAX = 16 << 20  # a torch wheel's central directory is about 1 MB
_WHEEL = re.compile(r"torch-(?P<version>[^-]+)-(?P<python>cp3\d+)-(?P<abi>cp3\d+t?)-(?P<platform>[\w.]+)\.whl")
# an x86_64 Linux wheel's tag, read as the policy names the matrix uses (manylinux1 and 2_17 are 2014's floor)
_POLICY = {"manylinux1": "manylinux2014", "manylinux2010": "manylinux2014", "manylinux2014": "manylinux2014",
           "manylinux_2_5": "manylinux2014", "manylinux_2_12": "manylinux2014", "manylinux_2_17": "manylinux2014",
           "manylinux_2_28": "manylinux_2_28", "manylinux_2_34": "manylinux_2_34"}
LINUX = {"platform_system": "Linux", "sys_platform": "linux", "platform_machine": "x86_64", "os_name": "posix"}


@dataclass(frozen=True)
class TorchRelease:
    """One torch release's x86_64 Linux wheels, as their metadata says."""

    version: str
    cuda: str | None  # X.Y of the toolkit its wheels pin; None: a CPU build
    toolkit: str | None  # that pin as written (cuda-toolkit[...]==13.2.2)
    cudnn: str | None  # nvidia-cudnn-cuNN==9.x.y.z
    python: tuple[str, ...]
    manylinux: str
    source: str  # the metadata's URL

    @property
    def cxx11_abi(self) -> bool:
        return self.manylinux != "manylinux2014"

    @property
    def line(self) -> mx.TorchLine:
        minor = ".".join(self.version.split("+")[0].split(".")[:2])
        return mx.TorchLine(minor, self.python, self.manylinux, self.cxx11_abi)

    def build(self, on_pypi: bool) -> mx.TorchBuild:
        """The release as a matrix row's torch; `on_pypi`: it was read from PyPI, whose build it is."""
        return mx.TorchBuild(self.version, self.cudnn or "", on_pypi, self.source)


def parse_release(metadata: str, filenames: list[str], source: str) -> TorchRelease:
    """The release that METADATA text and its files' names describe (pure)."""
    from packaging.requirements import Requirement
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.utils import canonicalize_name

    headers = HeaderParser().parsestr(metadata)
    names, versions = headers.get_all("Name") or [], headers.get_all("Version") or []
    if len(names) != 1 or canonicalize_name(names[0].strip()) != "torch":
        raise CiError(f"{source}: its METADATA names {_named(names)}, not torch once: not torch's metadata")
    if len(versions) != 1:
        raise CiError(f"{source}: its METADATA has {len(versions)} Version headers, not one: refused")
    version = versions[0].strip().split("+")[0]  # PyTorch's own indexes label it: 2.15.0+cu132
    wheels = [m for m in map(_WHEEL.fullmatch, filenames) if m and _base(m["version"]) == version]
    linux = [m for m in wheels if m["platform"].endswith("_x86_64") and "linux" in m["platform"]]
    if not linux:
        raise CiError(f"torch {version or '?'}: no x86_64 Linux wheel at {source}")
    policies = {_POLICY.get(tag.rsplit("_x86_64", 1)[0]) for m in linux for tag in m["platform"].split(".")}
    policy = min((p for p in policies if p), key=mx.POLICIES.index, default=None)
    if policy is None:
        raise CiError(f"torch {version}: no manylinux policy this tool knows in {linux[0].group(0)}")
    try:
        requires_python = SpecifierSet(headers.get("Requires-Python") or "")
    except InvalidSpecifier:
        requires_python = SpecifierSet()
    pythons = sorted({f"3.{m['python'][3:]}" for m in linux if m["abi"] == m["python"]},
                     key=lambda p: int(p.split(".")[1]))
    pythons = [p for p in pythons if requires_python.contains(p + ".0", prereleases=True)]
    if not pythons:
        raise CiError(f"torch {version}: no CPython wheel for x86_64 Linux within its Requires-Python at {source}")
    cuda = toolkit = cudnn = None
    for text in headers.get_all("Requires-Dist") or []:
        try:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({**LINUX, "python_version": pythons[-1]}):
                continue
        except Exception:  # packaging's InvalidRequirement, UndefinedComparison...: not a pin we read
            continue
        name = canonicalize_name(req.name)
        pinned = next((s.version for s in req.specifier if s.operator == "=="), "")
        toolkit_pin = re.fullmatch(r"([0-9]+\.[0-9]+)(\.[0-9]+)*", pinned)
        if toolkit_pin and (name == "cuda-toolkit" or re.fullmatch(r"nvidia-cuda-runtime(-cu[0-9]+)?", name)
                            and cuda is None):
            cuda, toolkit = toolkit_pin[1], text.split(";")[0].strip()
        elif name.startswith("nvidia-cudnn-cu") and re.fullmatch(r"[0-9.]+", pinned):
            cudnn = f"{name}=={pinned}"
    return TorchRelease(version, cuda, toolkit, cudnn, tuple(pythons), policy, source)


def _named(names: list[str]) -> str:
    return ", ".join(repr(cut(one_line(n), 40)) for n in names[:3]) or "no project"


def _base(version: str) -> str:
    return version.split("+")[0]


# --- reading an index ---------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    metadata: bool  # the index serves its PEP 658 metadata at url + ".metadata"
    sha256: str | None = None  # the digest the index gives (PEP 691 hashes, PEP 503's #sha256= fragment)
    yanked: bool = False  # PEP 592


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.found.append(dict(attrs))


def parse_page(body: bytes, content_type: str, base: str) -> list[IndexFile]:
    """A project's simple page (PEP 691 JSON or PEP 503 HTML) as its files (pure)."""
    files = []
    if "json" in content_type:
        try:
            doc = json.loads(body)
            entries = [(f["filename"], f["url"], bool(f.get("core-metadata") or f.get("dist-info-metadata")),
                        _hex((f.get("hashes") or {}).get("sha256")), bool(f.get("yanked"))) for f in doc["files"]]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CiError(f"{_shown(base)}: not a simple index page ({type(e).__name__})") from None
    else:
        parser = _Anchors()
        parser.feed(body.decode("utf-8", "replace"))
        hrefs = [(a, a["href"]) for a in parser.found if a.get("href")]
        entries = [(urllib.parse.unquote(urllib.parse.urlsplit(href).path.rsplit("/", 1)[-1]), href,
                    bool(a.get("data-core-metadata") or a.get("data-dist-info-metadata")),
                    _fragment_sha256(href), "data-yanked" in a)
                   for a, href in hrefs if href]
    local = urllib.parse.urlsplit(base).scheme == "file"
    for filename, url, metadata, sha256, yanked in entries:
        url = urllib.parse.urljoin(base, url).split("#")[0]
        if urllib.parse.urlsplit(url).scheme in (("file",) if local else ("http", "https")):
            # a remote page never points at this machine's files
            files.append(IndexFile(filename, url, metadata, sha256 if isinstance(sha256, str) else None, yanked))
    return files


def _hex(value: object) -> str | None:
    """A sha256 as the index gives it, lower-case (hex is hex in either case)."""
    return value.lower() if isinstance(value, str) and re.fullmatch(r"[0-9a-fA-F]{64}", value) else None


def _fragment_sha256(href: str) -> str | None:
    """PEP 503's `#sha256=HEX` (lower-case hex), or None."""
    m = re.search(r"#sha256=([0-9a-fA-F]{64})$", href)
    return m[1].lower() if m else None


def metadata_url(url: str) -> str:
    """A file's PEP 658 metadata URL: `.metadata` after its path, before a query the index signs it with
    (`?access_token=`), which a server reads apart from the path."""
    head, sep, query = url.partition("?")
    return f"{head}.metadata{sep}{query}"


def _shown(url: str) -> str:
    """The URL without userinfo (a mirror's token)."""
    return http.shown(url)


class _RangeFile(io.RawIOBase):
    """A remote file read by HTTP range requests, as zipfile seeks it: only what it reads is fetched."""

    def __init__(self, client: http.Client, url: str, size: int) -> None:
        self.client, self.url, self.size, self.pos, self.fetched = client, url, size, 0, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: 0, 1: self.pos, 2: self.size}[whence] + offset
        return self.pos

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer)  # its length and slices read through its view: a buffer need not have them
        want = min(len(view), self.size - self.pos)
        if want <= 0:
            return 0
        self.fetched += want
        if self.fetched > DIRECTORY_MAX + METADATA_MAX:
            raise CiError(f"{_shown(self.url)}: reading its METADATA took more than "
                          f"{(DIRECTORY_MAX + METADATA_MAX) >> 20} MiB of range requests")
        try:
            data = self.client.get(self.url, {"Range": f"bytes={self.pos}-{self.pos + want - 1}"}, cap=want,
                                   ok=(206,)).body
        except http.HttpError as e:
            if e.status == 200:  # the whole wheel, unread
                raise CiError(f"{_shown(self.url)}: the server ignores range requests and serves no metadata") from None
            raise
        view[:len(data)] = data
        self.pos += len(data)
        return len(data)


def _wheel_metadata(client: http.Client | None, url: str) -> str:
    """METADATA of a remote wheel: the zip's end, its directory, then one member (zipfile's reads)."""
    import zipfile  # a remote archive: wheelci.wheel.zipread reads local files by descriptor

    if urllib.parse.urlsplit(url).scheme == "file":
        stream: Any = _local_file(url)
    else:
        assert client is not None
        head = client.get(url, method="HEAD")
        try:
            size = int(head.headers.get("Content-Length") or 0)
        except ValueError:
            raise CiError(f"{_shown(url)}: no usable Content-Length") from None
        stream = io.BufferedReader(_RangeFile(client, url, size), 1 << 16)
    try:
        with stream, zipfile.ZipFile(stream) as z:
            names = [i for i in z.infolist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", i.filename)]
            if len(names) != 1 or names[0].file_size > METADATA_MAX:
                raise CiError(f"{_shown(url)}: no single METADATA of a readable size")
            return z.read(names[0]).decode("utf-8", "replace")
    except zipfile.BadZipFile as e:
        raise CiError(f"{_shown(url)}: not a wheel ({e})") from None


def _local_file(url: str) -> BinaryIO:
    """A wheel of a local (file:) index opened for reading: a regular file only, the open never waiting
    (a FIFO in its place would hold the plan forever)."""
    path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise CiError(f"{_shown(url)}: {e.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CiError(f"{_shown(url)}: not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _local_text(url: str, cap: int) -> str:
    """A file of a local (file:) index, at most `cap` bytes, never a FIFO's wait."""
    path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CiError(f"{url}: not a regular file")
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(cap + 1)
        finally:
            os.close(fd)
    except OSError as e:
        raise CiError(f"{url}: {e.strerror}") from None
    if len(data) > cap:
        raise CiError(f"{url}: larger than {cap >> 20} MiB, not read")
    return data.decode("utf-8", "replace")


def _checked(doc: object, version: str) -> TorchRelease | None:
    """A cached release, if it is one of this version in every field's type; else None (read it again)."""
    if not isinstance(doc, dict) or set(doc) != {f for f in TorchRelease.__dataclass_fields__}:
        return None
    text_or_none = ("cuda", "toolkit", "cudnn")
    if (doc["version"] != version or not all(isinstance(doc[k], (str, type(None))) for k in text_or_none)
            or not isinstance(doc["python"], list) or not doc["python"]
            or not all(isinstance(p, str) and re.fullmatch(r"3\.[0-9]+", p) for p in doc["python"])
            or doc["manylinux"] not in mx.POLICIES or not isinstance(doc["source"], str)
            or (doc["cuda"] is not None and not re.fullmatch(r"[0-9]+\.[0-9]+", doc["cuda"]))):
        return None
    return TorchRelease(**{**doc, "python": tuple(doc["python"])})


class TorchIndex:
    """Where torch releases are read: an index URL and the cache of what was read from it."""

    def __init__(self, url: str = INDEX, cache: Path | None = None, deadline: float = http.DEADLINE) -> None:
        url = url.strip().rstrip("/")
        self.client = None if urllib.parse.urlsplit(url).scheme == "file" else http.Client(url, deadline)
        self.url = self.client.base if self.client else url  # credentials live in the client only
        key = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        self.cache = (cache or cache_dir("torch-releases")) / f"v1-{key}"
        self._files: list[IndexFile] | None = None  # the torch page, read once per TorchIndex

    @property
    def is_pypi(self) -> bool:
        return self.url == INDEX

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TorchIndex:
        return cls(env.get(INDEX_VARIABLE) or INDEX, cache_dir("torch-releases", env=env))

    def files(self) -> list[IndexFile]:
        if self._files is None:
            self._files = self._read_files()
        return self._files

    def _read_files(self) -> list[IndexFile]:
        page = f"{self.url}/torch/"
        if urllib.parse.urlsplit(page).scheme == "file":
            local = Path(urllib.request.url2pathname(urllib.parse.urlsplit(page).path))
            found = next((local / n for n in ("index.json", "index.html") if (local / n).is_file()), None)
            if found is None:
                raise CiError(f"{page}: no torch page in that index")
            return parse_page(found.read_bytes(), "json" if found.suffix == ".json" else "html", found.as_uri())
        assert self.client is not None
        r = self.client.get(page, {"Accept": ACCEPT}, cap=PAGE_MAX)
        return parse_page(r.body, r.headers.get("Content-Type", ""), r.url)

    def versions(self, files: list[IndexFile] | None = None) -> list[str]:
        """The final releases with an x86_64 Linux wheel, oldest first."""
        from packaging.version import Version

        found = set()
        for f in files if files is not None else self.files():
            m = _WHEEL.fullmatch(f.filename)
            if m and m["platform"].endswith("_x86_64") and "linux" in m["platform"]:
                if re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", _base(m["version"])):  # finals, as --torch names them
                    found.add(_base(m["version"]))
        return sorted(found, key=Version)

    def release(self, version: str) -> TorchRelease:
        """The release, from the cache or else from the index (then cached)."""
        cached = self.cache / f"{version}.json"
        try:
            found = _checked(json.loads(read_stamp(cached, METADATA_MAX)), version)  # a FIFO never blocks
        except (OSError, ValueError):
            found = None
        if found is not None:
            return found
        files = self.files()
        known = self.versions(files)
        if version not in known:
            minor = ".".join(version.split(".")[:2]) + "."
            same = [v for v in known if v.startswith(minor)]
            raise CiError(f"torch {version} is not on {_shown(self.url)} ("
                          + (f"torch {minor[:-1]} there: {', '.join(same)}; " if same else "")
                          + f"newest there: {known[-1] if known else 'none'})")
        ours = [f for f in files if (m := _WHEEL.fullmatch(f.filename)) and _base(m["version"]) == version
                and m["platform"].endswith("_x86_64") and "linux" in m["platform"]]
        # served metadata first, then a GIL-ful CPython's wheel (every one of a release names the same pins)
        pick = max(ours, key=lambda f: (f.metadata, not f.filename.split("-")[3].endswith("t"), f.filename))
        if pick.metadata and self.client is None:
            source = metadata_url(pick.url)
            text = _local_text(source, METADATA_MAX)
        elif pick.metadata:
            assert self.client is not None
            source = metadata_url(pick.url)
            text = self.client.get(source, cap=METADATA_MAX).body.decode("utf-8", "replace")
        else:
            text, source = _wheel_metadata(self.client, pick.url), pick.url
        release = parse_release(text, [f.filename for f in files], _shown(source))
        if release.version != version:
            raise CiError(f"{_shown(source)} says it is torch {release.version or '?'}, not {version}")

        cached.parent.mkdir(parents=True, exist_ok=True)
        write_text(cached, json.dumps(asdict(release)))
        return release

    def latest(self, bound: str | None = None) -> str:
        """The newest release, of those within `bound` (a project's own torch specifier) where one is given."""
        from packaging.specifiers import SpecifierSet

        known = [v for v in self.versions() if bound is None or SpecifierSet(bound).contains(v)]
        if not known:
            within = f" within torch{bound}" if bound else ""
            raise CiError(f"{_shown(self.url)} lists no torch release{within} with an x86_64 Linux wheel")
        return known[-1]


# --- the torch a CUDA row builds ------------------------------------------------------------------


def choose_torch(matrix: mx.Matrix, row: mx.CudaRow, torch: str | None,
                 index: TorchIndex) -> tuple[mx.TorchBuild, mx.TorchLine, list[str]]:
    """The torch release a CUDA row builds against, its line, and a note where the index said it. A
    release the matrix does not list is read from the index: tomorrow's torch needs no change here."""
    version = torch or row.default_torch
    if version and not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", version):
        raise CiError(f"bad torch version {version!r} (want e.g. {row.default_torch or matrix.default_torch}, or latest)")
    if not version:  # a toolkit no listed torch is built on: the index's newest, if it is
        version = index.latest()
        newest = index.release(version)
        if newest.cuda != row.version:
            raise CiError(f"no torch release is built on CUDA {row.version} yet (the newest, {version}, is "
                          f"built on CUDA {newest.cuda or 'none'}): name one with --torch")
    build = row.torch_build(version)
    if build is not None:
        return build, matrix.torch_line(version), []
    others = [r.version for r in matrix.rows if r.torch_build(version)]
    if others:
        raise CiError(f"torch {version} has no CUDA {row.version} build (torch {version} is built for CUDA "
                      f"{', '.join(others)}; CUDA {row.version} has torch "
                      f"{', '.join(t.version for t in row.torch) or 'none listed'})")
    release = index.release(version)
    if release.cuda != row.version:
        raise CiError(f"torch {version} on the index is built on CUDA {release.cuda or 'none (a CPU build)'}, "
                      f"not {row.version} ({f'--cuda {release.cuda}' if release.cuda else '--cpu'}, or "
                      f"--torch-index-url for another build)")
    return release.build(on_pypi=index.is_pypi), release.line, [release_note(release)]


def release_note(release: TorchRelease) -> str:
    return (f"torch {release.version} is not in the matrix: CUDA {release.cuda or 'none'}, "
            f"{release.cudnn or 'no cuDNN'}, Python {release.python[0]}-{release.python[-1]}, {release.manylinux} "
            f"({'cxx11' if release.cxx11_abi else 'pre-cxx11'} ABI), read from {release.source}")
