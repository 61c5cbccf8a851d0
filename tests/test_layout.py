"""A build's files are declared in one place (wheelci.util.layout): what --fresh removes, the planted-link
strip, the manifest's report names, the logs redacted at a build's end and the cache kinds a prune takes
all come from its tables. The real builds of the heavy tier walk their work and output directories
against it (`assert_declared`, in tests/test_build_project.py, test_build_host.py and the compile-cache
builds); here, the code's own literal entry names are checked against it, and the strip runs over every
declared name."""

from __future__ import annotations

import re
from pathlib import Path

from wheelci.util import layout

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ci" / "src" / "wheelci"
# `<a work directory> / "name"` as the build's modules write it (the benches keep directories of their own)
WRITTEN = re.compile(r"\b(?:work_dir|b\.work|work) / \"([^\"]+)\"")
CACHE_KIND = re.compile(r"\bcache_dir\(\"([^\"]+)\"")


def assert_declared(work: Path, out: Path | None = None) -> None:
    """Every entry at the top of a real build's work directory (and -w) is one the layout names."""
    assert not layout.unregistered(layout.WORK, [p.name for p in work.iterdir()]), sorted(p.name for p in work.iterdir())
    if out is not None:
        assert not layout.unregistered(layout.OUTPUT, [p.name for p in out.iterdir()]), sorted(p.name for p in out.iterdir())


def test_every_entry_the_code_writes_in_a_work_directory_is_declared():
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "bench" in path.parts or "resources" in path.parts:
            continue
        for name in WRITTEN.findall(path.read_text()):
            found.setdefault(name, path.relative_to(PACKAGE))
    assert {"src", "sccache", "sccache-bin", "ccache-bin", "sdist"} <= set(found), found  # the pattern sees them
    missing = {n: str(p) for n, p in found.items() if layout.unregistered(layout.WORK, [n])}
    assert not missing, f"written under a work directory but not in wheelci.util.layout.WORK: {missing}"


def test_every_cache_kind_the_code_names_is_declared():
    kinds = {k for path in PACKAGE.rglob("*.py") for k in CACHE_KIND.findall(path.read_text())}
    kinds |= {"envs"}  # hostenv and crossenv join it as cache_dir() / "envs"
    assert "torch-releases" in kinds
    assert not layout.unregistered(layout.CACHE, sorted(kinds)), kinds


def test_the_tables_are_what_fresh_the_manifest_and_prune_read():
    from wheelci.compile.workdir import WORK_ENTRIES
    from wheelci.util import cache, owned

    assert set(WORK_ENTRIES) == {e.name for e in layout.WORK if e.fresh}
    assert {"sccache", "sccache-bin", "sccache-server.log", "ccache-bin"} <= set(WORK_ENTRIES)
    assert layout.WORK_MARK not in WORK_ENTRIES  # what makes a directory ours is never removed by --fresh
    assert owned.RECORDED_FILES == layout.REPORTS and owned.MANIFEST == layout.MANIFEST
    assert cache.KINDS == layout.prunable() == ("builds", "envs", "test-layers")
    assert set(layout.logs(layout.WORK)) >= {"compile.log", "verify.log", "sccache-server.log", "compile-cache"}


def test_a_link_planted_at_any_declared_entry_is_removed_and_its_target_untouched(tmp_path):
    """The attack of the fifth review: a link planted in a kept --work-dir at sccache-server.log (or any
    entry) made the next build truncate the file it named; every declared name is stripped, the targets
    stay as they were."""
    from wheelci.compile.workdir import WORK_ENTRIES
    from wheelci.util.owned import drop_links

    work, victim = tmp_path / "work", tmp_path / "victim"
    work.mkdir()
    victim.mkdir()
    for name in WORK_ENTRIES:
        (victim / name).write_text("the user's file")
        (work / name).symlink_to(victim / name)
    dropped = drop_links(work, WORK_ENTRIES)
    assert sorted(dropped) == sorted(WORK_ENTRIES) and not any(work.iterdir())
    assert all((victim / n).read_text() == "the user's file" for n in WORK_ENTRIES)


def test_the_logs_a_build_leaves_are_redacted_in_place_and_links_never_followed(tmp_path):
    from wheelci.util import log, secret

    secret.add("pa55-of-the-store-991")
    work, outside = tmp_path / "work", tmp_path / "outside.log"
    (work / "compile-cache").mkdir(parents=True)
    (work / "compile.log").write_text("connect redis://u:pa55-of-the-store-991@h:6379 failed\n")
    (work / "compile-cache" / "sccache-server.log").write_text("GET https://h/c?X-Amz-Signature=zQabcdef1234 403\n")
    outside.write_text("pa55-of-the-store-991 stays in a file the build did not write")
    (work / "verify.log").symlink_to(outside)
    log.redact_files(work, layout.logs(layout.WORK))
    assert "pa55" not in (work / "compile.log").read_text()
    assert "zQabcdef1234" not in (work / "compile-cache" / "sccache-server.log").read_text()
    assert outside.read_text().startswith("pa55-of-the-store-991")


def test_a_fifo_planted_at_an_entry_is_removed_and_never_blocks(tmp_path):
    """A FIFO at cpu-path, dist or compile.log once hung a build for good (shutil.rmtree and open wait on it)."""
    import os

    from wheelci.compile.workdir import WORK_ENTRIES
    from wheelci.util.owned import drop_links

    work = tmp_path / "work"
    work.mkdir()
    for name in ("cpu-path", "dist", "compile.log"):
        os.mkfifo(work / name)
    (work / "src").mkdir()
    assert sorted(drop_links(work, WORK_ENTRIES)) == ["compile.log", "cpu-path", "dist"]
    assert [p.name for p in work.iterdir()] == ["src"]


def test_a_log_or_a_launcher_is_a_new_file_never_written_through(tmp_path):
    """A hard link planted at compile.log, and a link planted inside a kept sccache-bin/ at c++, once had the
    build overwrite (and make executable) the file they named."""
    import os

    from wheelci.compile.launch import _script
    from wheelci.util.atomic import fresh_file

    victim = tmp_path / "precious.txt"
    victim.write_text("the user's")
    victim.chmod(0o600)
    work = tmp_path / "work"
    (work / "sccache-bin").mkdir(parents=True)
    os.link(victim, work / "compile.log")
    (work / "sccache-bin" / "c++").symlink_to(victim)
    with fresh_file(work / "compile.log") as out:
        out.write(b"compiling\n")
    _script(work / "sccache-bin" / "c++", "#!/bin/sh\nexec sccache c++ \"$@\"\n")
    assert victim.read_text() == "the user's" and victim.stat().st_mode & 0o777 == 0o600
    assert (work / "compile.log").read_text() == "compiling\n" and not (work / "sccache-bin" / "c++").is_symlink()
    assert os.access(work / "sccache-bin" / "c++", os.X_OK)
