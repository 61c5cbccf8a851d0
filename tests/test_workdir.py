"""The kept build tree (wheelci.compile.workdir): what a rerun reads of the project, how the copy follows
it, and what the tree may delete. Each case is one a review reproduced against a real build."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from wheelci.compile import workdir
from wheelci.errors import CiError

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "tiny_ext"


def project(tmp_path: Path) -> Path:
    p = tmp_path / "proj"
    (p / "pkg").mkdir(parents=True)
    (p / "pkg" / "a.cpp").write_text("int a() { return 1; }\n")
    (p / "pkg" / "b.py").write_text("B = 1\n")
    return p


def test_an_edit_that_keeps_size_and_mtime_is_read_again(tmp_path):
    """rsync -a or tar x of a same-length edit: the mtime is the old one, the ctime is not."""
    p, work = project(tmp_path), tmp_path / "work"
    work.mkdir()
    old = os.stat(p / "pkg" / "a.cpp")
    os.utime(p / "pkg" / "a.cpp", ns=(old.st_atime_ns, old.st_mtime_ns - 5 * 10**9))  # seen long after its edit
    files1, digest1 = workdir.snapshot_sources(p, work)
    before = os.stat(p / "pkg" / "a.cpp")
    (p / "pkg" / "a.cpp").write_text("int a() { return 2; }\n")  # same length
    os.utime(p / "pkg" / "a.cpp", ns=(before.st_atime_ns, before.st_mtime_ns))
    files2, digest2 = workdir.snapshot_sources(p, work)
    assert files2["pkg/a.cpp"] != files1["pkg/a.cpp"] and digest2 != digest1


def test_leave_out_and_marked_work_dirs_are_not_sources(tmp_path):
    p, work = project(tmp_path), tmp_path / "work"
    work.mkdir()
    (p / "wheelhouse").mkdir()
    (p / "wheelhouse" / "report.json").write_text("{}")
    (p / "wd").mkdir()
    (p / "wd" / workdir.WORK_MARK).write_text("")
    (p / "wd" / "log.txt").write_text("x")
    files, _ = workdir.snapshot_sources(p, work, leave_out=(p / "wheelhouse",))
    assert sorted(files) == ["pkg/a.cpp", "pkg/b.py"]


def test_the_copy_follows_deletions_and_a_directory_replaced_by_a_file(tmp_path):
    p, work = project(tmp_path), tmp_path / "work"
    work.mkdir()
    files, _ = workdir.snapshot_sources(p, work)
    dest = workdir.sync_project(p, work / "src", files)
    (dest / "build" / "temp.x").mkdir(parents=True)
    (dest / "build" / "temp.x" / "a.o").write_text("object")
    shutil.rmtree(p / "pkg")
    (p / "pkg").write_text("now a file\n")
    files, _ = workdir.snapshot_sources(p, work)
    workdir.sync_project(p, dest, files)
    assert (dest / "pkg").read_text() == "now a file\n"
    assert (dest / "build" / "temp.x" / "a.o").read_text() == "object"  # the backend's tree is kept


def test_a_file_changed_since_the_snapshot_is_refused_not_copied(tmp_path):
    p, work = project(tmp_path), tmp_path / "work"
    work.mkdir()
    files, _ = workdir.snapshot_sources(p, work)
    (p / "pkg" / "a.cpp").write_text("int a() { return 3; }\n")
    with pytest.raises(CiError, match="changed while the build was reading the project"):
        workdir.sync_project(p, work / "src", files)


def test_nothing_is_written_or_deleted_through_a_planted_link(tmp_path):
    p, work = project(tmp_path), tmp_path / "work"
    work.mkdir()
    victim = tmp_path / "victim"
    (victim / "pkg").mkdir(parents=True)
    (victim / "important.txt").write_text("keep")
    (victim / "pkg" / "b.py").write_text("keep")
    (work / "src").symlink_to(victim)
    (work / workdir.COPIED).write_text(json.dumps({"important.txt": "0", "../victim/important.txt": "0"}))
    files, _ = workdir.snapshot_sources(p, work)
    dest = workdir.sync_project(p, work / "src", files)
    assert not dest.is_symlink() and (dest / "pkg" / "a.cpp").is_file()
    assert (victim / "important.txt").read_text() == "keep" and (victim / "pkg" / "b.py").read_text() == "keep"
    # a link below the copy's root too
    shutil.rmtree(dest / "pkg")
    (dest / "pkg").symlink_to(victim / "pkg")
    (work / workdir.COPIED).write_text(json.dumps({"pkg/b.py": "0", "pkg/a.cpp": "0"}))
    workdir.sync_project(p, dest, files)
    assert not (dest / "pkg").is_symlink() and (victim / "pkg" / "b.py").read_text() == "keep"


def test_a_linked_mark_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    work = tmp_path / "wd"
    work.mkdir()
    (work / workdir.WORK_MARK).symlink_to(victim)
    with pytest.raises(CiError, match="not a file this tool wrote"):
        workdir.own_work_dir(work)
    assert victim.read_text() == "keep"


def test_fresh_removes_what_builds_write_and_nothing_else(tmp_path):
    work = tmp_path / "wd"
    workdir.own_work_dir(work)
    for name in ("src", "build", "dist", "sbom"):
        (work / name).mkdir()
        (work / name / "f").write_text("x")
    (work / "compile.log").write_text("log")
    (work / workdir.TREE).write_text("{}")
    (work / "notes.txt").write_text("mine")
    (work / "mydata").mkdir()
    workdir.clear_work_dir(work)
    assert sorted(p.name for p in work.iterdir()) == sorted([workdir.WORK_MARK, workdir.TREE, "notes.txt", "mydata"])


def test_setuptools_outputs_of_an_earlier_build_are_cleared_and_its_objects_kept(tmp_path):
    src = tmp_path / "src"
    for d in ("build/lib.linux-x86_64-cpython-311/pkg", "build/bdist.linux-x86_64", "build/temp.linux-x86_64-cpython-311",
              "pkg.egg-info"):
        (src / d).mkdir(parents=True)
    (src / "build" / "lib.linux-x86_64-cpython-311" / "pkg" / "deleted.py").write_text("")
    (src / "build" / "temp.linux-x86_64-cpython-311" / "a.o").write_text("")
    (src / "build" / "helpers.py").write_text("the project's own")  # tracked: kept
    (src / "src" / "pkg.egg-info").mkdir(parents=True)  # a src layout's
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    workdir.clear_outputs(src, {"build/helpers.py": "x", "pkg/__init__.py": "y"})
    assert sorted(p.name for p in (src / "build").iterdir()) == ["helpers.py", "temp.linux-x86_64-cpython-311"]
    assert not (src / "pkg.egg-info").exists() and not (src / "src" / "pkg.egg-info").exists()
    shutil.rmtree(src / "build")
    (src / "build").symlink_to(outside)  # planted: removed, never followed
    workdir.clear_outputs(src, {})
    assert not (src / "build").exists() and (outside / "keep").read_text() == "keep"


def test_a_wheelhouse_above_the_project_does_not_hide_it(tmp_path):
    p, work = project(tmp_path), tmp_path / "work"
    work.mkdir()
    files, _ = workdir.snapshot_sources(p, work, leave_out=(tmp_path, p))
    assert sorted(files) == ["pkg/a.cpp", "pkg/b.py"]


def test_an_interrupted_sync_is_finished_by_the_next_and_a_changed_copy_is_restored(tmp_path):
    p, work = project(tmp_path), tmp_path / "work"
    work.mkdir()
    files, _ = workdir.snapshot_sources(p, work)
    dest = workdir.sync_project(p, work / "src", files)
    (p / "pkg" / "new.py").write_text("NEW = 1\n")
    (p / "pkg" / "z_changed.py").write_text("Z = 1\n")
    files, _ = workdir.snapshot_sources(p, work)
    (p / "pkg" / "z_changed.py").write_text("Z = 2\n")  # the sync stops at it, after copying new.py
    with pytest.raises(CiError):
        workdir.sync_project(p, dest, files)
    (p / "pkg" / "new.py").unlink()  # deleted before the next build: it must leave the copy too
    files, _ = workdir.snapshot_sources(p, work)
    workdir.sync_project(p, dest, files)
    assert not (dest / "pkg" / "new.py").exists() and (dest / "pkg" / "z_changed.py").read_text() == "Z = 2\n"
    (dest / "pkg" / "b.py").write_text("B = 'changed by the build'\n")
    workdir.sync_project(p, dest, files)
    assert (dest / "pkg" / "b.py").read_text() == "B = 1\n"


def test_a_copy_with_no_record_is_made_anew_and_a_mode_change_is_a_change(tmp_path):
    p, work = project(tmp_path), tmp_path / "work"
    work.mkdir()
    (work / "src" / "pkg").mkdir(parents=True)
    (work / "src" / "pkg" / "deleted_long_ago.py").write_text("")  # an earlier release's copy
    files, digest = workdir.snapshot_sources(p, work)
    dest = workdir.sync_project(p, work / "src", files)
    assert not (dest / "pkg" / "deleted_long_ago.py").exists()
    (p / "pkg" / "b.py").chmod(0o755)
    files2, digest2 = workdir.snapshot_sources(p, work)
    assert digest2 != digest
    workdir.sync_project(p, dest, files2)
    assert os.access(dest / "pkg" / "b.py", os.X_OK)


def test_the_tree_key_ignores_variables_and_after_compile_settings(tmp_path):
    """A CI job token in PIP_INDEX_URL, MAX_JOBS or a test command must not make a new tree per job."""
    from wheelci import plan as pl

    def key(**env: str) -> str:
        plan = pl.make_plan(pl.Request(cuda=None, engine="host"), project_dir=FIXTURE, env={"PATH": os.environ["PATH"], **env})
        return workdir.tree_key(FIXTURE, plan)

    base = key()
    assert key(CC="clang") != base  # CMake and meson read the compiler at the first configure only
    assert key(MAX_JOBS="1") == base and key(PIP_INDEX_URL="https://u:tok1@idx/simple") == key(
        PIP_INDEX_URL="https://u:tok2@idx/simple") == base
    plan = pl.make_plan(pl.Request(cuda=None, engine="host"), project_dir=FIXTURE)
    assert "test_command" not in workdir.compile_view(plan) and "source_date_epoch" in workdir.compile_view(plan)


def test_session_noise_is_not_an_input_and_the_rest_is():
    from wheelci.build import inherited_environ

    env = inherited_environ({"PWD": "/x", "SHLVL": "2", "GITHUB_RUN_ID": "7", "FORCE_CUDA": "1", "CPATH": "/inc"})
    assert env == {"CPATH": "/inc", "FORCE_CUDA": "1"}


def _pip_wheel_files(project_dir: Path, out: Path) -> dict[str, bytes]:
    """What `pip wheel` ships of a setuptools project (this environment's setuptools, no index)."""
    import sys
    import zipfile

    from tests import _proc

    r = _proc.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                   "-w", str(out), str(project_dir)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) for n in z.namelist() if ".dist-info/" not in n}


def test_a_tracked_link_to_a_directory_is_copied_as_pip_wheel_ships_it(tmp_path):
    """git lists a link to a directory as one entry, which the copy dropped; pip wheel builds the project
    in place and ships what lies behind it. A link back up is not walked twice."""
    from tests import _proc

    p = tmp_path / "proj"
    (p / "shared").mkdir(parents=True)
    (p / "shared" / "data.py").write_text("DATA = 1\n")
    (p / "pkg").mkdir()
    (p / "pkg" / "__init__.py").write_text("")
    (p / "pkg" / "sub").symlink_to("../shared", target_is_directory=True)
    (p / "pkg" / "loop").symlink_to("..", target_is_directory=True)
    (p / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
                                      '"setuptools.build_meta"\n\n[project]\nname = "linked"\nversion = "0.1"\n\n'
                                      '[tool.setuptools]\npackages = ["pkg", "pkg.sub"]\n')
    _proc.run(["git", "init", "-q", str(p)], check=True)
    _proc.run(["git", "-C", str(p), "add", "-A"], check=True)
    work = tmp_path / "work"
    work.mkdir()
    files, _ = workdir.snapshot_sources(p, work)
    assert "pkg/sub/data.py" in files and not any(f.startswith("pkg/loop/pkg/loop") for f in files)
    dest = workdir.sync_project(p, work / "src", files)
    assert _pip_wheel_files(dest, tmp_path / "ours") == _pip_wheel_files(p, tmp_path / "pips")
    (p / "pkg" / "sub").unlink()  # retargeted: the copy follows
    (p / "other").mkdir()
    (p / "other" / "data.py").write_text("DATA = 2\n")
    (p / "pkg" / "sub").symlink_to("../other", target_is_directory=True)
    files2, digest2 = workdir.snapshot_sources(p, work)
    workdir.sync_project(p, dest, files2)
    assert (dest / "pkg" / "sub" / "data.py").read_text() == "DATA = 2\n"


def test_what_a_configure_searches_is_an_input(tmp_path):
    """CMake answers find_path from its cache and meson keeps its first environment: a header appearing
    under a prefix a variable or flag names changes the configure inputs, with no variable changed."""
    prefix, inc, lib = tmp_path / "prefix", tmp_path / "inc", tmp_path / "lib"
    for d in (prefix / "include" / "v1", prefix / "lib" / "pkgconfig", inc, lib):
        d.mkdir(parents=True)
    env = {"CMAKE_PREFIX_PATH": f"{prefix}:/nowhere", "CFLAGS": f"-O2 -I{inc} -isystem {inc}", "LDFLAGS": f"-L {lib}",
           "PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig"), "Foo_ROOT": str(lib), "PYENV_ROOT": str(tmp_path)}
    assert sorted(workdir.search_dirs(env)) == [inc, lib, prefix]  # a pkg-config directory stands for its prefix
    base = workdir.configure_inputs(env)
    (prefix / "include" / "v2").mkdir()
    (prefix / "include" / "v2" / "found.h").write_text("#define FOUND 2\n")
    assert workdir.configure_inputs(env) != base
    base = workdir.configure_inputs(env)
    (tmp_path / "__pycache__").mkdir()  # below PYENV_ROOT only: no search reads it
    assert workdir.configure_inputs(env) == base
    assert workdir.configure_inputs({**env, "CMAKE_PREFIX_PATH": "/elsewhere"}) != base
    # a header written again with the same bytes (a fresh tree's staged headers) is the same input, so the
    # compile cache that hashes this digest still hits; other bytes of the same size are not
    found = prefix / "include" / "v2" / "found.h"
    found.unlink()
    found.write_text("#define FOUND 2\n")
    os.utime(found, ns=(1, 1))
    assert workdir.configure_inputs(env) == base
    found.write_text("#define FOUND 3\n")
    os.utime(found, ns=(1, 1))
    assert workdir.configure_inputs(env) != base


def test_two_work_trees_at_other_paths_give_ccache_one_searched_digest(tmp_path):
    """What ccache hashes with every compile (note_searched): each tree's staged headers on the include path
    are named below the tree, as ccache names every path below its base directory, so a tree at another
    path (another clone, another test's project) hits what the first compiled; other bytes there do not,
    and a directory outside the tree keeps its own name."""
    outside = tmp_path / "outside"
    outside.mkdir()
    digests = []
    for tree in (tmp_path / "a" / "work", tmp_path / "b" / "deeper" / "work"):
        (tree / "compat").mkdir(parents=True)
        (tree / "compat" / "glibc_compat.h").write_text("#pragma once\n")
        env = {"CFLAGS": f"-isystem {tree / 'compat'} -I{outside}"}
        digests.append(workdir.note_searched(tree / workdir.SEARCHED, env).read_text())
    assert digests[0] == digests[1]
    (tmp_path / "b" / "deeper" / "work" / "compat" / "glibc_compat.h").write_text("#pragma twice\n")
    env = {"CFLAGS": f"-isystem {tmp_path / 'b' / 'deeper' / 'work' / 'compat'} -I{outside}"}
    assert workdir.note_searched(tmp_path / "b" / "deeper" / "work" / workdir.SEARCHED, env).read_text() != digests[0]
    # outside a base, a directory is named where it is (the configure inputs of one tree)
    (tmp_path / "elsewhere").mkdir()
    assert workdir.searched({"CFLAGS": f"-I{outside}"}) != workdir.searched({"CFLAGS": f"-I{tmp_path / 'elsewhere'}"})


def test_a_changed_configure_input_drops_cmakes_cache_and_meson_s_tree(tmp_path):
    build, record = tmp_path / "build", tmp_path / workdir.CONFIGURED
    build.mkdir()
    (build / "CMakeCache.txt").write_text("FOO_INCLUDE:PATH=/old\n")
    (build / "a.o").write_text("object")
    assert workdir.reconfigure_if_changed(build, record, "one", meson=False)  # no record: not known to be current
    (build / "CMakeCache.txt").write_text("FOO_INCLUDE:PATH=/old\n")
    assert not workdir.reconfigure_if_changed(build, record, "one", meson=False)
    assert (build / "CMakeCache.txt").is_file()
    assert workdir.reconfigure_if_changed(build, record, "two", meson=False)
    assert not (build / "CMakeCache.txt").exists() and (build / "a.o").is_file()  # the objects stay
    assert workdir.reconfigure_if_changed(build, record, "three", meson=True) and not build.exists()


def test_a_setuptools_tree_forgets_its_ninja_logs_when_what_it_searched_changed(tmp_path):
    from wheelci.compile.workdir import recompile_if_changed

    tree = tmp_path / "src" / "build" / "temp.linux"
    tree.mkdir(parents=True)
    record = tmp_path / ".compiled-with"
    assert not recompile_if_changed([tree], record, "one")  # a first compile: nothing to forget
    for name in (".ninja_log", ".ninja_deps"):
        (tree / name).write_text("kept\n")
    assert not recompile_if_changed([tree], record, "one") and (tree / ".ninja_log").is_file()
    assert recompile_if_changed([tree], record, "two")
    assert not (tree / ".ninja_log").exists() and not (tree / ".ninja_deps").exists()
    outside = tmp_path / "outside"
    outside.write_text("not ours\n")
    (tree / ".ninja_log").symlink_to(outside)  # planted: never followed, never removed through
    assert not recompile_if_changed([tree], record, "three") and outside.read_text() == "not ours\n"


def test_the_requirements_check_runs_again_when_its_answer_may_differ(tmp_path):
    """A kept tree skips `python -m build`'s check of the backend's requirements (for setuptools a second run
    of setup.py, which imports torch) only where the last compile passed it with the same inputs."""
    from types import SimpleNamespace

    from wheelci import plan as pl
    from wheelci.compile.host import requirements_check_key

    project = tmp_path / "p"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    plan = pl.make_plan(pl.Request(cuda=None, engine="host"), project_dir=project)
    env = SimpleNamespace(root=tmp_path / "env", torch_version="2.13.0")

    def key(plan=plan, env=env, configure="c1") -> str:
        return requirements_check_key(plan, env, project, configure)

    base = key()
    assert key() == base
    assert key(configure="c2") != base  # a variable or a searched directory changed
    assert key(env=SimpleNamespace(root=tmp_path / "env2", torch_version="2.13.0")) != base
    forced = pl.make_plan(pl.Request(cuda=None, engine="host"), project_dir=project,
                          run=pl.RunSettings(build_env={"FORCE_CUDA": "1"}))
    assert key(plan=forced) != base
    (project / "setup.py").write_text((project / "setup.py").read_text() + "\n# setup_requires may change here\n")
    assert key() != base
    # an in-tree backend answers from its own files: each is an input, a link planted there is not read
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("[build-system]\n", '[build-system]\nbackend-path = ["_b", "../.."]\n', 1))
    (project / "_b").mkdir()
    (project / "_b" / "backend.py").write_text("REQUIRES = []\n")
    (project / "_b" / "elsewhere").symlink_to(tmp_path / "env")
    with_backend = key()
    (project / "_b" / "backend.py").write_text("REQUIRES = ['ninja']\n")
    assert key() != with_backend
    from wheelci.compile.host import in_tree_backend

    assert in_tree_backend(project) == ["_b/backend.py"]  # nothing outside the project, no link
    pyproject.write_text(pyproject.read_text().replace('backend-path = ["_b", "../.."]', 'backend-path = ["."]'))
    top = in_tree_backend(project)  # the top's own files: a source edit below it is not a backend change
    assert "setup.py" in top and not [name for name in top if "/" in name], top
    # ... but the package build-backend names is: its get_requires_for_build_wheel lives there
    pyproject.write_text(pyproject.read_text().replace("[build-system]\n", '[build-system]\nbuild-backend = "_b.backend"\n', 1)
                         .replace('build-backend = "setuptools.build_meta"\n', ""))
    assert "_b/backend.py" in in_tree_backend(project) and "csrc/tiny.cpp" not in in_tree_backend(project)


def test_the_force_included_headers_are_staged_in_the_work_dir_never_through_a_planted_link(tmp_path):
    """The copy keeps its mtime while current (ninja would recompile everything), follows no link planted in
    the work directory (a build would include what it points to, and write there), and drops what the tool
    no longer ships."""
    from wheelci.compile.host import GLIBC_COMPAT, staged_compat

    outside, work = tmp_path / "outside", tmp_path / "work"
    outside.mkdir()
    (outside / "glibc_compat.h").write_text("precious\n")
    work.mkdir()
    (work / "compat").symlink_to(outside)
    staged = staged_compat(work)
    assert (outside / "glibc_compat.h").read_text() == "precious\n" and not (outside / "sys").exists()
    assert not staged.is_symlink() and (staged / "glibc_compat.h").read_bytes() == (GLIBC_COMPAT / "glibc_compat.h").read_bytes()
    mtime = (staged / "glibc_compat.h").stat().st_mtime_ns
    (staged / "old.h").write_text("#error stale\n")
    (staged / "sys" / "link.h").symlink_to(outside / "glibc_compat.h")
    staged_compat(work)
    assert (staged / "glibc_compat.h").stat().st_mtime_ns == mtime
    assert not (staged / "old.h").exists() and not (staged / "sys" / "link.h").is_symlink()
    assert (outside / "glibc_compat.h").read_text() == "precious\n"
