"""What a container build asks of cibuildwheel: its CIBW_* variables, the engine's create arguments and
the mounts, in the container's own paths.

The Plan holds the result (a host build shows what a container one would); wheelci.compile.container
hands it to cibuildwheel. Kept apart from the plan so that the container's layout is read in one place.
make_plan calls container_environment once, on the finished plan's fields (ContainerInputs): nothing
patches the shell text after, and what a reader needs of it (the torch index, the cuDNN pin) is a field
of the Plan.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from wheelci.config.compilecache import cache_goes
from wheelci.config.constraints import BUILD_TOOLS, CACHE_TOOLS
from wheelci.engine import CA_VARIABLES, Engine
from wheelci.wheel.requirements import requirement_name

CONTAINER_CCACHE = "/ccache"
CONTAINER_CXX = "/usr/local/lib/wheelci-ccache/c++"  # the cache, then c++: written by ensure_ccache.sh DIR
# the one-word cache the compilers go through where a remote store is named: ccache (ensure_ccache.sh DIR), turned to
# sccache by sccache_server.py when the store answers
CONTAINER_LAUNCHER = "/usr/local/lib/wheelci-ccache/cache"
# nvcc's: ccache too, turned to resources/container/nvcc_launch.py in front of sccache with the launcher above
CONTAINER_NVCC_LAUNCHER = "/usr/local/lib/wheelci-ccache/nvcc-cache"
CONTAINER_COMPILE_CACHE = "/ci/compile-cache"  # mounted from the work directory: sccache's counts, its log, why not
CONTAINER_PROJECT = "/project"  # where cibuildwheel copies the project: sccache's base directory there
CONTAINER_CUDA_HOME = "/usr/local/cuda"
CONTAINER_TOOL = "/opt/cuda-wheel-ci"  # inside the container: where we mount this package read-only (ci.repair runs from it)
CONTAINER_SCRIPTS = f"{CONTAINER_TOOL}/wheelci/resources/container"  # wheelci/resources/container/*.sh, mounted
CONTAINER_NARROW = f"{CONTAINER_TOOL}/wheelci/resources/nvcc_targets.py"  # --arch-list's nvcc, mounted with the rest
CONTAINER_NARROW_ROOT = "/usr/local/lib/wheelci-nvcc"  # a CUDA root whose nvcc narrows (container/narrowing.sh)
REPAIR_COMMAND = f"PYTHONPATH={CONTAINER_TOOL} python -m wheelci.repair -w {{dest_dir}} {{wheel}}"
SCCACHE_SERVER = f"python {CONTAINER_SCRIPTS}/sccache_server.py {{}} {CONTAINER_COMPILE_CACHE} {CONTAINER_LAUNCHER}"


def sccache_server(action: str) -> str:
    """The container's side of a remote compile cache (resources/container/sccache_server.py): `start` after
    before-build's installs, `stop` after each wheel's repair (its counts into the mounted directory)."""
    return SCCACHE_SERVER.format(action)


def repair_command(excludes: list[str], stable_abi: str | None = None) -> str:
    """cibuildwheel's repair command: ci.repair with the project's excludes (and the stable-ABI
    target), as the host build repairs (cibuildwheel substitutes only its own {wheel} and {dest_dir}
    fields, then a shell runs it)."""
    stable = f" --stable-abi {shlex.quote(stable_abi)}" if stable_abi else ""
    return REPAIR_COMMAND + stable + "".join(f" --exclude {shlex.quote(p)}" for p in excludes)
CONTAINER_CA = "/etc/ci/host-ca.pem"
CONTAINER_FIND_LINKS = "/ci/find-links"
CONTAINER_CONSTRAINTS = "/ci/build-constraints.txt"
# Where the host's trusted CA bundle is named: TLS-intercepting networks (corporate proxies, this kind of CI)
# re-sign outbound TLS, and pip in the container fails CERTIFICATE_VERIFY_FAILED without the same bundle.
# Podman sets rlimits by default that a host without CAP_SYS_RESOURCE (containerised CI runners) refuses.


def build_installs(build_requires: list[str], compile_cache: bool = False) -> list[str]:
    """What a build environment gets next to torch: the project's build requirements as written (torch
    aside: the plan's torch is installed first), then our tools (ci.config.constraints.BUILD_TOOLS: the
    `build --no-isolation` build and ci.repair use that environment; pip merges a tool the project names too),
    and sccache where a remote compile cache is configured (CACHE_TOOLS)."""

    tools = [*BUILD_TOOLS, *(CACHE_TOOLS if compile_cache else ())]
    return [req.strip() for req in build_requires if requirement_name(req) != "torch"] + tools


def before_build(build_requires: list[str], torch_req: str, index_url: str | None, cudnn: str | None,
                 compile_cache: bool = False) -> str:
    """Install the pinned torch from its index first, then cuDNN, the project's build requirements and
    our tools, with our tool versions as constraints (the mounted file); with a remote compile cache, sccache
    among them, its server started last.

    index_url None: pip's own sources in the container (PyPI, and the mounted find-links directory)."""
    torch_cmd = ["pip", "install", torch_req] + (["--index-url", index_url] if index_url else [])
    rest = build_installs(build_requires, compile_cache) + ([cudnn] if cudnn else [])
    cmds = [torch_cmd, ["pip", "install", "-c", CONTAINER_CONSTRAINTS, *rest]]
    return " && ".join([*(shlex.join(c) for c in cmds), *([sccache_server("start")] if compile_cache else [])])


def cibw_quote(v: str) -> str:
    """Values naming $VARS are double-quoted so they expand there; the rest are single-quoted, always:
    cibuildwheel's parser refuses a bare `=` in a value (SKBUILD_CMAKE_DEFINE=BUILD_RUNNER=ON)."""
    if "$" in v or "'" in v:  # its parser joins no quoted pieces: one double-quoted word
        v = v.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
        return '"' + v + '"'
    return "'" + v + "'"


def cibw_environment(values: dict[str, str]) -> str:
    """cibuildwheel's `environment` syntax: NAME=value pairs, evaluated in the container."""
    return " ".join(f"{k}={cibw_quote(v)}" for k, v in values.items())


def container_options(engine: Engine, find_links: Path | None, tools: Path, ccache: Path,
                      ca: str | None) -> tuple[list[str], dict[str, str]]:
    """The engine's create arguments and the variables set inside: host network, the ccache volume, the
    tool constraints, the host's CA bundle and the find-links directory (all read-only), Podman's rlimits."""
    create = ["--network=host", f"--volume={ccache}:{CONTAINER_CCACHE}",
              f"--volume={Path(__file__).resolve().parent}:{CONTAINER_TOOL}/wheelci:ro",
              f"--volume={tools}:{CONTAINER_CONSTRAINTS}:ro"]
    inner: dict[str, str] = {}
    if ca is not None:
        create.append(f"--volume={Path(ca).resolve()}:{CONTAINER_CA}:ro")
        inner.update({v: CONTAINER_CA for v in CA_VARIABLES})
    if find_links is not None:
        create.append(f"--volume={find_links}:{CONTAINER_FIND_LINKS}:ro")
        inner["PIP_FIND_LINKS"] = CONTAINER_FIND_LINKS
    return [*create, *engine.create_args], inner


def with_stop(repair: str, compile_cache: bool) -> str:
    """The repair command, then (with a remote compile cache) the wheel's counts written and sccache's server
    stopped: cibuildwheel has no step after the last wheel, and the next wheel's before-build starts it again."""
    return f"{repair} && {sccache_server('stop')}" if compile_cache else repair


def image_variable(machine: str) -> str:
    """cibuildwheel's variable naming the manylinux image of one architecture."""
    return f"CIBW_MANYLINUX_{machine.upper()}_IMAGE"


def environment(*, engine: Engine, images: dict[str, str], identifiers: list[str], before_build: str, cuda: str | None,
                arch_list: str, nvcc_flags: list[str], tools: Path, ccache: Path, ca: str | None,
                gcc_max: int | None = None, find_links: Path | None = None, backend: str = "setuptools",
                torch_finds_ccache: bool = True, compile_cache: bool = False, narrow: bool = False) -> dict[str, str]:
    """The CIBW_* variables a container build sets (a host build shows what a container one would).
    `images`: the build image of each machine architecture built (cibuildwheel's CIBW_ARCHS); `backend`: the
    project's build backend and `torch_finds_ccache` (the torch built against puts ccache in front of its
    compilers itself) say how ccache goes in front of the compilers (wheelci.compile.launch). With a remote
    `compile_cache` they go through CONTAINER_LAUNCHER, ccache or sccache as the store answers (as on the host:
    torch's own ccache would put sccache behind it). The store's variables are not here: cibuildwheel prints these;
    they go in through the engine's --env-file (wheelci.compile.containercache). `narrow`: every nvcc call goes
    through resources/nvcc_targets.py first, in front of the cache (which keys the narrowed call), as on the host."""
    create, extra = container_options(engine, find_links, tools, ccache, ca)
    # The project is copied to /project in every build, so no CCACHE_BASEDIR: it would make the compiler's
    # paths relative, and the wheel differ from one built without ccache. pip does not byte-compile the
    # throwaway build environment (three quarters of installing torch; under QEMU, minutes): the build
    # imports a part of it. PIP_COMPILE=false, as PIP_NO_COMPILE=1 means compile.
    inner = {"CCACHE_DIR": CONTAINER_CCACHE, "CCACHE_NOHASHDIR": "true", "PIP_COMPILE": "false"}
    how = cache_goes(backend, torch_finds_ccache and not compile_cache)
    launcher = CONTAINER_LAUNCHER if compile_cache else "ccache"
    nvcc_launcher = CONTAINER_NVCC_LAUNCHER if compile_cache else "ccache"
    # ensure_ccache.sh writes the launcher and the CXX script into the directory it is given
    script = f" {shlex.quote(str(PurePosixPath(CONTAINER_CXX).parent))}" if how == "cxx" or compile_cache else ""
    # the build's Python runs the narrowing (stdlib only); the arch list's `;` would split CMake's list
    front = ["python", "-I", "-S", CONTAINER_NARROW, arch_list.replace(";", ","), "--"] if cuda and narrow else []
    if how == "cmake":
        inner |= {f"CMAKE_{lang}_COMPILER_LAUNCHER": launcher for lang in ("C", "CXX")}
        if cuda:
            inner["CMAKE_CUDA_COMPILER_LAUNCHER"] = ";".join([*front, nvcc_launcher])
    elif how == "cxx":
        inner |= {"CXX": CONTAINER_CXX, "TORCH_NO_COMPILER_WRAPPER": "1"}
        if cuda:
            inner["PYTORCH_NVCC"] = shlex.join([*front, nvcc_launcher, f"{CONTAINER_CUDA_HOME}/bin/nvcc"])
    elif front and backend != "meson-python":  # torch's own wrapper skips a PYTORCH_NVCC: ccache goes here
        inner["PYTORCH_NVCC"] = shlex.join([*front, nvcc_launcher, f"{CONTAINER_CUDA_HOME}/bin/nvcc"])
    inner |= extra
    before_all = [f"sh {CONTAINER_SCRIPTS}/ensure_ccache.sh{script}"]
    home = CONTAINER_CUDA_HOME
    if front and how != "cmake":  # cpp_extension's one-file path runs CUDA_HOME's nvcc: one that narrows
        home = CONTAINER_NARROW_ROOT
        view = [CONTAINER_NARROW_ROOT, front[4], *([nvcc_launcher] if how == "cxx" else [])]
        before_all.append(f"sh {CONTAINER_SCRIPTS}/narrowing.sh {shlex.join(view)}")
    if cuda:
        inner = {"CUDA_HOME": home, "PATH": f"{home}/bin:$PATH",
                 "TORCH_CUDA_ARCH_LIST": arch_list, "CUDAFLAGS": " ".join(nvcc_flags), **inner}
        before_all[:0] = [f"sh {CONTAINER_SCRIPTS}/check_image.sh {shlex.quote(cuda)} {gcc_max}"]
    env = {
        "CIBW_BUILD": " ".join(identifiers),
        "CIBW_ARCHS_LINUX": " ".join(images),
        **{image_variable(machine): image for machine, image in images.items()},
        "CIBW_BEFORE_ALL_LINUX": " && ".join(before_all),
        "CIBW_BEFORE_BUILD_LINUX": before_build,
        "CIBW_ENVIRONMENT_LINUX": cibw_environment(inner),
        # torch must be the one before-build pinned, in any project: no isolated build env
        "CIBW_BUILD_FRONTEND": "build; args: --no-isolation",
        "CIBW_REPAIR_WHEEL_COMMAND_LINUX": with_stop(REPAIR_COMMAND, compile_cache),
        "CIBW_BUILD_VERBOSITY": "1",
    }
    if engine.container:
        env["CIBW_CONTAINER_ENGINE"] = f"{engine}; create_args: {shlex.join(create)}"
    return env


@dataclass(frozen=True)
class ContainerInputs:
    """What of a finished Plan (and the machine it was made on) the container build reads: the structured
    fields container_environment turns into cibuildwheel's variables, once."""

    engine: Engine
    images: dict[str, str]  # machine architecture -> its build image (or a manylinux policy: cibuildwheel's pin)
    identifiers: list[str]
    torch_requirement: str  # torch==X, what before-build pins
    torch_index: str | None  # where the container's pip gets torch; None: its own sources (and find-links)
    cudnn: str | None
    build_requires: list[str]
    cuda: str | None
    arch_list: str
    nvcc_flags: list[str]
    tools: Path  # our tool constraints, mounted
    ccache: Path
    ca: str | None = None
    gcc_max: int | None = None
    find_links: Path | None = None
    excludes: list[str] = field(default_factory=list)
    stable_abi: str | None = None  # the stable-ABI target: its flags extend the image's
    stable_flags: dict[str, str] = field(default_factory=dict)
    build_env: dict[str, str] = field(default_factory=dict)  # the project's variables, last
    backend: str = "setuptools"  # the project's build backend (how ccache goes in front of its compilers)
    torch_finds_ccache: bool = True  # the torch built against puts ccache in front of its compilers itself
    compile_cache: bool = False  # a remote compile cache is named: sccache in the container (its store: --env-file)
    narrow: bool = False  # --arch-list replaces the project's own device targets (plan.narrowed)


def container_environment(c: ContainerInputs) -> dict[str, str]:
    """cibuildwheel's variables for a container build, from the plan's fields: the base environment, the
    stable-ABI flags after what the image sets (their values extend theirs), the project's build variables
    last; the repair command with the project's excludes."""
    env = environment(engine=c.engine, images=c.images, identifiers=c.identifiers,
                      before_build=before_build(c.build_requires, c.torch_requirement, c.torch_index, c.cudnn,
                                                c.compile_cache),
                      cuda=c.cuda, arch_list=c.arch_list, nvcc_flags=c.nvcc_flags, tools=c.tools, ccache=c.ccache,
                      ca=c.ca, gcc_max=c.gcc_max, find_links=c.find_links, backend=c.backend,
                      torch_finds_ccache=c.torch_finds_ccache, compile_cache=c.compile_cache, narrow=c.narrow)
    added = {k: (v if k == "CI_STABLE_ABI" else f"${k} {v}") for k, v in c.stable_flags.items()}
    words = [env["CIBW_ENVIRONMENT_LINUX"], *([cibw_environment(added)] if added else []),
             *([cibw_environment(c.build_env)] if c.build_env else [])]
    env["CIBW_ENVIRONMENT_LINUX"] = " ".join(words)
    if c.excludes or c.stable_abi:
        env["CIBW_REPAIR_WHEEL_COMMAND_LINUX"] = with_stop(repair_command(list(c.excludes), c.stable_abi),
                                                           c.compile_cache)
    return env
