"""Every path a build writes, declared once: the entries of a work directory, of an output directory (-w)
and of the tool cache.

Whatever acts on a build's files reads these tables rather than a list of its own: `--fresh` and the
planted-link strip (the work directory's entries), the ownership manifest (the names a build records in
-w), the log redaction at the end of every build (the entries marked `log`), and `cache prune` (the cache
kinds marked `prunable`). A step that writes a new entry adds it here; tests/test_layout.py walks real
builds and fails on any path these tables do not name, and on any literal entry name the code writes
under a work directory that is missing here.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One entry at the top of a directory the tool writes: a name, or a pattern (`*`) for names per run."""

    name: str
    what: str
    log: bool = False  # a log: redacted in place at the end of the build that wrote it
    fresh: bool = True  # work directory: removed by --fresh (what a build remakes)
    prunable: bool = False  # tool cache: a kind `cache prune` may remove entries of (remade when missing)

    def matches(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.name) if "*" in self.name else name == self.name


# --- a work directory (--work-dir, or the kept build tree under the cache's builds/) ---------------
WORK_MARK = ".wheelci-work"
SOURCES = ".wheelci-sources.json"
COPIED = ".wheelci-copied.json"
CONFIGURED = ".wheelci-configured"
BUILT = ".wheelci-built.json"
SEARCHED = ".wheelci-searched"
TREE = ".wheelci-tree.json"
COMPILED_WITH = ".wheelci-compiled-with"
CHECKED = ".wheelci-requirements-checked"
STEPS = ".wheelci-steps.json"
COMPILE_LOG = "compile.log"
CIBUILDWHEEL_LOG = "cibuildwheel.log"
VERIFY_LOG = "verify.log"
SCCACHE_LOG = "sccache-server.log"

WORK = (
    Entry(WORK_MARK, "marks a work directory this tool made: a later build may replace its entries", fresh=False),
    Entry(TREE, "a kept build tree: the project it builds", fresh=False),
    Entry(".ci-lock", "the lock a build holds on the directory (wheelci.util.lock)", fresh=False),
    Entry("src", "the project's git files, copied (the compile's source)"),
    Entry("sdist", "an sdist given as the project, extracted"),
    Entry("build", "the build frontend's tree (CMake's, setuptools')"),
    Entry("dist", "the compiled wheel, before repair"),
    Entry("build-env", "the build's own environment: its build requirements over the shared torch one"),
    Entry("cpu-path", "the PATH a CPU build compiles with (no nvcc on it)"),
    Entry("compat", "glibc compatibility headers on the include path"),
    Entry("ccache-bin", "ccache's compiler links"),
    Entry("nvcc-targets", "the nvcc that narrows the project's device targets to --arch-list, and the CUDA root around it"),
    Entry("cmake-probe", "the question a CMake configure is asked (CMAKE_PROJECT_INCLUDE) and its answers: every target, its CUDA sources and architectures"),
    Entry("gpu-answer", "a sitecustomize answering torch.cuda as a GPU of the arch list would, for a project that builds CUDA only when it sees one"),
    Entry("sccache-bin", "sccache's compiler links (a compile cache with a store)"),
    Entry("sccache", "the sccache client's local directory"),
    Entry(SCCACHE_LOG, "the build's sccache server's output, redacted as it is written", log=True),
    Entry("compile-cache", "a container build's compile-cache mount (counts, the server's log)", log=True),
    Entry("compile-cache.env", "the container's --env-file for the store (removed after the compile)"),
    Entry(COMPILE_LOG, "the host compile's output", log=True),
    Entry(CIBUILDWHEEL_LOG, "cibuildwheel's output", log=True),
    Entry(VERIFY_LOG, "verify's output", log=True),
    Entry("repaired", "auditwheel's output"),
    Entry("finished", "wheels with the preload and the label"),
    Entry("plain", "the wheel before its variant"),
    Entry("variant", "the PEP 825 variant wheel"),
    Entry("sbom", "wheels with their SBOM"),
    Entry("split", "wheels split under the limit"),
    Entry(SOURCES, "the project's files as last seen, with their digests"),
    Entry(COPIED, "the files a synced copy holds from the project"),
    Entry(CONFIGURED, "the digest of what the build tree's configure read"),
    Entry(BUILT, "the project files the tree was last compiled from"),
    Entry(SEARCHED, "what the searched directories hold, as ccache hashes it"),
    Entry(COMPILED_WITH, "what a setuptools tree's last compile searched"),
    Entry(CHECKED, "what the frontend's requirements check passed with"),
    Entry(STEPS, "the steps' records, for reuse (wheelci.reuse)"),
)

# --- an output directory (-w) ---------------------------------------------------------------------
MANIFEST = ".wheelci-owned.json"
REPORTS = ("report.json", "report.md")
OUTPUT = (
    Entry("*.whl", "the verified wheels (and split companions), listed in the manifest"),
    Entry("report.json", "the build's report", fresh=False),
    Entry("report.md", "the build's report as the job summary shows it", fresh=False),
    Entry(MANIFEST, "what this tool wrote here, by who wrote it (wheelci.util.owned)"),
    Entry(".wheelci-split.json", "the manifest as earlier releases of split kept it"),
    Entry(".wheelci-previous-*", "what a failed build set aside"),
    Entry(".wheelci-stage-*", "outputs being staged, renamed in when the run commits"),
    Entry(".ci-lock", "the lock a run holds on the directory"),
)

# --- the tool cache (wheelci.util.cache.cache_dir) ------------------------------------------------
CACHE = (
    Entry("builds", "kept build trees, one a project and plan", prunable=True),
    Entry("envs", "build environments: a torch release and the build tools", prunable=True),
    Entry("test-layers", "verify's layers of test requirements", prunable=True),
    Entry("sdists", "sdists fetched for a project named by its requirement, checked by their sha256"),
    Entry("torch-releases", "torch releases read from an index (their metadata and source)"),
    Entry("build-constraints", "the pins of the build tools, as constraint files"),
    Entry("ccache", "ccache's store (CCACHE_DIR unless the user sets one)"),
    Entry("verify-tools", "the emulated verify's packages"),
    Entry("bench", "the benches' inputs"),
    Entry(".pruning", "entries being removed by a prune"),
    Entry("*.lock", "a lock beside an entry (wheelci.util.lock)"),
)


def names(entries: tuple[Entry, ...], *, fresh: bool | None = None) -> tuple[str, ...]:
    """The plain names (no pattern) of these entries; with `fresh`, only those --fresh removes (or keeps)."""
    return tuple(e.name for e in entries if "*" not in e.name and (fresh is None or e.fresh == fresh))


def logs(entries: tuple[Entry, ...]) -> tuple[str, ...]:
    return tuple(e.name for e in entries if e.log)


def prunable(entries: tuple[Entry, ...] = CACHE) -> tuple[str, ...]:
    return tuple(e.name for e in entries if e.prunable)


def unregistered(entries: tuple[Entry, ...], found: list[str]) -> list[str]:
    """The names among `found` that no entry names (what a test walking a real build fails on)."""
    return sorted(n for n in found if not any(e.matches(n) for e in entries))
