"""Symlinks in an sdist that each look in bounds but escape through one another.

Each link of a chain resolves inside the sdist when read lexically on its own; followed through the
links before it, it lands outside the extraction root, and staging then copies a host file into the
build. tarfile's `data` filter checks a link against what is on disk when the link is extracted, so
putting the outer link first in the archive walked past it. Every case here runs the real entry point
(`ci.build SDIST --dry-run`, which extracts before it plans) and ci.config.project.extract_sdist itself.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from wheelci.errors import CiError
from wheelci.config.project import extract_sdist
from tests._wheels import run_stage

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tiny_ext"
TOP = "tiny_ext-0.1.0"
SECRET = "host secret, never to be staged"


def sdist(dest: Path, extra: list[tuple[str, str, str]]) -> Path:
    """The tiny_ext fixture as an sdist, then `extra` in order: (kind, name under TOP, link target),
    kind "sym", "hard" (target from the archive root, as tar writes it) or "file"."""
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{TOP}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for f in sorted(p for p in FIXTURE.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            tar.add(f, arcname=f"{TOP}/{f.relative_to(FIXTURE)}")
        for kind, name, target in extra:
            info = tarfile.TarInfo(f"{TOP}/{name}")
            if kind == "file":
                info.size = len(target)
                tar.addfile(info, io.BytesIO(target.encode()))
                continue
            info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
            info.linkname = target
            tar.addfile(info)
    return path


# Escapes: the outer links come first, so nothing they go through exists yet when they are extracted.
# The destination sits three levels below tmp_path (tmp_path/t/<temp dir>/sdist): `../../..` from it
# is tmp_path, where secret.txt waits.
ESCAPES = {
    # x/y/a -> the extraction root (lexically: the root too); b climbs three more through a.
    "dotdot-hidden-in-a-deep-link": [("sym", "b", "x/y/a/../../../secret.txt"), ("sym", "x/y/a", "../../..")],
    # a -> . ; each next link climbs one level through the one before, each one lexically at TOP.
    "dot-then-dotdot-chain": [("sym", "e", "d/../secret.txt"), ("sym", "d", "c/.."), ("sym", "c", "b/.."),
                              ("sym", "b", "a/.."), ("sym", "a", ".")],
    # x/a -> .. (TOP); y -> x/a/.. (lexically x, really the root); z -> y/.. (lexically TOP, really
    # above the root); w climbs on through z.
    "dotdot-via-a-subdirectory-link": [("sym", "w", "z/../../secret.txt"), ("sym", "z", "y/.."),
                                       ("sym", "y", "x/a/.."), ("sym", "x/a", "..")],
    # A regular file written through a link that leads out (lexically: into c, inside TOP).
    "file-written-through-a-link": [("sym", "x/y/a", "../../.."), ("sym", "c", "x/y/a/../../.."),
                                    ("file", "c/evil.txt", "written outside")],
    # A hard link's target walks through a symlink (os.link follows it).
    "hardlink-through-a-link": [("hard", "h", f"{TOP}/x/y/a/../../../secret.txt"), ("sym", "x/y/a", "../../..")],
    # A link to the extraction root, above the top directory.
    "link-to-the-extraction-root": [("sym", "a", "..")],
    # Links that only lead to each other.
    "loop": [("sym", "a", "b/x"), ("sym", "b", "a/y")],
    # Even a benign-looking member under a link is refused: what it is written through decides.
    "file-under-an-in-tree-link": [("sym", "alias", "tiny_ext"), ("file", "alias/extra.py", "X = 1\n")],
    # A name that is a link and something else: which one lands depends on the order, so neither is trusted.
    "a-name-both-link-and-file": [("sym", "alias", "tiny_ext"), ("file", "alias", "X = 1\n")],
}


def outside_links(dest: Path) -> list[str]:
    """Links under dest (if any) that resolve outside it."""
    if not dest.exists():
        return []
    root = dest.resolve()
    out = []
    for here, dirs, files in os.walk(dest):
        for n in dirs + files:
            p = Path(here) / n
            if p.is_symlink() and not Path(os.path.realpath(p)).is_relative_to(root):
                out.append(str(p))
    return out


def error_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("python -m ci.build: error:")]
    assert len(lines) == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and r.stderr.strip().splitlines()[-1] == lines[0], r.stderr[-3000:]
    return lines[0]


@pytest.fixture
def secret(tmp_path) -> Path:
    (tmp_path / "secret.txt").write_text(SECRET)
    return tmp_path / "secret.txt"


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_a_link_chain_out_of_the_sdist_is_refused_before_extraction(tmp_path, secret, case):
    project = sdist(tmp_path / "dist", ESCAPES[case])
    (tmp_path / "t").mkdir()
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run", "--json",
                  env={"TMPDIR": str(tmp_path / "t")})
    assert r.returncode == 2, (r.stdout + r.stderr)[-3000:]
    line = error_line(r)
    assert "refused before extraction" in line and f"{TOP}.tar.gz" in line, line
    assert SECRET not in r.stdout + r.stderr
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "t" / "evil.txt").exists()
    assert not list((tmp_path / "t").iterdir())  # the temporary directory is gone, nothing left behind

    dest = tmp_path / "w" / "x" / "sdist"  # the same depth: `../../..` from dest is tmp_path
    with pytest.raises(CiError, match="refused before extraction"):
        extract_sdist(project, dest)
    assert not dest.exists() and not outside_links(tmp_path / "w")
    assert not (tmp_path / "evil.txt").exists() and secret.read_text() == SECRET


def test_an_in_tree_relative_link_still_works(tmp_path):
    """`pkg/data -> ../shared/data`, through a directory, to a link to a link: all inside the top directory."""
    project = sdist(tmp_path / "dist", [("file", "shared/data/table.txt", "1 2 3\n"),
                                        ("sym", "pkg/data", "../shared/data"),
                                        ("sym", "pkg/latest", "data/table.txt"),
                                        ("sym", "table", "pkg/latest"),
                                        ("sym", "here", "."),
                                        ("hard", "copy.txt", f"{TOP}/shared/data/table.txt")])
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run")
    assert r.returncode == 0, r.stderr[-3000:]
    root = extract_sdist(project, tmp_path / "w" / "sdist")
    assert root == tmp_path / "w" / "sdist" / TOP
    assert (root / "pkg" / "data" / "table.txt").read_text() == "1 2 3\n"
    assert (root / "table").read_text() == "1 2 3\n" and (root / "copy.txt").read_text() == "1 2 3\n"
    assert os.readlink(root / "pkg" / "data") == "../shared/data"
    assert not outside_links(tmp_path / "w")
