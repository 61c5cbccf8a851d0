"""The tool's own environment variables (those not an option of `build` or `plan`, which
wheelci.config.options declares), all under the one prefix WHEELCI_.

Each variable that had another name keeps being read under it: read() takes the new name first, then the
old one, silently; the CLI says once per run which old names it found (deprecations), so a library call
never prints. Variables the build hands to the project (CI_STABLE_ABI, CI_BUILD_DIR) and the glibc
compat header's macros (CI_GLIBC_*) keep their names: the project's build and tests read them.
Standard library only: wheelci.util.log reads WHEELCI_VERBOSE when it is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Variable:
    """A tool-wide environment variable; `old`: the name it had, still read."""

    name: str
    help: str
    old: str | None = None


TORCH_INDEX = "WHEELCI_TORCH_INDEX"
CACHE_DIR = "WHEELCI_CACHE_DIR"
CACHE_MAX_SIZE = "WHEELCI_CACHE_MAX_SIZE"
VERBOSE = "WHEELCI_VERBOSE"
HEARTBEAT = "WHEELCI_HEARTBEAT"
IMAGE_REGISTRY = "WHEELCI_IMAGE_REGISTRY"
TOOL_SOURCE = "WHEELCI_TOOL_SOURCE"
SCCACHE_TIMEOUT = "WHEELCI_SCCACHE_TIMEOUT"
SITE_PACKAGES = "WHEELCI_SITE_PACKAGES"
GPU_ANSWER = "WHEELCI_GPU_ANSWER"

VARIABLES = (
    Variable(TORCH_INDEX, "the index a torch release the matrix does not list is read from, when "
             "`--torch-index-url` is not given (default PyPI)"),
    Variable(CACHE_DIR, "the cache directory: build environments, downloaded wheels, ccache (default "
             "`$XDG_CACHE_HOME/cuda-wheel-ci`, else `~/.cache/cuda-wheel-ci`)", old="CUDA_WHEEL_CI_CACHE"),
    Variable(CACHE_MAX_SIZE, "the cap a build keeps the cache under at its end, and `wheelci cache prune`'s "
             "default size (default 20 GiB; `none`: builds never prune)"),
    Variable(VERBOSE, "`1`: as `--verbose`", old="CI_VERBOSE"),
    Variable(HEARTBEAT, "seconds between the lines that show a long compile alive in logs and CI (default 60)",
             old="CI_HEARTBEAT"),
    Variable(IMAGE_REGISTRY, "our images are pulled from this registry instead of built locally",
             old="CI_IMAGE_REGISTRY"),
    Variable(TOOL_SOURCE, "read by the reusable workflow, not the tool: on a runner, the pip requirement the tool "
             "is installed from where the platform does not name the workflow's commit (the `wheelci` input wins)"),
    Variable(SCCACHE_TIMEOUT, "set by the tool, not the user: in a container build's environment, the seconds "
             "the container's sccache server has to answer for its store (20, as on the host)"),
    Variable(SITE_PACKAGES, "read inside a container build: the build venv's site-packages whose files the "
             "compile-cache script gives one time (default: the interpreter's own)"),
    Variable(GPU_ANSWER, "set by the tool, not the user: in a GPU-less host build of a project that builds CUDA only "
             "when it sees a GPU, the compute capability torch.cuda answers with (the arch list's newest)"),
)
OLD_NAMES = {v.name: v.old for v in VARIABLES if v.old}


def read(environ: Mapping[str, str], name: str, default: str = "") -> str:
    """The variable's value: under its name, else under its old one, else `default`."""
    if name in environ:
        return environ[name]
    old = OLD_NAMES.get(name)
    if old is not None and old in environ:
        return environ[old]
    return default


def deprecations(environ: Mapping[str, str]) -> list[str]:
    """One line for each old name set in `environ`, naming the new one (the CLI prints them once)."""
    return [f"${old} is deprecated: use ${new} (the old name is still read)"
            for new, old in OLD_NAMES.items() if old in environ]
