"""`wheelci cache`: what the cache holds, and pruning it least recently used first to a size, never taking
what a running build holds. The entries are small real ones, made by the tool's own functions (a build
environment through hostenv.cached_env, kept build trees through workdir.kept_tree, identical files linked
by util.share), each in a cache of its own; the holders are real processes holding them as a build does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wheelci.compile import hostenv, workdir
from wheelci.errors import CiError
from wheelci.util import cache
from tests._wheels import run_stage

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("WHEELCI_CACHE_DIR", str(where))
    monkeypatch.delenv("WHEELCI_CACHE_MAX_SIZE", raising=False)
    return where


def make_env(root: Path, name: str, payload: bytes = b"", used: int | None = None) -> Path:
    """A build environment as cached_env makes it (a stamped venv layout with a torch package), holding
    `payload` as a library, stamped used at `used` (seconds since the epoch)."""
    def create(where: Path) -> dict:
        site = where / "lib" / "site-packages"
        (site / "torch").mkdir(parents=True)
        (site / "torch" / "__init__.py").write_text("")
        (where / "bin").mkdir()
        (where / "bin" / "python").symlink_to(sys.executable)
        (site / "libpayload.so").write_bytes(payload)
        return {"site": str(site), "version": "2.13.0", "cuda": None, "requires": []}

    env_root = root / "envs" / name
    hostenv.cached_env(env_root, create)
    return stamp(env_root, used)


def stamp(entry: Path, used: int | None) -> Path:
    cache.mark_used(entry)
    if used is not None:
        os.utime(entry / cache.USED, (used, used))
    return entry


def make_tree(root: Path, tmp_path: Path, name: str, used: int | None = None) -> Path:
    """A kept build tree of a project of its own (workdir.kept_tree), with 1 MiB of objects in it."""
    from wheelci.plan import Request, make_plan

    project = tmp_path / name
    shutil_copy(ROOT / "tests" / "fixtures" / "tiny_ext", project)
    plan = make_plan(Request(cuda=None, engine="host"), project_dir=project, env={"PATH": os.environ["PATH"]})
    tree = workdir.kept_tree(root / "builds", project, plan)
    (tree / "build").mkdir()
    (tree / "build" / "a.o").write_bytes(os.urandom(MIB))
    return stamp(tree, used)


def shutil_copy(src: Path, dest: Path) -> None:
    import shutil

    shutil.copytree(src, dest)


HOLDER = """
import sys
from pathlib import Path
from wheelci.compile import hostenv
from wheelci.util.lock import locked_dir, locked_file

env, tree, layer_lock = (Path(a) if a else None for a in sys.argv[1:4])
with locked_dir(tree, "the build tree") if tree else open("/dev/null") as _:
    with locked_file(layer_lock, "the layer", shared=True) if layer_lock else open("/dev/null") as _:
        if env:
            hostenv.held_env(env, lambda where: 1 / 0)  # as a build holds its environment: it is there
        print("held", flush=True)
        sys.stdin.read()
"""


class Holder:
    """A running process holding entries as a build does: its environment (shared, for the process's life),
    its build tree (exclusively), a test layer's lock (shared); released when its stdin closes."""

    def __init__(self, env: Path | None = None, tree: Path | None = None, layer: Path | None = None) -> None:
        lock = str(layer.with_name(layer.name + ".lock")) if layer else ""
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(env or ""), str(tree or ""), lock], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT / "ci" / "src")))
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "held\n"

    def __enter__(self) -> "Holder":
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def cache_cli(*args: str, root: Path) -> subprocess.CompletedProcess:
    return run_stage("ci.cache", *args, env={"WHEELCI_CACHE_DIR": str(root), "WHEELCI_CACHE_MAX_SIZE": ""})


def test_show_lists_each_entry_with_its_size_last_use_and_whether_a_build_holds_it(root, tmp_path):
    env = make_env(root, "torch-2.13.0-cpu-py311", os.urandom(2 * MIB), used=1_700_000_000)
    tree = make_tree(root, tmp_path, "proj")
    (root / "ccache").mkdir()
    (root / "ccache" / "x").write_bytes(b"x" * 5000)
    with Holder(tree=tree):
        r = cache_cli("--json", root=root)
        text = cache_cli("show", root=root)
    assert r.returncode == 0 and text.returncode == 0, r.stderr + text.stderr
    doc = json.loads(r.stdout)
    got = {(e["kind"], e["name"]): e for e in doc["entries"]}
    assert set(got) == {("envs", env.name), ("builds", tree.name)}
    assert got["envs", env.name]["in_use"] is False and got["builds", tree.name]["in_use"] is True
    assert got["envs", env.name]["size"] >= 2 * MIB and got["envs", env.name]["last_used_ns"] == 1_700_000_000 * 10**9
    assert doc["max_size"] == 20 * 2**30 and doc["others"]["ccache"] >= 5000
    assert f"builds  {tree.name}" in text.stdout and "in use" in text.stdout and "2.0 MiB" in text.stdout, text.stdout
    assert "cap 20.0 GiB" in text.stdout and "not pruned: ccache" in text.stdout


def test_prune_removes_the_least_recently_used_and_never_what_a_running_build_holds(root, tmp_path):
    held_env = make_env(root, "torch-2.10.0-cu128-py311", os.urandom(MIB), used=1_000)
    held_tree = make_tree(root, tmp_path, "held", used=1_100)
    oldest = make_env(root, "torch-2.11.0-cu130-py311", os.urandom(MIB), used=2_000)
    older = make_tree(root, tmp_path, "older", used=3_000)
    newest = make_env(root, "torch-2.13.0-cpu-py311", os.urandom(MIB), used=4_000)
    sizes = {e.path: e.size for e in cache.scan(root)}
    cap = sizes[held_env] + sizes[held_tree] + sizes[newest] + MIB // 2  # the two oldest free ones must go
    with Holder(env=held_env, tree=held_tree):
        os.utime(held_env / cache.USED, (1_000, 1_000))  # a build that began long ago and runs on
        r = cache_cli("prune", "--max-size", str(cap), root=root)
        assert r.returncode == 0, r.stderr
        assert held_env.is_dir() and held_tree.is_dir() and newest.is_dir()
        assert not oldest.exists() and not older.exists()
        assert f"removed envs/{oldest.name}" in r.stdout and f"removed builds/{older.name}" in r.stdout
        assert f"kept envs/{held_env.name}" in r.stdout and "in use by a running build" in r.stdout
        # what a build holds stays whatever the cap: the rest goes, least recently used first
        r = cache_cli("prune", "--max-size", "0", "--json", root=root)
        doc = json.loads(r.stdout)
        assert [e["name"] for e in doc["removed"]] == [newest.name]
        assert sorted(e["name"] for e in doc["in_use"]) == sorted([held_env.name, held_tree.name])
    assert hostenv._load_env(held_env)[0] is not None  # whole: still a usable environment
    assert (root / "envs" / f"{oldest.name}.lock").exists()  # lock files are never removed (wheelci.util.lock)
    assert not any((root / cache.ASIDE).iterdir())
    r = cache_cli("prune", "--max-size", "0", root=root)  # released: now they go
    assert r.returncode == 0 and not held_env.exists() and not held_tree.exists(), r.stdout + r.stderr


def test_a_layer_verify_holds_shared_is_kept(root):
    layer = root / "test-layers" / "abc"
    (layer / "lib").mkdir(parents=True)
    (layer / "lib" / "x.py").write_bytes(os.urandom(MIB))
    (layer / ".complete.json").write_text("{}")  # verifyenv's stamp: a layer the tool made
    (root / "test-layers" / "abc.lock").touch()
    with Holder(layer=layer):
        pruned = cache.prune(root, 0)
    assert layer.is_dir() and [e.name for e in pruned.in_use] == ["abc"] and not pruned.removed
    assert cache.prune(root, 0).removed and not layer.exists()


def test_files_entries_share_count_once_and_free_only_with_the_last(root):
    from wheelci.util.share import link_identical

    payload = os.urandom(4 * MIB)
    a = make_env(root, "torch-2.14.1-cu130-py311", payload, used=1_000)
    b = make_env(root, "torch-2.15.0-cu132-py311", payload, used=2_000)
    assert link_identical(b, [a]) == 4 * MIB
    entries = cache.scan(root)
    total = cache.total_size(entries)
    assert total < sum(e.size for e in entries) - 3 * MIB  # the 4 MiB library is stored once
    own = next(e.size for e in entries if e.name == a.name) - 4 * MIB  # what the older one alone holds
    pruned = cache.prune(root, total - own)
    assert [e.name for e in pruned.removed] == [a.name] and pruned.after == total - own
    assert cache.total_size(cache.scan(root)) == total - own  # what the prune counted is what is left
    assert b.is_dir() and (b / "lib" / "site-packages" / "libpayload.so").read_bytes() == payload


def test_an_interrupted_prune_leaves_the_entry_whole_or_gone(root, monkeypatch):
    env = make_env(root, "torch-2.13.0-cpu-py311", os.urandom(MIB))

    def cut_off(path, ignore_errors=False):  # the prune killed half way through removing what it set aside
        next(Path(path).rglob("torch")).joinpath("__init__.py").unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(cache.shutil, "rmtree", cut_off)
    with pytest.raises(KeyboardInterrupt):
        cache.prune(root, 0)
    monkeypatch.undo()
    assert not env.exists() and any((root / cache.ASIDE).iterdir())  # never half there at its name
    assert make_env(root, env.name) == env and hostenv._load_env(env)[0] is not None  # the next build remakes it
    os.utime(env / cache.USED, (5, 5))
    assert cache.prune(root, 10 * MIB).removed == [] and not any((root / cache.ASIDE).iterdir())  # leftovers cleared


def test_a_build_prunes_only_when_over_the_cap_and_a_bad_cap_is_one_line(root, tmp_path, monkeypatch):
    from wheelci.build import keep_cache_under

    old = make_env(root, "torch-2.11.0-cu130-py311", os.urandom(2 * MIB), used=1_000)
    new = make_env(root, "torch-2.13.0-cpu-py311", os.urandom(2 * MIB), used=2_000)
    keep_cache_under(8 * MIB)
    assert old.is_dir() and new.is_dir()
    size = cache.recorded_size(new)
    cache.mark_used(new, measure=False)  # as a build uses an environment: the stamp's size, no walk
    assert cache.recorded_size(new) == size and size >= 2 * MIB
    keep_cache_under(3 * MIB)
    assert not old.exists() and new.is_dir()
    keep_cache_under(None)  # WHEELCI_CACHE_MAX_SIZE=none
    assert new.is_dir()
    out = tmp_path / "out"
    r = run_stage("ci.build", ROOT / "tests" / "fixtures" / "tiny_ext", "--cpu", "--engine", "host", "-w", out,
                  env={"WHEELCI_CACHE_DIR": str(root), "WHEELCI_CACHE_MAX_SIZE": "lots"})
    assert r.returncode == 2 and "WHEELCI_CACHE_MAX_SIZE: not a size: 'lots'" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2 and "Traceback" not in r.stderr and not out.exists()
    assert not (root / "builds").exists()  # refused before the build made anything


def test_an_entry_from_before_stamps_is_measured_once_and_keeps_its_age(root):
    from wheelci.build import keep_cache_under

    legacy = root / "builds" / "0123456789abcdef0123"
    (legacy / "build").mkdir(parents=True)
    (legacy / "build" / "a.o").write_bytes(os.urandom(MIB))
    (legacy / ".wheelci-tree.json").write_text("{}")  # a kept tree's record: the tool made it
    os.utime(legacy, (1_000, 1_000))
    keep_cache_under(100 * MIB)  # under the cap: nothing removed, its size recorded for the next build
    assert json.loads((legacy / cache.USED).read_text())["size"] >= MIB
    (entry,) = cache.scan(root)
    assert entry.last_used_ns == 1_000 * 10**9  # last used when it was last written, as before the stamp


def test_the_cap_is_no_input_of_the_compile():
    """Another cap must not make the next build compile and verify again."""
    from wheelci.build import inherited_environ

    assert inherited_environ({"WHEELCI_CACHE_MAX_SIZE": "1GB", "CC": "gcc"}) == {"CC": "gcc"}


def test_links_planted_in_the_cache_are_never_followed_by_a_prune(root, tmp_path):
    make_env(root, "torch-kept", b"x" * MIB, used=1_000_000)
    victim, victim2 = tmp_path / "victim", tmp_path / "victim2"
    for v in (victim, victim2):
        (v / "d1").mkdir(parents=True)
        (v / "d1" / "keep.txt").write_text("a user's file\n")
    (root / ".pruning").symlink_to(victim)  # where an interrupted prune's leftovers would be
    (root / "builds").symlink_to(victim2)  # a kind's directory replaced by a link
    r = cache_cli("prune", "--max-size", "0", root=root)
    assert r.returncode == 0, r.stderr
    assert (victim / "d1" / "keep.txt").read_text() == "a user's file\n"
    assert (victim2 / "d1" / "keep.txt").read_text() == "a user's file\n"
    assert not (root / "envs" / "torch-kept").exists()  # what is the cache's own still goes
    assert "victim2" not in cache_cli("show", "--json", root=root).stdout


def test_a_fifo_in_place_of_a_stamp_never_blocks_a_builds_end(root):
    env = make_env(root, "torch-fifo", b"x" * 1024)
    (env / cache.USED).unlink()
    os.mkfifo(env / cache.USED)
    assert cache.recorded_size(env) >= 0  # measured instead of read


def test_a_prune_removes_only_entries_that_carry_the_tools_marker(root, tmp_path):
    """A directory someone put under builds/, envs/ or test-layers/ is not the cache's: never listed,
    stamped or removed, nor one whose marker is a link or a directory."""
    make_env(root, "torch-ours", b"x" * MIB, used=1_000)
    foreign = []
    for kind in cache.KINDS:
        for name, marker in (("users-dir", None), ("linked-marker", "link"), ("dir-marker", "dir")):
            d = root / kind / f"{name}"
            (d / "data").mkdir(parents=True)
            (d / "data" / "keep.txt").write_text("a user's file\n")
            if marker == "link":
                (d / cache.USED).symlink_to(d / "data" / "keep.txt")
            elif marker == "dir":
                (d / cache.USED).mkdir()
            foreign.append(d)
    shown = cache_cli("show", "--json", root=root).stdout
    r = cache_cli("prune", "--max-size", "0", root=root)
    assert r.returncode == 0, r.stderr
    assert not (root / "envs" / "torch-ours").exists()  # the cache's own entry goes
    assert all((d / "data" / "keep.txt").read_text() == "a user's file\n" for d in foreign)
    assert "users-dir" not in shown and "marker" not in shown, shown
    assert not any((d / cache.USED).is_file() and not (d / cache.USED).is_symlink() for d in foreign)


def test_fifos_in_place_of_cache_files_never_block(root, tmp_path):
    """A FIFO (or a link) in place of an environment's stamp, a layer's stamp or a cached release is read as
    no stamp: the entry is made again, never waited on."""
    from wheelci.compile.hostenv import TorchSpec, env_root, env_state
    from wheelci.config.releases import TorchIndex

    spec = TorchSpec("2.13.0", None, None, True)
    where = env_root(spec)
    where.mkdir(parents=True)
    os.mkfifo(where / hostenv.STAMP)
    assert "is not usable" in env_state(spec)
    index = root / "torch-releases"
    index.mkdir(parents=True)
    t = TorchIndex((tmp_path / "no-index").as_uri(), index)
    t.cache.mkdir(parents=True)
    os.mkfifo(t.cache / "2.99.0.json")
    with pytest.raises(CiError):  # read from the index (there is none here), not waited on
        t.release("2.99.0")
    (t.cache / "2.99.0.json").unlink()
    (t.cache / "2.99.0.json").symlink_to("/dev/zero")
    with pytest.raises(CiError):
        t.release("2.99.0")


def test_two_indexes_never_share_a_build_environment_and_its_name_holds_no_credential(root):
    from wheelci.compile.hostenv import TorchSpec, env_root
    from wheelci.config import matrix as mx

    default = mx.load().cpu_index_url
    plain = env_root(TorchSpec("2.13.0", None, default, True))
    mirror_a = env_root(TorchSpec("2.13.0", None, "https://ci:s3cr3t-tok@mirror-a.example/simple", True))
    mirror_a2 = env_root(TorchSpec("2.13.0", None, "https://ci:other-tok@mirror-a.example/simple/", True))
    mirror_b = env_root(TorchSpec("2.13.0", None, "https://mirror-b.example/simple", True))
    pip_config = env_root(TorchSpec("2.13.0", None, None, True), {"PIP_INDEX_URL": "https://u:tok3n@m.example/s"})
    assert plain.name == f"torch-2.13.0-cpu-py{sys.version_info.major}{sys.version_info.minor}"  # as before
    assert len({plain, mirror_a, mirror_b, pip_config}) == 4 and mirror_a == mirror_a2  # the origin, not the token
    assert "s3cr3t" not in str(mirror_a) and "tok3n" not in str(pip_config)
    assert env_root(TorchSpec("2.13.0", None, None, True), {}) == plain


def test_the_environments_stamp_and_install_report_keep_no_credential(tmp_path):
    from wheelci.compile.hostenv import PYPI, scrub_credentials, torch_source, uv_args

    token = "s3cr3t-tok3n-xyz"
    mirror = f"https://ci:{token}@mirror.example/simple"
    args = uv_args(["--isolated", "--index-url", mirror, "--extra-index-url", PYPI, "torch==2.13.0"])
    for version in ("2.13.0+cpu", "2.13.0"):
        assert token not in (torch_source(None, args, version) or ""), torch_source(None, args, version)
    report = tmp_path / "torch-install.json"
    report.write_text(json.dumps({"install": [{"metadata": {"name": "torch"}, "download_info": {
        "url": f"https://ci:{token}@mirror.example/files/torch-2.13.0-cp311-cp311-linux_x86_64.whl"}}]}))
    assert token not in (torch_source(report, [], "2.13.0") or "")
    scrub_credentials(report)
    assert token not in report.read_text() and "mirror.example/files/torch-2.13.0" in report.read_text()


def test_show_and_prune_print_entry_names_as_text_and_leave_what_is_not_theirs_in_the_aside(root, tmp_path):
    """An entry named with ESC reached the terminal raw; clear_aside removed whatever was in .pruning."""
    evil = "evil\x1b[31m::error::x"
    make_env(root, evil, b"x" * 1024, used=1_000)
    users = root / cache.ASIDE / "users-own"
    users.mkdir(parents=True)
    (users / "f").write_text("mine")
    r = cache_cli("show", root=root)
    assert r.returncode == 0 and "\x1b" not in r.stdout + r.stderr and "evil" in r.stdout, r.stdout
    r = cache_cli("prune", "--max-size", "0", root=root)
    assert r.returncode == 0 and "\x1b" not in r.stdout + r.stderr and "evil" in r.stdout, r.stdout
    assert not [ln for ln in r.stdout.splitlines() if ln.startswith("::")]
    assert (users / "f").read_text() == "mine"  # not the tool's: left where the user put it
    assert not [p for p in (root / cache.ASIDE).iterdir() if p.name != "users-own"]  # its own, removed
