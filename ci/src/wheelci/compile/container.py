"""The container engine: cibuildwheel drives a manylinux CUDA image with the plan's configuration.

Everything cibuildwheel needs is in `plan.environment` (CIBW_* variables), so what a dry run prints is
exactly what runs. Its output streams to stderr (stdout stays free for --json). Wheels land in a
private temp directory inside the wheel dir and are renamed into place only when cibuildwheel
succeeds, so a failed or interrupted build leaves nothing half-written behind. Check, verify and
report then run on the host, as after a host build (ci.build chains them).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from wheelci import engine as eng, image
from wheelci.archs import emulation_hint
from wheelci.cibw import image_variable
from wheelci.compile import containercache, hints, progress
from wheelci.compile.sccache import CacheReport
from wheelci.compile.workdir import stage_project
from wheelci.config import constraints
from wheelci.errors import CiError, Finding
from wheelci.plan import AUTO_NEEDS_CONTAINER, Plan
from wheelci.util import log, proc
from wheelci.util.atomic import fresh_file
from wheelci.util.owned import output_dir


def require_engine(plan: Plan) -> None:
    """One clear line when the plan's container engine is not there (before anything runs)."""
    if not plan.engine.container:
        raise CiError(f"the container engine cannot run a {plan.engine} plan")
    why = eng.PROBES[plan.engine]()
    if why is None:
        return
    if plan.engine_requested == "auto":
        why_host = eng.host_cannot_build_cuda(plan.cuda)
        raise CiError(AUTO_NEEDS_CONTAINER.format(cuda=plan.cuda, why=why_host or "see --engine host"))
    raise CiError(f"--engine {plan.engine}: {why}; start it, or use --engine host or auto")


PULL_TIMEOUT = 1800  # a CUDA image is several GB


def ensure_given_image(plan: Plan) -> None:
    """An --image must be in the engine's store or pullable: say so before cibuildwheel starts."""

    assert plan.image is not None, "a plan whose image origin is 'given' names its image"
    if image.exists(plan.image, plan.engine):
        return
    try:
        r = proc.run([plan.engine, "pull", plan.image], what=f"pulling {plan.image}", check=False,
                     capture_output=True, text=True, timeout=PULL_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise CiError(f"--image {plan.image}: not in {plan.engine}'s store, and pulling it took over "
                      f"{PULL_TIMEOUT} s") from None
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise CiError(f"--image {plan.image}: not in {plan.engine}'s store, and `{plan.engine} pull` failed: {why}")


def refuse_unreachable(plan: Plan) -> None:
    """A build for an architecture this machine cannot run stops before anything is made."""
    unreachable = [a for a in plan.archs if plan.reach.get(a) == "unavailable"]
    if unreachable:
        raise CiError(f"--archs {','.join(unreachable)}: this machine does not run {unreachable[0]} code; "
                      + emulation_hint(unreachable[0]))


def ensure_image(plan: Plan) -> None:
    """Our docker/ images are built on first use (ci.image, with the plan's engine); public ones
    cibuildwheel pulls; a given one must exist or pull."""
    if plan.image_origin == "given":
        return ensure_given_image(plan)
    if plan.cuda is None:
        return

    for arch in plan.archs:
        if arch == "x86_64" and plan.image_origin != "ours":
            continue  # a public image: cibuildwheel pulls it
        ref = plan.environment.get(image_variable(arch), "")
        if ref != image.spec(plan.cuda, plan.manylinux if arch == "x86_64" else None, arch=arch).tag:
            continue  # a registry copy (WHEELCI_IMAGE_REGISTRY): cibuildwheel pulls it
        if not image.exists(ref, plan.engine):
            log.info(f"{ref} is not built yet; building it from docker/")
            image.build(plan.cuda, manylinux=plan.manylinux, engine=plan.engine, arch=arch)


def cibuildwheel_command(project_dir: Path, output_dir: Path) -> list[str]:
    return [sys.executable, "-m", "cibuildwheel", "--platform", "linux", "--output-dir", str(output_dir),
            str(project_dir)]


def compile(plan: Plan, wheel_dir: Path, project_dir: Path, logfile: Path | None = None,
            files: dict[str, str] | None = None, cache_reports: list[CacheReport] | None = None) -> list[Path]:
    """Build and repair the plan's wheels in containers; return the repaired wheels in wheel_dir.

    cibuildwheel's output goes to stderr and to logfile (default: next to wheel_dir); on failure the
    error names the log and the log's last lines are printed, and wheel_dir gets nothing. With a remote
    compile cache (wheelci.compile.containercache), `cache_reports` gets what it did, and the engine gets
    its --env-file and the mount its counts come back through (the run's port and work directory: not in
    the plan's variables)."""
    project_dir = Path(project_dir).resolve()
    if not (project_dir / "pyproject.toml").is_file():
        raise CiError(f"no pyproject.toml in {project_dir}")
    require_engine(plan)
    refuse_unreachable(plan)
    ensure_image(plan)
    constraints.ensure_file(plan.tool_constraints)  # mounted at CONTAINER_CONSTRAINTS by the plan
    Path(plan.ccache_dir).mkdir(parents=True, exist_ok=True)
    wheel_dir = Path(wheel_dir)
    # cibuildwheel's lines reach the log when said; the engine's client takes the store's credentials from
    # here, which the --env-file names without their values (wheelci.compile.containercache)
    env = {**os.environ, **plan.environment, "PYTHONUNBUFFERED": "1", **containercache.client_environ(plan)}
    logfile = Path(logfile or wheel_dir.parent / "cibuildwheel.log").resolve()
    # staged beside the outputs (cibuildwheel writes there), committed together (wheelci.util.owned)
    with output_dir(wheel_dir, "the container's wheel directory") as out, out.staging() as staging:
        # wheel_dir is in the build tree, which only builds write: the wheels there are an earlier build's
        # (one from before the manifest, too), replaced as the manifest's are
        out.adopt(p.name for p in wheel_dir.glob("*.whl") if p.is_file() and not p.is_symlink())
        with tempfile.TemporaryDirectory(prefix="cibw-project-") as tmp:
            source = stage_project(project_dir, Path(tmp), files)  # the build's snapshot, when it has one
            # its output streams to stderr; logs and CI also get a line a minute through a silent compile
            tracker = progress.Tracker()  # the build tool's own count: N of M files, about T left
            with fresh_file(logfile) as logged, log.Ticker("building in a container", live=False) as ticker, \
                    eng.containers_of_this_run(plan.engine) as label, \
                    containercache.serving(plan, logfile.parent) as (cache_args, reports):
                # a stopped build stops its container too (the label)
                added = shlex.join([label, *cache_args])
                env["CIBW_CONTAINER_ENGINE"] = eng.with_label(env.get("CIBW_CONTAINER_ENGINE", str(plan.engine)), added)
                done = proc.stream(cibuildwheel_command(source, staging), what="building in a container", log=logged,
                                   check=False, cwd=source, env=env,
                                   on_line=lambda line: ticker.update(tracker if tracker.feed(line) else None))
        if cache_reports is not None:
            cache_reports.extend(reports)
        if done.returncode != 0:
            tail = done.stdout.decode(errors="replace")
            log.info(f"the last lines of cibuildwheel's log:\n{tail}")
            why = hints.why_failed(logfile.read_text(errors="replace"), cuda=plan.cuda, stable=plan.stable is not None)
            raise Finding(f"cibuildwheel failed with exit status {done.returncode} in {plan.engine} "
                          f"(image {plan.image or plan.manylinux}){f'; {why}' if why else ''}; full log: {logfile}")
        built = sorted(staging.glob("*.whl"))
        if not built:
            raise Finding("cibuildwheel succeeded but produced no wheel")
        return out.commit(built, "container", replace_group=True)
