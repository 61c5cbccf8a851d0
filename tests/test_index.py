"""ci.index: a static simple index that pip reads (file:// and http), incremental, strict on bad input."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from wheelci.index import build_index
from wheelci.wheel.names import classify, sdist_name
from wheelci.verifyenv import fresh_venv
from tests._servers import NegotiatingServer, StaticServer, build_wheel, pip_install
from tests import _proc
from tests._wheels import age_past_racy

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("wheels")
    return {
        # setuptools keeps the dotted, mixed-case name in the file name: the index must normalize it.
        "dotted": build_wheel(tmp, name="Tiny.Pkg", version="1.0", module="tinypkg", value=1,
                              requires_python=">=3.8"),
        "tagged": build_wheel(tmp, name="tagged_pkg", version="2.1.0", module="taggedpkg", value=7,
                              build_tag="0"),
        "other": build_wheel(tmp, name="other_pkg", version="0.3", module="otherpkg", value=3),
    }


def cli(*args: str) -> subprocess.CompletedProcess:
    return _proc.run([sys.executable, "-m", "ci.index", *args], cwd=ROOT,
                     capture_output=True, text=True)


def populate(d: Path, *files: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy2(f, d / f.name)
    return d


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def wheel_metadata_bytes(whl: Path) -> bytes:
    with zipfile.ZipFile(whl) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return zf.read(name)


# ---------------------------------------------------------------- names (pure)


@pytest.mark.parametrize("filename, expected", [
    ("triton-2.1.0-0-cp38-cp38-manylinux_2_17_x86_64.whl", ("wheel", "triton", "2.1.0")),
    ("Tiny.Pkg-1.0-py3-none-any.whl", ("wheel", "tiny-pkg", "1.0")),
    ("torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", ("wheel", "torch", "2.13.0+cpu")),
    ("zope.interface-6.0.tar.gz", ("sdist", "zope-interface", "6.0")),
    ("my-legacy-name-1.2.zip", ("sdist", "my-legacy-name", "1.2")),
    ("README.txt", None),
    ("bad-wheel.whl", None),
    ("x-1.0-a-b-py3-none-any.whl", None),  # build tag must start with a digit
    ("x-1.0-a-py3-none-any.whl", ("wheel", "x", "1.0")),  # PEP 825 reads it: variant label "any"
    ("x-1.0-cp311-cp311-linux_x86_64-cu130.whl", ("wheel", "x", "1.0")),
    ("x-1.0-cp311-cp311-linux_x86_64-CU130.whl", None),  # labels are lowercase
    # `$` in the name patterns matched before a trailing newline; packaging accepts "1.0\n" as a version
    ("demo\n-1.0.tar.gz", None),
    ("demo\n-1.0-py3-none-any.whl", None),
    ("demo-1.0\n-py3-none-any.whl", None),
    ("demo-1.0-py3-none-any\n.whl", None),
    ("demo-v1.0-py3-none-any.whl", None),
])
def test_classify(filename, expected):
    assert classify(filename) == expected


def test_sdist_name_needs_a_version():
    assert sdist_name("project.tar.gz") is None


# ---------------------------------------------------------------- pages


def test_pages_carry_hashes_metadata_and_requires_python(tmp_path, wheels):
    repo = populate(tmp_path / "repo", wheels["dotted"], wheels["tagged"])
    r = cli(str(repo), "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert (result["files"], result["projects"], result["hashed"]) == (2, 2, 2)

    whl = wheels["dotted"]
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    meta = (repo / f"{whl.name}.metadata").read_bytes()
    assert meta == wheel_metadata_bytes(whl)  # PEP 658: exactly the METADATA bytes
    meta_sha = hashlib.sha256(meta).hexdigest()

    page = (repo / "simple" / "tiny-pkg" / "index.html").read_text()
    assert f'href="../../{whl.name}#sha256={sha}"' in page
    assert 'data-requires-python="&gt;=3.8"' in page
    assert f'data-core-metadata="sha256={meta_sha}"' in page
    assert "dist-info-metadata" not in page  # PEP 714: the legacy key breaks pip 22.3-23.1
    # rules_python's parser wants double quotes: no single-quoted attribute anywhere.
    assert not re.search(r"=\s*'", page)

    doc = json.loads((repo / "simple" / "tiny-pkg" / "index.json").read_text())
    assert doc["meta"]["api-version"].startswith("1.")
    assert doc["name"] == "tiny-pkg" and doc["versions"] == ["1.0"]
    (f,) = doc["files"]
    assert f["filename"] == whl.name and f["hashes"] == {"sha256": sha}
    assert f["core-metadata"] == {"sha256": meta_sha} and "dist-info-metadata" not in f
    assert f["requires-python"] == ">=3.8" and f["size"] == whl.stat().st_size

    root = (repo / "simple" / "index.html").read_text()
    assert '<a href="tiny-pkg/">tiny-pkg</a>' in root and '<a href="tagged-pkg/">' in root
    assert {p["name"] for p in json.loads((repo / "simple" / "index.json").read_text())["projects"]} \
        == {"tiny-pkg", "tagged-pkg"}


def test_written_files_are_readable_like_normal_files(tmp_path, wheels):
    """A web server running as another user must be able to read the pages (mkstemp makes 0600)."""
    repo = populate(tmp_path / "repo", wheels["other"])
    old = os.umask(0o022)
    try:
        build_index(repo)
    finally:
        os.umask(old)
    written = [p for p in repo.rglob("*") if p.is_file() and not p.name.endswith(".whl")]
    assert len(written) >= 5
    assert {oct(p.stat().st_mode & 0o777) for p in written} == {oct(0o644)}


def test_build_tagged_wheel_lands_under_its_project(tmp_path, wheels):
    whl = wheels["tagged"]
    assert whl.name == "tagged_pkg-2.1.0-0-py3-none-any.whl"
    repo = populate(tmp_path / "repo", whl)
    build_index(repo)
    assert [p.name for p in (repo / "simple").iterdir() if p.is_dir()] == ["tagged-pkg"]
    assert whl.name in (repo / "simple" / "tagged-pkg" / "index.html").read_text()


def test_base_url_makes_absolute_links(tmp_path, wheels):
    repo = populate(tmp_path / "repo", wheels["other"])
    out = tmp_path / "site"
    build_index(repo, out, base_url="https://files.example.com/wheels/")
    page = (out / "other-pkg" / "index.html").read_text()
    assert f'href="https://files.example.com/wheels/{wheels["other"].name}#sha256=' in page


def test_sdist_gets_hash_and_requires_python_but_no_metadata_file(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    pkg_info = b"Metadata-Version: 2.1\nName: some.sdist\nVersion: 0.5\nRequires-Python: >=3.10\n"
    src = tmp_path / "some.sdist-0.5"
    src.mkdir()
    (src / "PKG-INFO").write_bytes(pkg_info)
    with tarfile.open(repo / "some.sdist-0.5.tar.gz", "w:gz") as tf:
        tf.add(src, arcname="some.sdist-0.5")
    build_index(repo)
    page = (repo / "simple" / "some-sdist" / "index.html").read_text()
    assert "some.sdist-0.5.tar.gz#sha256=" in page
    assert 'data-requires-python="&gt;=3.10"' in page
    assert "data-core-metadata" not in page
    assert not list(repo.glob("*.metadata"))


def test_an_sdist_whose_pkg_info_names_another_version_is_refused(tmp_path):
    """some.sdist-0.5.tar.gz whose PKG-INFO says 9.9: pip and uv build it and install 9.9, not what the
    page lists. Refused as a wheel's METADATA is, and nothing is written."""
    repo = tmp_path / "repo"
    repo.mkdir()
    src = tmp_path / "some.sdist-0.5"
    src.mkdir()
    (src / "PKG-INFO").write_bytes(b"Metadata-Version: 2.1\nName: some.sdist\nVersion: 9.9\n")
    with tarfile.open(repo / "some.sdist-0.5.tar.gz", "w:gz") as tf:
        tf.add(src, arcname="some.sdist-0.5")
    before = snapshot(repo)
    _assert_rejected(cli(str(repo)), "some.sdist-0.5.tar.gz", "metadata version 9.9 != file name version 0.5")
    assert snapshot(repo) == before and not (repo / "simple").exists()


# ---------------------------------------------------------------- pip reads it


def test_pip_installs_over_file_url_using_metadata_files(tmp_path, wheels):
    repo = populate(tmp_path / "repo", wheels["dotted"], wheels["tagged"])
    assert cli(str(repo)).returncode == 0
    py = fresh_venv(tmp_path / "venv")
    r = pip_install(py, "--index-url", (repo / "simple").as_uri() + "/", "tiny-pkg", "tagged-pkg")
    assert r.returncode == 0, r.stdout + r.stderr
    # pip announces where it takes dependency information from: the PEP 658 files.
    assert re.search(r"Obtaining dependency information for tiny-pkg from \S+\.whl\.metadata", r.stdout)
    assert re.search(r"Obtaining dependency information for tagged-pkg from \S+\.whl\.metadata", r.stdout)
    out = _proc.run([str(py), "-c", "import tinypkg, taggedpkg; print(tinypkg.VALUE, taggedpkg.VALUE)"],
                    capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "7"]


def test_pip_installs_over_http_and_fetches_metadata(tmp_path, wheels):
    repo = populate(tmp_path / "repo", wheels["tagged"], wheels["other"])
    build_index(repo)
    py = fresh_venv(tmp_path / "venv")
    with StaticServer(repo, tmp_path / "access.log") as srv:
        r = pip_install(py, "--index-url", srv.url + "simple/", "tagged-pkg")
        served = srv.requests()
    assert r.returncode == 0, r.stdout + r.stderr
    tagged = wheels["tagged"].name
    assert "/simple/tagged-pkg/" in served
    assert f"/{tagged}.metadata" in served  # the server saw pip read the PEP 658 file
    assert f"/{tagged}" in served
    out = _proc.run([str(py), "-c", "import taggedpkg; print(taggedpkg.VALUE)"],
                    capture_output=True, text=True, check=True).stdout
    assert out.strip() == "7"


def test_pip_reads_the_pep691_json_pages(tmp_path, wheels):
    """Served the way docs/publishing.md configures nginx (index.json for JSON-preferring clients)."""
    repo = populate(tmp_path / "repo", wheels["dotted"])
    build_index(repo)
    py = fresh_venv(tmp_path / "venv")
    with NegotiatingServer(repo) as srv:
        r = pip_install(py, "--index-url", srv.url + "simple/", "Tiny.Pkg")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("/simple/tiny-pkg/", "index.json") in srv.served
    assert (f"/{wheels['dotted'].name}.metadata", f"{wheels['dotted'].name}.metadata") in srv.served


def _uv() -> str:
    """uv (pinned in requirements-dev.txt, so beside python in .venv): $UV, beside python, or PATH."""
    for cand in (os.environ.get("UV"), str(Path(sys.executable).with_name("uv")), shutil.which("uv")):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise AssertionError("uv is not installed: ./scripts/bootstrap installs the pinned one")


def test_uv_installs_from_the_static_index(tmp_path, wheels):
    repo = populate(tmp_path / "repo", wheels["tagged"])
    build_index(repo)
    py = fresh_venv(tmp_path / "venv")
    with NegotiatingServer(repo) as srv:
        r = _proc.run([_uv(), "pip", "install", "--python", str(py), "--no-cache", "--no-config",
                       "--index-url", srv.url + "simple/", "tagged-pkg"],
                      capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert ("/simple/tagged-pkg/", "index.json") in srv.served
    out = _proc.run([str(py), "-c", "import taggedpkg; print(taggedpkg.VALUE)"],
                    capture_output=True, text=True, check=True).stdout
    assert out.strip() == "7"


# ---------------------------------------------------------------- incremental


def test_unchanged_rerun_reads_and_writes_nothing(tmp_path, wheels):
    repo = populate(tmp_path / "repo", *wheels.values())
    age_past_racy(repo)  # files written just before hashing are (rightly) hashed again next time
    first = build_index(repo)
    assert (first.hashed, first.cached) == (3, 0)
    before = {p: p.stat().st_mtime_ns for p in repo.rglob("*") if p.is_file()}
    again = build_index(repo)
    assert (again.hashed, again.cached, again.written, again.removed) == (0, 3, [], [])
    after = {p: p.stat().st_mtime_ns for p in repo.rglob("*") if p.is_file()}
    assert {p: t for p, t in after.items() if p.name != ".ci-index-cache.json"} == \
           {p: t for p, t in before.items() if p.name != ".ci-index-cache.json"}


def test_changed_file_is_rehashed_and_a_removed_one_leaves_the_index(tmp_path, wheels):
    repo = populate(tmp_path / "repo", wheels["dotted"], wheels["other"])
    build_index(repo)
    # Same name, new content (a rebuild): size or mtime changes, so the cache entry is stale.
    rebuilt = build_wheel(tmp_path / "rebuild", name="other_pkg", version="0.3", module="otherpkg",
                          value=3000)
    shutil.copy(rebuilt, repo / rebuilt.name)
    (repo / wheels["dotted"].name).unlink()
    r = build_index(repo)
    assert r.hashed == 1
    sha = hashlib.sha256(rebuilt.read_bytes()).hexdigest()
    assert f"#sha256={sha}" in (repo / "simple" / "other-pkg" / "index.html").read_text()
    assert not (repo / "simple" / "tiny-pkg").exists()
    assert not (repo / f"{wheels['dotted'].name}.metadata").exists()
    assert "tiny-pkg" not in (repo / "simple" / "index.html").read_text()


def test_identical_duplicates_in_subdirectories_are_indexed_once(tmp_path, wheels):
    repo = tmp_path / "repo"
    populate(repo / "a", wheels["other"])
    populate(repo / "b", wheels["other"])
    r = cli(str(repo))
    assert r.returncode == 0 and "duplicates" in r.stderr
    page = (repo / "simple" / "other-pkg" / "index.html").read_text()
    assert page.count("<a ") == 1 and 'href="../../a/' in page


def test_non_distributions_are_skipped_with_a_warning(tmp_path, wheels):
    repo = populate(tmp_path / "repo", wheels["other"])
    (repo / "NOTES.txt").write_text("not a wheel")
    (repo / "broken-name.whl").write_bytes(b"")
    r = cli(str(repo), "--json")
    assert r.returncode == 0, r.stderr
    assert sorted(json.loads(r.stdout)["skipped"]) == ["NOTES.txt", "broken-name.whl"]
    assert "warning: skipping NOTES.txt" in r.stderr and "warning: skipping broken-name.whl" in r.stderr


# ---------------------------------------------------------------- bad input: one line, exit 2, nothing written


def _assert_rejected(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m ci.index: error:"), r.stderr
    for w in words:
        assert w in lines[0]


def test_two_different_files_with_one_name_is_an_error(tmp_path, wheels):
    repo = tmp_path / "repo"
    populate(repo / "cu118", wheels["other"])
    rebuilt = build_wheel(tmp_path / "rebuild", name="other_pkg", version="0.3", module="otherpkg", value=99)
    populate(repo / "cu121", rebuilt)
    before = snapshot(repo)
    _assert_rejected(cli(str(repo)), "two different files", "cu118/", "cu121/")
    assert snapshot(repo) == before


def test_corrupt_wheel_is_an_error(tmp_path, wheels):
    repo = populate(tmp_path / "repo", wheels["other"])
    (repo / "fake-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    before = snapshot(repo)
    _assert_rejected(cli(str(repo)), "fake-1.0-py3-none-any.whl", "not a zip file")  # as ci.check says it
    assert snapshot(repo) == before


def test_metadata_that_contradicts_the_file_name_is_an_error(tmp_path, wheels):
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(wheels["other"], repo / "impostor-0.3-py3-none-any.whl")
    before = snapshot(repo)
    _assert_rejected(cli(str(repo)), "impostor", "expected one .dist-info")
    assert snapshot(repo) == before


@pytest.mark.parametrize("make_args", [
    lambda d: [str(d / "missing")],
    lambda d: [str(d), "--base-url", "files/wheels"],
    lambda d: [str(d), "--out", str(d / "afile")],
], ids=["no-such-dir", "relative-base-url", "out-is-a-file"])
def test_bad_arguments(tmp_path, wheels, make_args):
    repo = populate(tmp_path / "repo", wheels["other"])
    (repo / "afile").write_text("x")
    before = snapshot(repo)
    r = cli(*make_args(repo))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "error:" in r.stderr
    assert snapshot(repo) == before


def test_help():
    r = cli("--help")
    assert r.returncode == 0 and "--base-url" in r.stdout


def test_out_outside_dir_links_back_relatively(tmp_path, wheels):
    repo = populate(tmp_path / "repo", wheels["other"])
    out = tmp_path / "pages" / "simple"
    build_index(repo, out)
    page = (out / "other-pkg" / "index.html").read_text()
    assert f'href="../../../repo/{wheels["other"].name}#' in page
    assert os.path.exists(os.path.normpath(out / "other-pkg" / "../../../repo" / wheels["other"].name))


# ---------------------------------------------------------------- the review's findings


def test_out_shared_with_a_docs_site_loses_nothing(tmp_path, wheels):
    """--out DIR where DIR also holds a docs site: nothing ci.index did not write is removed."""
    www = populate(tmp_path / "www", wheels["dotted"], wheels["other"])
    (www / "docs").mkdir()
    (www / "docs" / "index.html").write_text("<p>our docs</p>")
    (www / "docs" / "index.json").write_text("{}")
    build_index(www, out=www)
    (www / wheels["other"].name).unlink()
    r = build_index(www, out=www)
    assert (www / "docs" / "index.html").read_text() == "<p>our docs</p>"
    assert (www / "docs" / "index.json").read_text() == "{}"
    assert not (www / "other-pkg").exists()  # what it did write and no longer needs is gone
    assert (www / "other-pkg").as_posix() + "/index.html" in r.removed


def test_out_with_foreign_content_at_its_paths_is_refused(tmp_path, wheels):
    www = populate(tmp_path / "www", wheels["dotted"])
    (www / "index.html").write_text("<h1>my landing page</h1>")
    before = snapshot(www)
    r = cli(str(www), "--out", str(www))
    _assert_rejected(r, "refusing to overwrite", "index.html")
    assert snapshot(www) == before
    # A foreign .metadata beside a wheel (another tool's) is not replaced either.
    repo = populate(tmp_path / "repo", wheels["other"])
    (repo / f"{wheels['other'].name}.metadata").write_bytes(b"Name: something-else\n")
    before = snapshot(repo)
    r = cli(str(repo))
    _assert_rejected(r, "refusing to overwrite", ".metadata")
    assert snapshot(repo) == before


def test_a_foreign_cache_file_is_refused(tmp_path, wheels):
    repo = populate(tmp_path / "repo", wheels["other"])
    (repo / "simple").mkdir()
    (repo / "simple" / ".ci-index-cache.json").write_text("not ours")
    _assert_rejected(cli(str(repo)), "not a python -m ci.index cache")
    assert (repo / "simple" / ".ci-index-cache.json").read_text() == "not ours"


def test_paths_in_the_cache_outside_out_and_dir_are_never_removed(tmp_path, wheels):
    """The cache travels with a copied dist/: what it lists is input. `../x`, absolute paths and pages
    under a project directory symlinked elsewhere were unlinked; now they are left alone."""
    repo = populate(tmp_path / "repo", wheels["other"])
    build_index(repo)
    victims = tmp_path / "victims"
    victims.mkdir()
    for name in ("page.html", "abs.html", "index.html", "x.metadata", "abs.metadata"):
        (victims / name).write_text("keep me")
    (repo / "simple" / "gone").symlink_to(victims, target_is_directory=True)
    cache_file = repo / "simple" / ".ci-index-cache.json"
    cache = json.loads(cache_file.read_text())
    cache["pages"] += ["../../victims/page.html", str(victims / "abs.html"), "gone/index.html"]
    cache["metadata"] += ["../victims/x.metadata", str(victims / "abs.metadata")]
    cache_file.write_text(json.dumps(cache))
    r = cli(str(repo), "--json")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in victims.iterdir()) == ["abs.html", "abs.metadata", "index.html", "page.html",
                                                         "x.metadata"]
    assert all(p.read_text() == "keep me" for p in victims.iterdir())
    assert json.loads(r.stdout)["removed"] == []


def test_a_symlinked_project_directory_in_out_is_not_written_through(tmp_path, wheels):
    repo = populate(tmp_path / "repo", wheels["other"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repo / "simple").mkdir()
    (repo / "simple" / "other-pkg").symlink_to(elsewhere, target_is_directory=True)
    before = snapshot(repo)
    _assert_rejected(cli(str(repo)), "refusing to write", "other-pkg/index.html")
    assert not any(elsewhere.iterdir())
    assert snapshot(repo) == before


def test_a_cached_record_for_another_path_is_not_trusted(tmp_path, wheels):
    """A cache entry whose record names another path would put the .metadata file there."""
    repo = populate(tmp_path / "repo", wheels["other"])
    age_past_racy(repo)
    build_index(repo)
    (repo / f"{wheels['other'].name}.metadata").unlink()
    cache_file = repo / "simple" / ".ci-index-cache.json"
    cache = json.loads(cache_file.read_text())
    (entry,) = cache["files"].values()
    outside = populate(tmp_path / "outside", wheels["other"])
    entry["dist"]["path"] = f"../outside/{wheels['other'].name}"
    cache_file.write_text(json.dumps(cache))
    r = build_index(repo)
    assert r.hashed == 1
    assert sorted(p.name for p in outside.iterdir()) == [wheels["other"].name]
    assert (repo / f"{wheels['other'].name}.metadata").exists()


def _same_size_other_bytes(src: Path, dst: Path) -> None:
    """dst: src with one byte of its first local header's mod time changed (still a valid zip),
    written in place (same inode) with src's mtime kept, like `cp -p` over an existing file."""
    data = bytearray(src.read_bytes())
    data[10] ^= 0x01
    st = dst.stat()
    with open(dst, "r+b") as f:
        f.write(data)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_same_size_replacement_with_mtime_kept_is_rehashed(tmp_path, wheels):
    repo = populate(tmp_path / "repo", wheels["other"])
    age_past_racy(repo)
    build_index(repo)
    whl = repo / wheels["other"].name
    size = whl.stat().st_size
    _same_size_other_bytes(wheels["other"], whl)
    assert whl.stat().st_size == size
    build_index(repo)
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    assert f"#sha256={sha}" in (repo / "simple" / "other-pkg" / "index.html").read_text()


def test_replaced_by_rename_with_mtime_kept_is_rehashed(tmp_path, wheels):
    """rsync -a / unpacking an artifact: a new inode with the old size and mtime."""
    repo = populate(tmp_path / "repo", wheels["other"])
    age_past_racy(repo)
    build_index(repo)
    whl = repo / wheels["other"].name
    tmp = tmp_path / "new.whl"
    shutil.copy2(whl, tmp)
    _same_size_other_bytes(wheels["other"], tmp)
    os.utime(tmp, ns=(whl.stat().st_atime_ns, whl.stat().st_mtime_ns))
    os.replace(tmp, whl)
    build_index(repo)
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    assert f"#sha256={sha}" in (repo / "simple" / "other-pkg" / "index.html").read_text()


def test_versions_compare_after_normalization(tmp_path, wheels):
    """A file name spelling 1.0.0_rc1 for METADATA's 1.0.0rc1 is one version, not a conflict."""
    whl = build_wheel(tmp_path / "b", name="rc_pkg", version="1.0.0rc1", module="rcpkg")
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(whl, repo / whl.name.replace("1.0.0rc1", "1.0.0_rc1"))
    r = build_index(repo)
    assert r.files == 1
    page = json.loads((repo / "simple" / "rc-pkg" / "index.json").read_text())
    assert page["versions"] == ["1.0.0rc1"]


@pytest.mark.parametrize("name", ["weird name!-1.0.tar.gz", "pkg-1.x.tar.gz", "-1.0.tar.gz",
                                  "pkg-1.0_.zip", "pkg-notaversion-py3-none-any.whl"])
def test_invalid_distribution_names_are_not_listed(tmp_path, name):
    assert classify(name) is None
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / name).write_bytes(b"x")
    r = cli(str(repo))
    assert r.returncode == 0, r.stderr
    assert "not a wheel or sdist" in r.stderr and name in r.stderr


def test_check_and_index_agree_on_a_wheel_whose_name_disagrees_with_its_dist_info(tmp_path, wheels):
    """File name says one distribution, .dist-info another (METADATA agreeing with the file name):
    both stages refuse it, with the same reason."""
    src = wheels["other"]
    bad = tmp_path / "repo" / src.name.replace("other_pkg", "renamed_pkg")
    bad.parent.mkdir()
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename.endswith(".dist-info/METADATA"):
                data = data.replace(b"Name: other_pkg", b"Name: renamed_pkg")
            zout.writestr(item, data)
    r_index = cli(str(bad.parent))
    r_check = _proc.run([sys.executable, "-m", "ci.check", str(bad)], cwd=ROOT, capture_output=True,
                        text=True)
    assert r_index.returncode == r_check.returncode == 2, (r_index.stderr, r_check.stderr)
    for r in (r_index, r_check):
        assert "expected one .dist-info named like renamed_pkg-0.3.dist-info" in r.stderr


# ---------------------------------------------------------------- one reader, capped; ownership before writing

BOMB = 100 << 20  # inflated size of the crafted METADATA / PKG-INFO: over the 16 MiB cap, a few hundred KB packed
HEADERS = b"Metadata-Version: 2.1\nName: bomb\nVersion: 1.0\n"


# Runs ci.index as `python -m` does, then records the process's own peak RSS (VmHWM: this image only;
# a child's ru_maxrss also counts the forking test process, which built the bomb).
PEAK_RSS = """import atexit, runpy, sys
peak = sys.argv.pop(1)
atexit.register(lambda: open(peak, "w").write(
    next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]))
runpy.run_module("ci.index", run_name="__main__", alter_sys=True)
"""


def _run_measured(peak: Path, *args: str) -> tuple[subprocess.CompletedProcess, int]:
    """The CLI's result and its peak resident memory in bytes."""
    r = _proc.run([sys.executable, "-c", PEAK_RSS, str(peak), *args], cwd=ROOT, capture_output=True,
                  text=True)
    return r, int(peak.read_text()) * 1024


def _assert_bomb_refused(repo: Path, name: str) -> None:
    before = snapshot(repo)
    r, peak = _run_measured(repo.parent / "peak", str(repo))
    _assert_rejected(r, name, "MiB")
    assert peak < BOMB // 2, f"peak RSS {peak >> 20} MiB: the bomb was inflated"
    assert snapshot(repo) == before  # no .metadata sidecar, no page, no cache
    assert not (repo / "simple").exists()


def test_a_wheel_whose_metadata_is_a_deflate_bomb_is_refused_unread(tmp_path, wheels):
    repo = populate(tmp_path / "repo", wheels["other"])
    with zipfile.ZipFile(repo / "bomb-1.0-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bomb/__init__.py", "")
        zf.writestr("bomb-1.0.dist-info/METADATA", HEADERS + b"\n" + b" " * BOMB)
    assert (repo / "bomb-1.0-py3-none-any.whl").stat().st_size < 1 << 20
    _assert_bomb_refused(repo, "bomb-1.0.dist-info/METADATA")


@pytest.mark.parametrize("kind", ["tar.gz", "zip"])
def test_an_sdist_whose_pkg_info_is_a_bomb_is_refused_unread(tmp_path, kind):
    repo = tmp_path / "repo"
    repo.mkdir()
    data = HEADERS + b"\n" + b" " * BOMB
    if kind == "zip":
        with zipfile.ZipFile(repo / "bomb-1.0.zip", "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("bomb-1.0/PKG-INFO", data)
    else:
        import io
        with tarfile.open(repo / "bomb-1.0.tar.gz", "w:gz") as tf:
            info = tarfile.TarInfo("bomb-1.0/PKG-INFO")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    _assert_bomb_refused(repo, "PKG-INFO")


def test_a_wheel_zipfile_reads_differently_is_refused_as_ci_check_refuses_it(tmp_path, wheels):
    """A stub before the zip: zipfile (the old reader here) shifts every offset and reads a wheel;
    the project's reader, which every other stage uses, refuses it. ci.index must not publish it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    bad = repo / wheels["other"].name
    bad.write_bytes(b"#!/bin/sh\nexit 0\n" + wheels["other"].read_bytes())
    with zipfile.ZipFile(bad) as zf:
        assert zf.testzip() is None  # zipfile is content with it
    before = snapshot(repo)
    r_check = _proc.run([sys.executable, "-m", "ci.check", str(bad)], cwd=ROOT, capture_output=True,
                        text=True)
    assert r_check.returncode == 2, r_check.stderr
    reason = r_check.stderr.strip().split("error: ", 1)[1]
    _assert_rejected(cli(str(repo)), reason)
    assert snapshot(repo) == before


def test_an_out_that_cannot_be_created_leaves_dir_as_it_was(tmp_path, wheels):
    """--out below a regular file, or through a symlink to nowhere (an unmounted volume): the failed
    run may leave no .metadata sidecar in DIR, and nothing where --out points."""
    repo = populate(tmp_path / "repo", wheels["other"], wheels["dotted"])
    (tmp_path / "afile").write_text("x")
    (tmp_path / "volume").symlink_to(tmp_path / "unmounted")
    before = snapshot(repo)
    for out in (tmp_path / "afile" / "simple", tmp_path / "volume" / "simple"):
        r = cli(str(repo), "--out", str(out))
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert snapshot(repo) == before
    assert (tmp_path / "afile").read_text() == "x"
    assert not (tmp_path / "unmounted").exists()


@pytest.mark.parametrize("where", ["after-first-page", "after-all-pages"])
def test_a_run_interrupted_while_writing_owns_what_it_wrote(tmp_path, wheels, monkeypatch, where):
    """Ctrl-C, SIGTERM or a crash part-way through: the next run (with another wheel added, so its
    pages differ) takes up the pages and sidecars as its own instead of refusing them as foreign."""
    from wheelci.publish import ownedfiles  # build_index writes through it: the patches target it
    from wheelci.publish.distread import PAGE_NAMES
    repo = populate(tmp_path / "repo", wheels["other"])
    (repo / "simple").mkdir()
    (repo / "simple" / "notes.html").write_text("theirs")  # foreign content sharing OUT: never touched
    real = ownedfiles._write_if_changed
    pages: list[Path] = []

    def interrupted(path: Path, data: bytes) -> bool:
        changed = real(path, data)
        if path.name in PAGE_NAMES:
            pages.append(path)
            if where == "after-first-page":
                raise KeyboardInterrupt
        return changed

    def crashed(*args: object) -> list[str]:
        raise KeyboardInterrupt  # every page written, the cache not yet updated after them

    monkeypatch.setattr(ownedfiles, "_remove_stale", crashed)
    monkeypatch.setattr(ownedfiles, "_write_if_changed", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_index(repo)
    monkeypatch.undo()
    assert len(pages) == (1 if where == "after-first-page" else 4) and all(p.exists() for p in pages)
    populate(repo, wheels["dotted"])
    r = cli(str(repo), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["removed"] == []
    assert (repo / "simple" / "notes.html").read_text() == "theirs"
    root = (repo / "simple" / "index.html").read_text()
    assert 'href="other-pkg/"' in root and 'href="tiny-pkg/"' in root
    for whl in (wheels["other"], wheels["dotted"]):
        assert (repo / f"{whl.name}.metadata").read_bytes() == wheel_metadata_bytes(whl)
    again = build_index(repo)  # and the index is complete: nothing left to write
    assert (again.written, again.removed) == ([], [])


def test_a_file_where_a_project_directory_goes_is_refused_before_any_write(tmp_path):
    """OUT holding a file named like a project's directory: refused before the first page is written
    (it once wrote index.html and index.json, then failed)."""
    from tests._servers import build_wheel

    root = tmp_path / "dir"
    build_wheel(root, name="proj1", module="proj1")
    out = root / "out"
    out.mkdir()
    (out / "proj1").write_text("keep\n")
    r = cli(str(root), "--out", str(out))
    assert r.returncode == 2 and "is a file where a directory is needed" in r.stderr, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["proj1"] and (out / "proj1").read_text() == "keep\n"
