"""Compile on the host toolchain: what the container engine does, where no container engine runs.

The cached build env supplies the plan's torch; for CUDA builds a CUDA root assembled from the host
nvcc (or NVIDIA's nvcc wheel) and the nvidia-* wheels stands in for the image's toolkit. The build
itself is the project's own, through `python -m build --no-isolation`; a CMake project's build tree
stays in the work directory, where its tests find what it built besides the wheel (CI_BUILD_DIR).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import shutil as sh
import subprocess
import time
from importlib.resources import files as resource_files
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Iterator

from wheelci.cibw import build_installs
from wheelci.compile import cmakeprobe, hints, launch, probe, progress, runtime, sccache
from wheelci.compile.hostenv import (BuildEnv, TorchSpec, assemble_cuda_root, cpu_environ, cuda_build_environ,
                                     ensure_env, find_nvcc)
from wheelci.compile.overlay import Overlay, add_asked, changed_by_the_build, fingerprint, overlay
from wheelci.compile.sccache import CacheReport, describe
from wheelci.compile.workdir import (clear_outputs, compile_view, configure_inputs, forget_unseen_changes,
                                     note_searched, read_record, recompile_if_changed, reconfigure_if_changed,
                                     snapshot_sources, stage_files, sync_project)
from wheelci.config import constraints, matrix
from wheelci.config.compilecache import torch_finds_ccache
from wheelci.config.project import Backend
from wheelci.engine import nvcc_dirs
from wheelci.errors import CiError, Finding
from wheelci.resources.container.steady import steady_times
from wheelci.util import log, proc, toml, variables
from wheelci.util.atomic import fresh_file, write_text
from wheelci.util.layout import BUILT, CHECKED, COMPILED_WITH, CONFIGURED, SEARCHED
from wheelci.util.lock import locked_file

if TYPE_CHECKING:
    from wheelci.plan import Plan

# headers force-included into host builds: they keep the wheel within torch's manylinux policy
GLIBC_COMPAT = Path(__file__).resolve().parent.parent / "resources" / "glibc_compat"


@dataclass(frozen=True)
class CompileResult:
    wheel: Path  # the unrepaired wheel, as the build backend wrote it
    build_dir: Path | None  # the CMake build tree (test programs the project built stay there)
    env: BuildEnv  # the torch it was built against, which verify installs next to it
    cache: CacheReport | None = None  # what the remote compile cache did (None: no remote store)
    probe: dict[str, Any] | None = None  # what the project's setup.py said before the compile (wheelci.compile.probe)


def torch_spec(plan: Plan) -> TorchSpec:
    """The torch a host environment gets: the plan's release, from the index the plan names."""
    return TorchSpec(plan.torch, plan.cuda, plan.torch_index_url, plan.torch_on_pypi)


def toolkit_wheels(cuda: str) -> tuple[str, ...]:
    """NVIDIA's wheels that make a whole nvcc toolkit for this CUDA version (empty where none do)."""

    row = matrix.load().row(cuda)
    return (*row.nvcc_wheels, *row.toolkit_wheels) if row.nvcc_wheel_has_nvcc else ()


def _requirements_key(plan: Plan) -> tuple[list[str], Path, str]:
    reqs = build_installs(plan.build_requires, compile_cache=bool(plan.run.compile_cache))
    pins = constraints.ensure_file(plan.tool_constraints)
    return reqs, pins, hashlib.sha256("\0".join([*reqs, Path(pins).read_text()]).encode()).hexdigest()


@contextlib.contextmanager
def env_held(env: BuildEnv, plan: Plan, key: str) -> Iterator[int]:
    """The shared environment held for as long as the compile runs (a shared hold: builds compile side by
    side; nvcc's wheels and the headers' one time are given under the exclusive one). With a remote compile
    cache its headers have one time first (steady_env). Yields the lock's descriptor, for the compile to
    hold too (a build killed with -9 leaves it held). `key`: the environment's fingerprint."""

    steady = env.root / STEADY_MARK
    if plan.compile_cache is not None and not plan.compile_cache.unusable and read_record(steady) != key:
        steady_env(env, key)
    with locked_file(env.root.with_name(env.root.name + ".lock"), f"the build environment {env.root.name}",
                     shared=True) as fd:
        yield fd


STEADY_MARK = ".steady-times"  # the shared environment's fingerprint when its headers were last given one time


def steady_env(env: BuildEnv, key: str) -> None:
    """The env's headers given one time (wheelci.resources.container.steady: a store's entries are then
    every machine's), under the env's exclusive lock: never while another build's compile reads them."""

    with locked_file(env.root.with_name(env.root.name + ".lock"), f"the build environment {env.root.name}"):
        changed = steady_times(env.root)
        if changed:
            log.info(f"compile cache: {changed} headers of {env.root} given one time, as on every machine")
        write_text(env.root / STEADY_MARK, key)


def ccache_launchers(plan: Plan, env: BuildEnv, work_dir: Path, environ: dict[str, str], nvcc: Path | None) -> launch.Launchers:
    """ccache in front of the compilers, where it is installed (wheelci.compile.launch: every torch alike).
    The work directory is ccache's base (paths below it are hashed relative); the prefix maps still name
    it, so a rebuild hits in the same work directory (the default one stays put), not in a new one."""
    ccache = shutil.which("ccache")
    if ccache is None:
        return launch.Launchers()
    put = launch.launchers(Path(ccache), backend=plan.backend, cuda=plan.cuda is not None, cxx=environ.get("CXX"),
                           path=environ.get("PATH"), shim_dir=work_dir / "ccache-bin",
                           nvcc=None if environ.get("PYTORCH_NVCC") else nvcc,
                           torch_finds_it=torch_finds_ccache(env.torch_version))
    return launch.Launchers(environ={**ccache_variables(plan.ccache_dir, work_dir), **put.environ},
                            config=put.config)


def ccache_variables(ccache_dir: str, work_dir: Path) -> dict[str, str]:
    """ccache's settings for a compile in `work_dir`: its store, and the work directory as its base."""
    return {"CCACHE_DIR": ccache_dir, "CCACHE_BASEDIR": str(work_dir.resolve()), "CCACHE_NOHASHDIR": "true"}


@contextlib.contextmanager
def remote_cache(plan: Plan, env: BuildEnv, own: Overlay, work_dir: Path, project_dir: Path, cuda_root: Path | None,
                 environ: dict[str, str], local: launch.Launchers) -> Iterator[tuple[list[CacheReport], launch.Launchers]]:
    """The plan's remote compile cache for the compile inside the block (wheelci.compile.sccache): its server
    up, sccache in front of the compilers in place of ccache (`local`); yields what it did (a list filled
    once the block ends) and the launchers the compile uses. No remote store, or one that does not answer:
    ccache's launchers, and the list stays empty."""
    cache = plan.compile_cache
    if cache is None:
        yield [], local
        return
    binary = sccache.binary(own.python) or sccache.binary(env.python)  # the project may pin its own
    if binary is None:  # installed with the build requirements: only a broken environment lacks it
        raise Finding(f"the build environment {env.root} has no sccache (the compile cache needs it); "
                      "run again with --fresh")
    bases = sccache.base_dirs(work_dir, project_dir, env.root, cuda_root)
    with sccache.serving(cache, binary, work_dir, bases) as (server, reports):
        if server is None:
            yield reports, local
        else:
            nvcc = cuda_root / "bin" / "nvcc" if cuda_root is not None else None
            yield reports, sccache.launchers(server, backend=plan.backend, cuda=plan.cuda is not None, cxx=environ.get("CXX"),
                                             path=environ.get("PATH"), shim_dir=work_dir / "sccache-bin",
                                             nvcc=None if environ.get("PYTORCH_NVCC") else nvcc,
                                             warm_for=plan.run.warm_for)
    if reports and reports[0].used:  # one that was not used said so when it was passed over
        log.info(f"compile cache: {describe(reports[0])}")


def in_front(plan: Plan, env: BuildEnv, put: launch.Launchers, environ: dict[str, str], *, cmake: bool,
             root: Path | None, work_dir: Path) -> launch.Launchers:
    """What goes in front of the compilers, set in `environ`: the compile cache's launchers (ccache's, or
    sccache's with a remote store; the project's own variables stay, but CXX, which the one-word shim
    runs), and before them, where the plan narrows, the nvcc that gives every call the asked targets."""
    environ.update({k: v for k, v in put.environ.items() if k == "CXX" or k not in plan.run.build_env})
    if plan.narrowed and root is not None:
        return launch.narrowing(plan.arch_list, env.python, put, environ, cmake=cmake, root=root,
                                where=work_dir / "nvcc-targets")
    return put


def note_extra_files(work_dir: Path, environ: dict[str, str]) -> None:
    """ccache hashes the searched directories' digest with every compile (CCACHE_EXTRAFILES)."""
    if shutil.which("ccache"):
        extra = [environ.get("CCACHE_EXTRAFILES", ""), str(note_searched(work_dir / SEARCHED, environ))]
        environ["CCACHE_EXTRAFILES"] = os.pathsep.join(filter(None, extra))


def max_jobs() -> int:
    """Parallel compile jobs: one per core, but no more than one per 2 GiB of memory (nvcc and torch's
    headers take 1-2 GiB a job; running out of memory kills a build later and less clearly)."""
    cores = len(os.sched_getaffinity(0))
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return cores
    return max(1, min(cores, mem // (2 << 30)))


def prefix_maps(project_dir: Path, work_dir: Path, python: Path, compat: Path) -> list[str]:
    """-ffile-prefix-map flags that take this machine's paths out of the objects: the checkout, the work
    directory, the build environment (torch's headers, named by its assert macros), the interpreter's
    headers and our compat header all get fixed names, so two checkouts of one commit compile the same bytes (__FILE__, debug info).
    GCC and Clang both take the flag; nvcc passes it to its host compiler."""
    env_root = Path(python).parent.parent
    base_python = Path(python).resolve().parent.parent  # the interpreter the venv was made from: Python.h
    pairs = {Path(work_dir).resolve(): "/wheelci/work", Path(project_dir).resolve(): "/wheelci/src",
             env_root.resolve(): "/wheelci/env", Path(compat).resolve(): "/wheelci/compat",
             base_python: "/wheelci/python"}
    # the most specific first is not enough: GCC applies the last matching option, so longer paths go last
    return [f"-ffile-prefix-map={old}={new}" for old, new in sorted(pairs.items(), key=lambda p: len(str(p[0])))]


def compile_host(plan: Plan, project_dir: Path, work_dir: Path, *, env: BuildEnv | None = None,
                 files: dict[str, str] | None = None, hold_fds: tuple[int, ...] = (),
                 configure: str | None = None) -> CompileResult:
    """Build the project's wheel for `plan` on this machine; raises Finding if the build fails.

    scikit-build-core projects get CMake definitions; setuptools ones (torch.utils.cpp_extension) what that
    reads from the environment (CUDA_HOME, TORCH_CUDA_ARCH_LIST, MAX_JOBS, CFLAGS, NVCC_APPEND_FLAGS). The plan's build variables (the project's [tool.wheelci] env and --env) go last. `files`: the
    project's files as the build's snapshot saw them (the copy must be what the step records); `hold_fds`:
    the work directory's lock, held by the backend too, so a build killed with -9 keeps its tree locked
    while its compile still runs; `configure`: the digest of what a configure reads besides the project
    (workdir.configure_inputs; default: of this process's environment). A remote compile cache: remote_cache."""
    env = env or ensure_env(torch_spec(plan))

    backend = Backend(plan.backend)  # a closed set: each member's treatment below, nothing by default
    if backend in (Backend.SETUPTOOLS, Backend.PEP517):
        # setuptools builds in the source tree (build/, *.egg-info), and so may any other backend: build a
        # copy, so the project is never written to; the copy keeps its build tree, and only what changed in
        # the project is copied again (and so rebuilt)

        if files is None:
            files, _ = snapshot_sources(project_dir, work_dir)
        project_dir = sync_project(project_dir, work_dir / "src", files)
        clear_outputs(project_dir, files)
    reqs, pins, _ = _requirements_key(plan)
    own = overlay(env, work_dir, reqs, pins)  # exactly this project's build requirements
    environ, config, root = compile_environ(plan, env, own, backend, project_dir, work_dir)
    cmake = backend is Backend.SCIKIT_BUILD_CORE
    local = ccache_launchers(plan, env, work_dir, environ, root / "bin" / "nvcc" if root is not None else None)
    note_extra_files(work_dir, environ)
    keep_sound(plan, backend, project_dir, work_dir, files, configure, environ)
    before = fingerprint(env)  # the project's own code runs from here on: the probe's run too
    answers = probed(plan, own, backend, project_dir, environ, work_dir)
    dist = work_dir / "dist"
    shutil.rmtree(dist, ignore_errors=True)  # the wheel is the one this compile makes
    dist.mkdir(parents=True, exist_ok=True)
    logfile = work_dir / "compile.log"
    log.info(f"compiling {project_dir} (torch {env.torch_version}, CUDA {plan.cuda or 'none'}"
             f"{f', arch {plan.arch_list}' if plan.cuda else ''}); log: {logfile}")
    # the frontend's check of the backend's requirements, once per tree and answer (requirements_check_key)
    checked = work_dir / CHECKED
    check_key = requirements_check_key(plan, env, project_dir, configure or configure_inputs(environ))
    skip = ["--skip-dependency-check"] if checked_with(checked, check_key) else []
    question = cmakeprobe.asking(plan, work_dir, environ) if cmake else None
    said: dict[str, Any] | None = None  # what the configure answered, for the report
    start = time.monotonic()
    with env_held(env, plan, before) as env_fd, remote_cache(plan, env, own, work_dir, project_dir, root, environ,
                                                     local) as (cached, put):
        put = in_front(plan, env, put, environ, cmake=cmake, root=root, work_dir=work_dir)
        cmd = [own.python, "-m", "build", "--no-isolation", *skip, "--wheel", "-o", dist, *config, *put.config,
               *(question.config if question else []), project_dir]
        done = streamed(cmd, logfile, environ, (*hold_fds, env_fd))
        if question is not None:  # the configure answered (or stopped a CUDA build that would compile none)
            def again(extra: list[str]) -> subprocess.CompletedProcess[bytes]:
                return streamed([*cmd[:-1], *extra, cmd[-1]], logfile, environ, (*hold_fds, env_fd))
            done, said = cmake_answered(plan, question, done, again, environ, work_dir / "build")
        asked = hints.unmet_dependencies(logfile.read_text(errors="replace")) if done.returncode else []
        if asked and add_asked(own, asked, pins):  # setup_requires: what the build asks for
            log.info(f"the project asks for {', '.join(asked)} to build (its setup_requires): installed into the "
                     "build's own environment, compiling again")
            done = streamed(cmd, logfile, environ, (*hold_fds, env_fd))
    seconds = time.monotonic() - start
    if changed_by_the_build(env, before):
        log.warning(f"the build changed the shared build environment {env.root} (the project installs packages "
                    "while it builds, outside its own environment): the next build makes it again")
    if done.returncode != 0:
        log.info("the last lines of the compile log:\n" + done.stdout.decode(errors="replace"))
        why = hints.why_failed(logfile.read_text(errors="replace"), cuda=plan.cuda, stable=plan.stable is not None)
        checked.unlink(missing_ok=True)
        raise Finding(f"compile failed after {seconds:.0f} s{f'; {why}' if why else ''} (full log: {logfile})")
    write_text(checked, check_key)  # by a rename: a link planted there is replaced, never written through
    log.info(f"compiled in {seconds:.0f} s")
    wheels = sorted(dist.glob("*.whl"), key=lambda p: p.stat().st_mtime)
    build_dir = work_dir / "build"
    return CompileResult(wheels[-1], build_dir if build_dir.is_dir() else None, env, cached[0] if cached else None,
                         answers.to_json(plan) if answers else said)


def cmake_answered(plan: Plan, question: cmakeprobe.Asking, done: subprocess.CompletedProcess[bytes],
                   again: Callable[[list[str]], subprocess.CompletedProcess[bytes]], environ: dict[str, str],
                   build_dir: Path) -> tuple[subprocess.CompletedProcess[bytes], dict[str, Any] | None]:
    """What a CMake project's configure said (wheelci.compile.cmakeprobe), judged: a --cuda build whose
    configure defines no CUDA target stopped before compiling, so the one option of the project that --cuda
    makes certain is set and the build run `again`; with none, the build is refused with the options its
    cache names. Returns the build's last run and what the report keeps of the answers."""
    configured, setting = question.read(), None
    if configured is not None and plan.cuda and not plan.run.allow_no_device_code and not configured.compiles_cuda:
        setting = cmakeprobe.cuda_setting(cmakeprobe.cache_text(build_dir) or "", cmakeprobe.user_defines(environ))
        if setting is None:
            raise Finding(cmakeprobe.refusal(plan, cmakeprobe.cache_text(build_dir)))
        entry, value = setting
        log.info(f"note: the configure defines no target with CUDA sources with {cmakeprobe.shown(entry)}: the build "
                 f"sets the project's option {entry.name}={value} (--env CMAKE_ARGS=-D{entry.name}=... to choose "
                 "otherwise)")
        done = again(["-C", f"cmake.define.{entry.name}={value}"])
        configured = question.read()
        if configured is not None and not configured.compiles_cuda:
            raise Finding(cmakeprobe.refusal(plan, cmakeprobe.cache_text(build_dir)))
    if configured is None:
        return done, None
    options = [cmakeprobe.shown(e) for e in cmakeprobe.project_options(cmakeprobe.cache_text(build_dir) or "")]
    if options:
        log.info(f"note: the configure's options: {', '.join(options[:12])}"
                 f"{f' and {len(options) - 12} more' if len(options) > 12 else ''}")
    for note in cmakeprobe.notes(configured, plan):
        log.info(f"note: {note}")
    return done, {"cmake": {**configured.to_json(), "options": options,
                            "set": {setting[0].name: setting[1]} if setting else {}}}


def probed(plan: Plan, own: Overlay, backend: Backend, project_dir: Path,
           environ: dict[str, str], work_dir: Path) -> probe.Answers | None:
    """A setuptools project asked how it builds, in the compile's environment, and every point judged before
    the compile (wheelci.compile.probe): a build that cannot give a wheel stops here, in seconds."""
    if backend is not Backend.SETUPTOOLS:  # another backend (an in-tree one) runs setup.py its own way
        return None
    answers = probe.ask(own.python, project_dir, environ)
    sets = probe.switches_read(answers, plan, environ) if answers else {}
    if sets:  # a variable of a known convention the text did not show (read through a helper): set, asked again
        log.info(f"note: the project reads {', '.join(sets)}: the build sets "
                 f"{', '.join(f'{k}={v}' for k, v in sets.items())} (--env NAME=... to choose otherwise)")
        environ.update(sets)
        answers = probe.ask(own.python, project_dir, environ)
    if answers is not None and probe.wants_a_gpu(answers, plan):  # it asks for a device, and has no switch
        answered = gpu_answers(environ, work_dir, probe.gpu_capability(plan.arch_list))
        again = probe.ask(own.python, project_dir, answered)
        if again is not None and again.builds_cuda:
            asked = sorted({c.split(" -> ")[0] for c in answers.cuda if c.split(" -> ")[0] in probe.DEVICE_QUESTIONS})
            log.info(f"note: the project asks torch for a GPU ({', '.join(asked)}) and builds CUDA only when it sees "
                     f"one: this machine has none, so the build answers as a compute capability "
                     f"{answered[variables.GPU_ANSWER]} device would (the arch list's newest); nothing runs on it")
            environ.update(answered)
            answers = again
    for note in probe.checked(answers, plan):
        if note.startswith("warning: "):
            log.warning(note.removeprefix("warning: "))
        else:
            log.info(f"note: {note}")
    if answers is not None and answers.install_requires:  # what verify installs, asked of pip now
        found = runtime.check(answers.install_requires, plan.python[0], plan.manylinux, plan.archs[0])
        if found.refusal:
            raise Finding(f"the project cannot be installed where its wheel goes: {found.refusal}")
        if found.warning:
            log.warning(found.warning)
    return answers


def gpu_answers(environ: dict[str, str], work_dir: Path, capability: str) -> dict[str, str]:
    """The compile's environment with torch.cuda answering as one device of `capability` would
    (resources/gpu_answer: a sitecustomize first on PYTHONPATH)."""
    where = work_dir / "gpu-answer"
    where.mkdir(parents=True, exist_ok=True)
    source = resource_files("wheelci.resources") / "gpu_answer" / "sitecustomize.py"
    write_text(where / "sitecustomize.py", source.read_text())
    path = os.pathsep.join(p for p in (str(where), environ.get("PYTHONPATH", "")) if p)
    return {**environ, "PYTHONPATH": path, variables.GPU_ANSWER: capability}


def streamed(cmd: list[object], logfile: Path, environ: dict[str, str], fds: tuple[int, ...]) -> subprocess.CompletedProcess[bytes]:
    """One run of the build frontend, its output into the log (made afresh) and its progress shown."""
    tracker = progress.Tracker()  # the build tool's own count: N of M files, about T left
    with fresh_file(logfile) as out, log.Ticker("compiling") as ticker:
        return proc.stream(cmd, what="compiling", log=out, check=False, show=False, env=environ, pass_fds=fds,
                           on_line=lambda line: ticker.update(tracker if tracker.feed(line) else None))


def compile_environ(plan: Plan, env: BuildEnv, own: Overlay, backend: Backend, project_dir: Path,
                    work_dir: Path) -> tuple[dict[str, str], list[str], Path | None]:
    """What the compile runs with: its variables (the toolchain's flags, the CUDA root or a CPU build's view
    of none, the build's environment first on PATH, the plan's build variables last), the backend's config
    settings, and a CUDA build's toolkit root."""
    root: Path | None = None  # a CUDA build's toolkit
    environ = {**os.environ, "MAX_JOBS": os.environ.get("MAX_JOBS") or str(max_jobs())}
    if plan.run.source_date_epoch is not None:
        environ["SOURCE_DATE_EPOCH"] = str(plan.run.source_date_epoch)
    compat = staged_compat(work_dir)
    maps = prefix_maps(project_dir, work_dir, env.python, compat)
    host_flags = f"-isystem {compat} -include {compat / 'glibc_compat.h'} " + " ".join(maps)
    cuda_flags = ["-isystem", str(compat), f"-Xcompiler=-include,{compat / 'glibc_compat.h'}",
                  *(f"-Xcompiler={m}" for m in maps)]
    environ["CI_STABLE_ABI"] = ""  # the mode is the plan's, never the caller's shell's
    if plan.stable is not None:  # TORCH_TARGET_VERSION: torch's headers declare only what the target has
        flags = plan.stable_flags
        host_flags += " " + flags["CXXFLAGS"]
        cuda_flags += flags.get("NVCC_APPEND_FLAGS", "").split()
        environ["CI_STABLE_ABI"] = flags["CI_STABLE_ABI"]
    cmake = backend is Backend.SCIKIT_BUILD_CORE
    config = ["-C", f"build-dir={work_dir / 'build'}", "-C", f"cmake.define.CMAKE_CXX_FLAGS={host_flags}"] if cmake else []
    if backend is Backend.MESON_PYTHON:  # meson builds out of tree, in the directory it is given
        config = ["-C", f"build-dir={work_dir / 'build'}"]
    if not cmake:  # C and C++: setuptools compiles .cpp with CXXFLAGS, cpp_extension's ninja path with CFLAGS
        for var in ("CFLAGS", "CXXFLAGS"):
            environ[var] = f"{environ.get(var, '')} {host_flags}".strip()
    if plan.cuda is not None:
        root = cuda_toolkit(plan, env, environ, config, cuda_flags, cmake=cmake)
    if plan.cuda is None:  # a CPU build sees no CUDA toolkit (ci.plan.CpuView)
        view = plan.cpu_view
        assert view is not None, "a host CPU plan carries its toolchain view"
        # what the plan saw, and whatever this PATH holds now (a plan made for a machine stated, not probed,
        # names none): a CPU compile never finds an nvcc
        hidden = list(dict.fromkeys([*view.nvcc_dirs, *nvcc_dirs(environ)]))
        environ = cpu_environ(environ, hidden, work_dir / "cpu-path")
        config += [arg for define in view.cmake_defines for arg in ("-C", f"cmake.define.{define}")]
        log.info(f"toolchain: {view.describe()}")
    # the build env's own tools first: without ninja on PATH cpp_extension compiles one file at a time,
    # and through setuptools' C++ flags rather than its C ones
    environ["PATH"] = os.pathsep.join([str(own.python.parent), str(env.python.parent), environ.get("PATH", "")])
    environ["PYTHONUNBUFFERED"] = "1"  # the backend's own lines reach the log when said, among the compiler's
    environ.update(plan.run.build_env)
    return environ, config, root


def staged_compat(work_dir: Path) -> Path:
    """The force-included headers, copied into the work directory: the compilers' arguments and the
    preprocessed sources name them, and a compile cache shared by machines hits only where these paths are
    the same, which the work directory's is and the tool's own install (a venv per CI job) need not be. A
    copy that is already current is left as it is (its mtime too: ninja would compile everything again)."""
    return stage_files(GLIBC_COMPAT, work_dir, "compat")  # a header no longer shipped leaves the include path


def cuda_toolkit(plan: Plan, env: BuildEnv, environ: dict[str, str], config: list[str], cuda_flags: list[str], *,
                 cmake: bool) -> Path:
    """The CUDA root a host build compiles with (the host's nvcc or NVIDIA's wheels), put where the backend
    reads it: CMake definitions (into `config`), or cpp_extension's variables (into `environ`)."""
    assert plan.cuda is not None  # called for a CUDA plan only (compile_host)
    nvcc = find_nvcc(env, plan.cuda, toolkit_wheels(plan.cuda), source=plan.run.nvcc_source)
    root = assemble_cuda_root(env, nvcc)
    environ.update(cuda_build_environ(root, plan.arch_list))
    if cmake:
        config += ["-C", f"cmake.define.CUDA_TOOLKIT_ROOT_DIR={root}"]
        config += ["-C", f"cmake.define.CMAKE_CUDA_FLAGS={' '.join([*plan.nvcc_flags, *cuda_flags])}"]
    else:
        environ["NVCC_APPEND_FLAGS"] = " ".join([*plan.nvcc_flags, *cuda_flags])
    return root


def checked_with(record: Path, key: str) -> bool:
    """Whether this tree's last compile passed the requirements check with this answer (a link planted
    there, or a file of another size, is not read)."""
    if record.is_file() and record.stat().st_size != len(key):
        return False
    return read_record(record) == key


def requirements_check_key(plan: Plan, env: BuildEnv, project_dir: Path, configure: str) -> str:
    """What `python -m build`'s check of the backend's build requirements answers from: the environment and
    the set installed into it, the files a backend reads its requirements from, the build's own variables and
    what a configure reads (`configure`: a setup.py may read them). A kept tree whose last compile passed the
    check with the same answer skips it: for setuptools the check runs setup.py once more, which imports
    torch (seconds of every rebuild)."""
    _, _, installed = _requirements_key(plan)
    given = sorted(plan.run.build_env.items())
    h = hashlib.sha256(json.dumps([str(env.root), env.torch_version, installed, given, configure]).encode())
    for name in ("pyproject.toml", "setup.py", "setup.cfg", *in_tree_backend(project_dir)):
        path = project_dir / name
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"-") + b"\0")
    return h.hexdigest()


def in_tree_backend(project_dir: Path) -> list[str]:
    """The files of an in-tree backend ([build-system] backend-path, inside the project; no link followed,
    no bytecode; of the project's top, only the files there and the build-backend's package), relative and
    sorted: its get_requires_for_build_wheel may answer from them."""

    try:
        table = toml.loads((project_dir / "pyproject.toml").read_text()).get("build-system", {})
    except (OSError, ValueError, UnicodeDecodeError):
        return []
    paths = table.get("backend-path", []) if isinstance(table, dict) else []
    backend = str(table.get("build-backend", "") if isinstance(table, dict) else "").split(":")[0].split(".")[0]
    top = project_dir.resolve()
    found: set[str] = set()
    for entry in paths if isinstance(paths, list) else []:
        where = (project_dir / str(entry)).resolve()
        if not where.is_relative_to(top) or not where.is_dir():
            continue
        for base, dirs, files in os.walk(where):  # links to directories are not walked into
            # the project's own top (backend-path "."): its files and the backend's package, not every
            # source below it
            if Path(base) == top:
                dirs[:] = [d for d in dirs if d == backend] if where == top else dirs
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            found.update(str((Path(base) / f).relative_to(top)) for f in files
                         if not (Path(base) / f).is_symlink() and not f.endswith(".pyc"))
    return sorted(found)


def keep_sound(plan: Plan, backend: Backend, project_dir: Path, work_dir: Path, files: dict[str, str] | None,
               configure: str | None, environ: dict[str, str]) -> None:
    """What a kept tree answers from its last compile, dropped where its inputs changed (by backend)."""

    if backend in (Backend.SCIKIT_BUILD_CORE, Backend.MESON_PYTHON):
        keep_tree_sound(plan, project_dir, work_dir, files, configure, environ, meson=backend is Backend.MESON_PYTHON)
    else:
        keep_objects_sound(plan, work_dir, configure, environ)


def keep_objects_sound(plan: Plan, work_dir: Path, configure: str | None, environ: dict[str, str]) -> None:
    """A kept setuptools tree: when what its compile searches changed (CPATH, a searched directory's
    headers), every object is compiled again; ninja, which compares mtimes only, would link the old ones."""

    searched = configure or configure_inputs(environ)
    inputs = hashlib.sha256(json.dumps([searched, compile_view(plan)], sort_keys=True, default=str).encode())
    if recompile_if_changed(sorted(work_dir.glob("src/build/temp*")), work_dir / COMPILED_WITH, inputs.hexdigest()):
        log.info("what the compile searches changed since the kept tree's last compile: compiling every object")


def keep_tree_sound(plan: Plan, project_dir: Path, work_dir: Path, files: dict[str, str] | None, configure: str | None,
                    environ: dict[str, str], *, meson: bool) -> None:
    """A kept CMake or meson tree answers from what its last configure found: another configure input (a
    variable, what a searched directory holds, the compile's part of the Plan) configures it again, and a
    project change ninja cannot see compiles every object again."""

    configure = configure or configure_inputs(environ)
    inputs = hashlib.sha256(json.dumps([configure, compile_view(plan)], sort_keys=True, default=str).encode())
    if reconfigure_if_changed(work_dir / "build", work_dir / CONFIGURED, inputs.hexdigest(), meson=meson):
        log.info("configure inputs changed since the kept tree was configured: configuring it again")
    if files is None:
        files, _ = snapshot_sources(project_dir, work_dir)
    if forget_unseen_changes(project_dir, work_dir / "build", work_dir / BUILT, files):
        log.info("a project file changed without a newer mtime (a link retargeted?): compiling every object again")


def dependencies(env: BuildEnv, work_dir: Path) -> list[Path]:
    """The files outside the project a compile read, for the next build to check: every header and source
    ninja recorded (`ninja -t deps`, in setuptools' and CMake's build trees) that is not in the work
    directory's own copy, and the compilers on PATH. Without ninja (make), only the compilers."""
    ninja = env.python.parent / "ninja"
    found: set[Path] = set()
    work = work_dir.resolve()
    for build_ninja in sorted([*work.glob("src/build/temp*/build.ninja"), *work.glob("build/build.ninja")]):
        r = proc.run([ninja if ninja.exists() else "ninja", "-C", build_ninja.parent, "-t", "deps"],
                     what="reading the compile's dependencies", check=False, capture_output=True, text=True)
        for line in r.stdout.splitlines() if r.returncode == 0 else []:
            if line.startswith("    "):
                dep = (build_ninja.parent / line.strip()).resolve()
                if not dep.is_relative_to(work):
                    found.add(dep)
    found.update(Path(p).resolve() for tool in ("cc", "c++", "gcc", "g++", "nvcc") if (p := sh.which(tool)))
    return sorted(p for p in found if p.is_file())
