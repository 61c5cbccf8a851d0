"""`ci.build PROJECT` for an extension that is not ours: the setuptools fixture (tests/fixtures/tiny_ext,
torch.utils.cpp_extension, CPU and CUDA kernels, its own pytest tests) as a directory and as an sdist,
built on the host, installed into a fresh venv and tested there; and the bad inputs."""

from __future__ import annotations

import io
import json
import re
import shutil
import signal
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests._wheels import SLOW_SETUP, interrupted_build, run_stage
from tests.test_layout import assert_declared

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tiny_ext"


def make_sdist(dest: Path, src: Path = FIXTURE, extra: list[tarfile.TarInfo] = ()) -> Path:
    """An sdist as `python -m build --sdist` lays it out: one top directory, PKG-INFO."""
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "tiny_ext-0.1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for f in sorted(p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            tar.add(f, arcname=f"tiny_ext-0.1.0/{f.relative_to(src)}")
        info = tarfile.TarInfo("tiny_ext-0.1.0/PKG-INFO")
        data = b"Metadata-Version: 2.1\nName: tiny-ext\nVersion: 0.1.0\n"
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for member in extra:
            tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    return path


def built(out: Path) -> tuple[Path, dict]:
    (wheel,) = sorted(out.glob("*.whl"))
    return wheel, json.loads((out / "report.json").read_text())


def assert_tested(out: Path, variant: str) -> Path:
    wheel, report = built(out)
    assert wheel.name.startswith(f"tiny_ext-0.1.0+pt2.13.0.{variant}-cp311-cp311-")
    assert "manylinux_2_28_x86_64" in wheel.name
    assert report["passed"] is True and report["plan"]["backend"] == "setuptools"
    checks = report["verify"]
    assert checks["test_command"].startswith("ok (") and checks["requires_torch"] == "ok"
    assert checks["nothing_grafted"] == "ok" and checks["torch"] == "2.13.0+" + variant
    ran = {k: v for k, v in checks.items() if k.startswith("test test_tiny::")}  # pytest's, one by one
    assert ran and all(v == "ok" or v.startswith("skipped") for v in ran.values()), ran
    assert checks["import tiny_ext"] == "ok" and checks["torch_ops"] == ["tiny_ext"]
    assert [k for k in checks if k.startswith("load tiny_ext/_C.") and checks[k] == "ok"]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        init = z.read("tiny_ext/__init__.py").decode()
    assert "tiny_ext/_preload.py" in names and "_p.preload()" in init
    assert not [n for n in names if ".libs/" in n]  # nothing grafted
    return wheel


def test_directory_cpu(tiny_cpu_build):
    assert_tested(tiny_cpu_build.out, "cpu")
    # the build is a list of steps: report.json and report.md record each one's outcome
    steps = {s["name"]: s for s in tiny_cpu_build.report["steps"]}
    assert list(steps) == ["sources", "env", "compile", "repair", "finish", "sbom", "check", "abi", "verify", "write",
                           "upload"]
    assert all(s["status"] == "ok" and s["seconds"] >= 0 for n, s in steps.items() if n != "upload")
    assert steps["upload"]["status"] == "skipped" and tiny_cpu_build.report["failed_step"] is None
    assert steps["compile"]["seconds"] > 0 and steps["compile"]["outputs"][0] == "tiny_ext-0.1.0-cp311-cp311-linux_x86_64.whl"
    assert steps["write"]["outputs"] == [tiny_cpu_build.wheel.name]
    md = (tiny_cpu_build.out / "report.md").read_text()
    assert "| step | status | seconds | what |" in md and "| verify | ok |" in md
    # for people: small (the compile read thousands of headers; report.json lists them), no reprs, how to rerun
    assert len(md.encode()) <= 16 * 1024 and "more (report.json)" in md, len(md.encode())
    assert not re.search(r"\b[A-Z]\w*\(\w+=|PosixPath\(|\{'", md)
    assert "Verify **passed**" in md and "To build it again: `" in md and "--cpu --torch 2.13.0 --engine host" in md
    assert len(steps["compile"]["outputs"]) > 100  # report.json keeps every file the compile read
    # setuptools writes build/ and *.egg-info where it builds: that must be a copy, never the project
    assert not list(FIXTURE.glob("build")) and not list(FIXTURE.glob("*.egg-info"))


@pytest.mark.slow
@pytest.mark.network
def test_policy_met_without_ninja_on_the_callers_path(tmp_path):
    """A caller with no ninja on PATH (an Ubuntu 24.04 root): cpp_extension then compiled the C++ through
    setuptools' C++ flags, without the glibc compat flags, and the wheel needed glibc 2.32."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in Path("/usr/bin").iterdir():
        if tool.name != "ninja":
            (bin_dir / tool.name).symlink_to(tool)
    out = tmp_path / "out"
    r = run_stage("ci.build", FIXTURE, "--cpu", "--engine", "host", "-w", out, env={"PATH": str(bin_dir)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert_tested(out, "cpu")  # manylinux_2_28 among its checks


@pytest.mark.slow
@pytest.mark.network
def test_sdist_cpu(tmp_path):
    """An sdist's build tree is kept by its digest: the same file, copied elsewhere and built into a new -w,
    builds in the same tree (its source unpacked at one path) and gives the same bytes."""
    sdist = make_sdist(tmp_path / "dist")
    out = tmp_path / "out"
    r = run_stage("ci.build", sdist, "--cpu", "--engine", "host", "-w", out)
    assert r.returncode == 0, r.stderr[-3000:]
    assert_tested(out, "cpu")
    again = tmp_path / "elsewhere" / sdist.name
    again.parent.mkdir()
    shutil.copyfile(sdist, again)
    r = run_stage("ci.build", again, "--cpu", "--engine", "host", "-w", tmp_path / "out2")
    assert r.returncode == 0, r.stderr[-3000:]
    (first, one), (second, two) = built(out), built(tmp_path / "out2")
    assert one["work_dir"] == two["work_dir"] and Path(one["work_dir"], "sdist", "tiny_ext-0.1.0").is_dir()
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.slow
def test_a_failed_sdist_build_keeps_its_log_and_tree(tmp_path):
    """The log the error line names, and the build files kept for inspection, are there when it returns."""
    broken = tmp_path / "broken"
    shutil.copytree(FIXTURE, broken, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    source = next(broken.glob("csrc/*.cpp"))
    source.write_text(source.read_text() + "\nthis is not C++;\n")
    r = run_stage("ci.build", make_sdist(tmp_path / "dist", broken), "--cpu", "--engine", "host", "-w", tmp_path / "out")
    assert r.returncode == 1, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    m = re.search(r"\(full log: (\S+)\)", last)
    assert m and "the compiler's first error:" in last, last
    log = Path(m[1])
    assert log.is_file() and "this is not C++" in log.read_text()
    assert (log.parent / "sdist" / "tiny_ext-0.1.0").is_dir()  # the unpacked source too


@pytest.mark.slow
@pytest.mark.extended  # CI's heavy tier builds the same wheel twice in test_compile_cache's two machines
@pytest.mark.network
def test_directory_cuda(tmp_path):
    out = tmp_path / "out"
    r = run_stage("ci.build", FIXTURE, "--cuda", "13.0", "--arch-list", "9.0", "--engine", "host", "-w", out)
    assert r.returncode == 0, r.stderr[-3000:]
    wheel = assert_tested(out, "cu130")
    _, report = built(out)
    assert "libcudart.so.13" in json.dumps(report["wheels"])  # the CUDA kernel was compiled and linked


def test_dry_run_names_the_build_system():
    r = run_stage("ci.build", FIXTURE, "--cpu", "--engine", "host", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert re.search(rf"^project +tiny-ext \({re.escape(str(FIXTURE))}\), built with setuptools$", r.stdout, re.M), r.stdout


def error_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("python -m ci.build: error:")]
    assert len(lines) == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    return lines[0]


def _link(name: str, target: str, sym: bool = True) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE if sym else tarfile.LNKTYPE
    info.linkname = target
    return info


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 1
    return info


@pytest.mark.parametrize("case, words", [
    ("not-a-project-file", "neither a project directory nor an sdist"),
    ("missing", "no such file or directory"),
    ("empty-dir", "neither pyproject.toml nor setup.py: not a Python project"),
    ("sdist-dotdot", "points outside the sdist; refused before extraction"),
    ("sdist-absolute", "points outside the sdist; refused before extraction"),
    ("sdist-symlink-out", "leads outside the sdist; refused before extraction"),
    ("sdist-hardlink-out", "leads outside the sdist; refused before extraction"),
    ("sdist-corrupt", "not a readable sdist"),
    ("bad-env", "bad --env: an item has no '=' (want NAME=VALUE; the item is not shown, it may be a secret)"),
])
def test_bad_projects_are_one_line_exit_2(tmp_path, case, words):
    args = ["--cpu", "--engine", "host"]
    if case == "not-a-project-file":
        project = tmp_path / "notes.txt"
        project.write_text("hello")
    elif case == "missing":
        project = tmp_path / "nope"
    elif case == "empty-dir":
        project = tmp_path / "empty"
        project.mkdir()
    elif case == "sdist-corrupt":
        project = tmp_path / "tiny_ext-0.1.0.tar.gz"
        project.write_bytes(b"\x1f\x8b not really gzip")
    elif case.startswith("sdist-"):
        member = {"sdist-dotdot": _file("tiny_ext-0.1.0/../../evil.txt"),
                  "sdist-absolute": _file("/tmp/evil.txt"),
                  "sdist-symlink-out": _link("tiny_ext-0.1.0/escape", "../../../etc"),
                  "sdist-hardlink-out": _link("tiny_ext-0.1.0/hard", "/etc/passwd", sym=False)}[case]
        project = make_sdist(tmp_path / "dist", extra=[member])
    else:
        project = FIXTURE
        args = ["--cpu", "--engine", "host", "--env", "NOEQUALS"]
    out = tmp_path / "out"
    r = run_stage("ci.build", project, *args, "-w", out)
    assert r.returncode == 2, r.stderr[-2000:]
    assert words in error_line(r)
    assert not out.exists() or not list(out.glob("*.whl"))
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/evil.txt").exists()


@pytest.mark.slow
@pytest.mark.network
def test_a_failing_build_names_the_log_and_writes_nothing(tmp_path):
    project = tmp_path / "broken"
    shutil.copytree(FIXTURE, project)
    (project / "csrc" / "tiny.cpp").write_text("#include <torch/extension.h>\nthis is not C++;\n")
    out = tmp_path / "out"
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", out)
    assert r.returncode == 1, r.stderr[-2000:]
    line = error_line(r)
    assert "compile failed" in line and "full log: " in line
    log = Path(line.split("full log: ")[1].rstrip(")"))
    assert log.is_file() and "this is not C++" in log.read_text(errors="replace")
    assert not out.exists() or not list(out.glob("*.whl"))
    report = json.loads((out / "report.json").read_text())  # the report says where it stopped
    assert report["failed_step"] == "compile" and [s["status"] for s in report["steps"]] == ["ok", "ok", "failed"]
    compiled = report["steps"][2]["seconds"]
    assert compiled > 0 and report["build_seconds"] == compiled  # it said "Build 0 s"
    md = (out / "report.md").read_text()
    assert f"**Stopped at step compile** (failed after {compiled:.0f} s;" in md and "compile failed" in md


@pytest.mark.slow
@pytest.mark.network
def test_a_runtime_requirement_nothing_installs_is_refused_before_the_compile(tmp_path):
    """install_requires naming what no release installs on the build's Python: refused when setup.py is
    asked, before anything compiles (verify would have failed after the whole compile); a requirement
    with an sdist only is a warning."""
    project = tmp_path / "needs"
    shutil.copytree(FIXTURE, project)
    setup = project / "setup.py"
    setup.write_text(setup.read_text().replace("setup(ext_modules=[ext]",
                                               "setup(install_requires=['numpy>=1.26', 'wheelci-no-such-project-zz>=1'], ext_modules=[ext]"))
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", tmp_path / "out")
    assert r.returncode == 1, r.stderr[-2000:]
    line = error_line(r)
    assert "its runtime requirement wheelci-no-such-project-zz>=1 has no release that installs on CPython" in line, line
    assert "compiled in" not in r.stderr  # nothing compiled
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["failed_step"] == "compile" and report["steps"][2]["seconds"] < 120


@pytest.mark.slow
@pytest.mark.network
def test_a_failing_test_command_writes_no_wheel_and_the_report_says_which(tmp_path):
    out = tmp_path / "out"
    r = run_stage("ci.build", FIXTURE, "--cpu", "--engine", "host", "--test-command",
                  "python -c 'import tiny_ext, sys; print(\"tiny says no\"); sys.exit(3)'", "-w", out)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "verify failed (test_command: FAILED: exit 3: tiny says no" in error_line(r)
    assert not list(out.glob("*.whl"))
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] is False and report["failed_step"] == "verify"
    assert report["verify"]["test_command"].startswith("FAILED: exit 3: tiny says no")
    (verify,) = [s for s in report["steps"] if s["name"] == "verify"]
    assert verify["status"] == "failed" and "tiny says no" in verify["error"]
    assert [s["name"] for s in report["steps"]][-1] == "verify"  # the driver stopped there
    assert "**Stopped at step verify** (failed after" in (out / "report.md").read_text()
    log = Path(error_line(r).split("the whole output: ")[1])  # what the command printed, whole
    assert report["verify"]["log"] == f"the whole output: {log}" and "tiny says no" in log.read_text()


@pytest.mark.slow
@pytest.mark.network
def test_a_projects_own_tool_bound_wins_and_the_next_build_gets_our_pin_back(tmp_path):
    """`ninja<1.12` in [build-system]: the build gets that ninja, not our constrained 1.13.2 (a rewritten
    requirement would have given ours), and the plan says so. The host's build
    environment is shared between projects: the project's ninja goes into the build's own environment
    (wheelci.compile.overlay), and the shared one keeps our pin, untouched."""
    import importlib.metadata
    import re as re_

    from wheelci.compile.hostenv import TorchSpec, ensure_env
    from wheelci.config import constraints

    project = tmp_path / "old-ninja"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('requires = ["setuptools>=64", "torch"]',
                                                       'requires = ["setuptools>=64", "torch", "ninja<1.12"]'))
    setup = project / "setup.py"  # the build says which ninja it ran with (the env is shared: read it then)
    setup.write_text("import importlib.metadata as m\nprint('ninja in the build:', m.version('ninja'), flush=True)\n"
                     + setup.read_text())
    out, work = tmp_path / "out", tmp_path / "work"
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", out, "--work-dir", work)
    assert r.returncode == 0, r.stderr[-3000:]
    assert_declared(work, out)  # every entry the build wrote is one wheelci.util.layout names
    pinned = constraints.read()["ninja"]
    assert f"note: the project requires ninja<1.12: the pipeline's ninja=={pinned} is set aside" in r.stderr
    used = re_.search(r"^ninja in the build: (\S+)$", (work / "compile.log").read_text(), re_.M)
    assert used and re_.match(r"1\.(1[01]|[0-9])\.", used[1]), used  # what the project asked for
    assert_tested(out, "cpu")
    env = ensure_env(TorchSpec("2.13.0", None, None, False))

    def ninja() -> str:
        return next(importlib.metadata.distributions(name="ninja", path=[str(env.site)])).version

    assert ninja() == pinned
    own = next(work.glob("build-env/lib/python*/site-packages"))
    assert re_.match(r"1\.(1[01]|[0-9])\.", next(importlib.metadata.distributions(name="ninja", path=[str(own)])).version)


def test_a_work_dir_holding_the_users_files_is_refused_untouched(tmp_path):
    """A build replaces parts of its --work-dir (src/, build/, dist/): one that holds anything this tool
    did not make is refused before anything is written. It once removed a src-layout project's sources
    (`--work-dir .` from the project) and any src/ the user kept there."""
    project = tmp_path / "proj"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (project / "src").mkdir()
    (project / "src" / "precious.py").write_text("keep me\n")
    victim = tmp_path / "victim"
    (victim / "src").mkdir(parents=True)
    (victim / "src" / "notes.txt").write_text("mine\n")
    for work in (victim, project):
        before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
        r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", tmp_path / "out", "--work-dir", work)
        words = "holds files wheelci did not make" if work == victim else "is the project or above it"
        assert r.returncode == 2 and f"--work-dir {work}" in error_line(r) and words in error_line(r), r.stderr
        assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert (project / "src" / "precious.py").read_text() == "keep me\n"


def test_the_project_itself_as_the_output_directory_is_refused(tmp_path):
    project = tmp_path / "proj"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (project / "report.md").write_text("the project's own report\n")
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", project)
    assert r.returncode == 2 and "is the project itself" in error_line(r)
    assert (project / "report.md").read_text() == "the project's own report\n"
    assert not (project / "report.json").exists()


def test_a_bad_limit_is_refused_before_the_compile(tmp_path):
    r = run_stage("ci.build", FIXTURE, "--cpu", "--engine", "host", "--limit", "3XB", "--dry-run")
    assert r.returncode == 2 and "not a size: '3XB'" in error_line(r)


@pytest.mark.parametrize("where", ["project", "above"])
def test_a_work_dir_that_is_the_project_or_holds_it_is_refused(tmp_path, where):
    """A project may commit a .wheelci-work file: the mark alone must not let a build clear its sources."""
    project = tmp_path / "proj"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (project / ".wheelci-work").write_text("forged\n")
    work = {"project": project, "above": tmp_path}[where]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", tmp_path / "out", "--work-dir", work)
    assert r.returncode == 2 and "is the project or above it" in r.stderr, r.stderr
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_build_leaves_no_wheel_dir_it_made(tmp_path, signum):
    """Ctrl-C or a cancelled job mid-compile: the -w this run created is gone (it once stayed, empty),
    and so is the temporary work directory."""
    project = tmp_path / "slow"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (project / "setup.py").write_text(SLOW_SETUP)
    out, work = tmp_path / "out", tmp_path / "work"
    returncode, stderr = interrupted_build(project, out, work, signum, wait=300)
    assert returncode == 128 + signum, stderr[-2000:]
    assert not out.exists(), list(out.iterdir())
    left = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).find(str(project)) >= 0]
    assert not left, left  # the build backend's own processes were stopped with it


def _cmdline(proc_dir: Path) -> str:
    try:
        return (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # it ended meanwhile
        return ""
