"""A project named by its requirement: `wheelci plan NAME==VERSION` fetches the sdist from the index pip is
pointed at (PEP 691 JSON or PEP 503 HTML, written here by `wheelci index` and served on loopback), checks
its sha256, caches it, and plans it; what does not fit is one line and exit 2, with nothing left behind."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests import _proc

from wheelci.config import fetch
from wheelci.config.releases import IndexFile, parse_page
from wheelci.errors import CiError
from packaging.requirements import Requirement
from tests._servers import GuardedServer, NegotiatingServer

TINY = Path(__file__).resolve().parent / "fixtures" / "tiny_ext"


def _sdist(dest: Path, version: str) -> Path:
    """tiny_ext as an sdist of `version` (the fixture's files under tiny_ext-VERSION/)."""
    path = dest / f"tiny_ext-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for f in sorted(p for p in TINY.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            data = f.read_bytes()
            if f.name == "pyproject.toml":
                data = data.replace(b'version = "0.1.0"', f'version = "{version}"'.encode())
            info = tarfile.TarInfo(f"tiny_ext-{version}/{f.relative_to(TINY)}")
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """A directory of three sdists (a pre-release the newest) and its static index."""
    root = tmp_path_factory.mktemp("index")
    for version in ("0.1.0", "0.2.0", "0.3.0rc1"):
        _sdist(root, version)
    _proc.run([sys.executable, "-m", "wheelci", "index", str(root)], check=True, capture_output=True)
    return root


def plan(requirement: str, url: str, cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIP_INDEX_URL": url, "WHEELCI_CACHE_DIR": str(cache)}
    return _proc.run([sys.executable, "-m", "wheelci", "plan", "--cpu", "--json", requirement, *extra],
                          capture_output=True, text=True, env=env, timeout=120)


def test_a_pinned_requirement_is_fetched_checked_and_planned_from_pep_691(index, tmp_path):
    with NegotiatingServer(index) as server:
        r = plan("tiny-ext==0.1.0", f"{server.url}simple", tmp_path)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)["fetched"]
        assert ("/simple/tiny-ext/", "index.json") in server.served  # the JSON page, as pip asks for it
    data = (index / "tiny_ext-0.1.0.tar.gz").read_bytes()
    assert got["filename"] == "tiny_ext-0.1.0.tar.gz" and got["sha256"] == hashlib.sha256(data).hexdigest()
    assert got["requirement"] == "tiny-ext==0.1.0" and got["version"] == "0.1.0"
    assert (tmp_path / "sdists" / got["sha256"][:32] / "tiny_ext-0.1.0.tar.gz").read_bytes() == data  # by its digest
    assert json.loads(r.stdout)["project"] == "tiny-ext"


def test_a_name_alone_is_the_newest_final_release_through_html_and_basic_auth(index, tmp_path):
    with GuardedServer(index, user="reader", password="s3cret-pw") as server:
        url = f"http://reader:s3cret-pw@127.0.0.1:{server.port}/simple"
        r = plan("tiny_ext", url, tmp_path)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)["fetched"]
        assert got["version"] == "0.2.0", got  # 0.3.0rc1 is a pre-release: only a pin takes it
        assert "s3cret-pw" not in r.stdout + r.stderr
        assert plan("tiny-ext==0.3.0rc1", url, tmp_path).returncode == 0


def test_a_file_that_is_not_the_one_the_index_hashed_is_refused_and_not_kept(index, tmp_path):
    tampered = tmp_path / "served"
    tampered.mkdir()
    for p in index.rglob("*"):
        if p.is_file():
            (tampered / p.relative_to(index)).parent.mkdir(parents=True, exist_ok=True)
            (tampered / p.relative_to(index)).write_bytes(p.read_bytes())
    with open(tampered / "tiny_ext-0.2.0.tar.gz", "ab") as f:
        f.write(b"\0")
    with NegotiatingServer(tampered) as server:
        r = plan("tiny-ext==0.2.0", f"{server.url}simple", tmp_path / "cache")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "tiny_ext-0.2.0.tar.gz: its sha256 is" in r.stderr and "refused" in r.stderr
    assert not list((tmp_path / "cache").rglob("tiny_ext-0.2.0*"))


def test_a_corrupt_cached_copy_is_fetched_again(index, tmp_path):
    data = (index / "tiny_ext-0.1.0.tar.gz").read_bytes()
    cached = tmp_path / "sdists" / hashlib.sha256(data).hexdigest()[:32] / "tiny_ext-0.1.0.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"not the sdist")
    with NegotiatingServer(index) as server:
        assert plan("tiny-ext==0.1.0", f"{server.url}simple", tmp_path).returncode == 0
    assert cached.read_bytes() == data


@pytest.mark.parametrize("requirement, message", [
    ("tiny-ext==9.9", "tiny-ext==9.9: no sdist of it on http://127.0.0.1:"),
    ("no-such-project", "no-such-project: no such file or directory, and no project of that name on"),
    ("tiny-ext[extra]==0.1.0; python_version<'3'", "without a URL or marker"),
])
def test_what_the_index_cannot_answer_is_one_line(index, tmp_path, requirement, message):
    with NegotiatingServer(index) as server:
        r = plan(requirement, f"{server.url}simple", tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_path_is_never_read_as_a_requirement(tmp_path, monkeypatch):
    """A missing directory written as a path stays a missing path: nothing is fetched for ./tiny-ext."""
    monkeypatch.chdir(tmp_path)
    r = plan("./tiny-ext", "http://127.0.0.1:9/simple", tmp_path)
    assert r.returncode == 2 and "tiny-ext: no such file or directory" in r.stderr and "index" not in r.stderr


def test_pick_follows_pep_440_and_592():
    """A wildcard is no pin (no pre-release, no yanked file for it); a pre-release is taken where it is all
    there is; an upper-case digest is a digest; a name with a space or a slash is no file of the project."""
    files = [IndexFile("proj-1.0.tar.gz", "final", False, "a" * 64, True), IndexFile("proj-1.1rc1.tar.gz", "rc", False, "b" * 64),
             IndexFile("proj-1.0 .tar.gz", "space", False, "c" * 64), IndexFile("proj-2.0rc1.tar.gz", "rc2", False, "d" * 64)]
    assert fetch.pick(Requirement("proj==1.*"), files, "i")[0].url == "rc"  # 1.0 is yanked: the rc is all there is
    assert fetch.pick(Requirement("proj==1.0"), files, "i")[0].url == "final"  # pinned: even yanked
    with pytest.raises(CiError, match="the others are yanked"):
        fetch.pick(Requirement("proj<1.1"), [files[0]], "i")
    doc = {"files": [{"filename": "p-1.0.tar.gz", "url": "p-1.0.tar.gz", "hashes": {"sha256": "AB" * 32}}]}
    (f,) = parse_page(json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json", "https://i.example/simple/p/")
    assert f.sha256 == "ab" * 32


def test_pick_takes_the_newest_allowed_and_a_yanked_file_only_when_pinned():
    files = [IndexFile("proj-1.0.tar.gz", "u1", False, "a" * 64), IndexFile("proj-1.1.tar.gz", "u2", False, "b" * 64, True),
             IndexFile("proj-1.1-cp311-cp311-linux_x86_64.whl", "w", False), IndexFile("other-2.0.tar.gz", "o", False)]
    assert fetch.pick(Requirement("proj"), files, "i")[0].url == "u1"
    assert fetch.pick(Requirement("PROJ==1.1"), files, "i")[0].url == "u2"
    with pytest.raises(CiError, match=r"proj>=2: no sdist of it on i \(sdists there: 1.0, 1.1; the others are yanked"):
        fetch.pick(Requirement("proj>=2"), files, "i")


def test_pages_give_their_digests_and_yanks():
    html = (b'<a href="../../p-1.0.tar.gz#sha256=' + b"AB" * 32 + b'" data-yanked="">p-1.0.tar.gz</a>'
            b'<a href="p-2.0.tar.gz#md5=00">p-2.0.tar.gz</a>')
    one, two = parse_page(html, "text/html", "https://i.example/simple/p/")
    assert one.sha256 == "ab" * 32 and one.yanked and one.url == "https://i.example/p-1.0.tar.gz"
    assert two.sha256 is None and not two.yanked
    doc = {"files": [{"filename": "p-1.0.tar.gz", "url": "p-1.0.tar.gz", "hashes": {"sha256": "c" * 64}, "yanked": "bad"}]}
    (f,) = parse_page(json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json", "https://i.example/simple/p/")
    assert f.sha256 == "c" * 64 and f.yanked
