"""The project asked before it compiles: its setup.py run as the build will run it, setup() answering
(wheelci/resources/probe_setup.py), and every point judged from what it said.

Why: a setup.py decides at run time what it builds, and a reading of its text guesses (21 of the most-used
CUDA extensions were planned right on every point for 8). Asked, it says: the extensions it would build
and their flags (the device targets included), the variables it read and what they held, what it asked
torch.cuda, the imports that failed, the downloads it tried, or the exception it stops with. The build
runs the same script in the same environment seconds later, so this adds no trust; the dry run and
`plan` run none of the project's code and keep the reading.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheelci.compile.hints import hint
from wheelci.config.switches import ScriptReading, Switch, convention_of, plan_switches, stable_target
from wheelci.config.stable import minor_of
from wheelci.errors import Finding
from wheelci.native.stable_abi import FLOOR
from wheelci.util import log, proc, secret
from wheelci.util.secret import redact

if TYPE_CHECKING:
    from wheelci.plan import Plan

TIMEOUT = 300.0  # a setup.py that imports torch takes seconds; one that hangs is not waited on forever


@dataclass(frozen=True)
class Answers:
    """What the project's setup.py said (the probe's record, read and checked)."""

    env: dict[str, str | None] = field(default_factory=dict)  # each variable it read, and its value (None: unset)
    cuda: list[str] = field(default_factory=list)  # torch.cuda questions: "is_available -> False"
    failed_imports: list[str] = field(default_factory=list)
    downloads: list[str] = field(default_factory=list)
    error: str | None = None  # the exception the script stopped with
    setup_called: bool = False
    extensions: list[dict[str, Any]] = field(default_factory=list)
    setup_requires: list[str] = field(default_factory=list)
    install_requires: list[str] = field(default_factory=list)  # the wheel's runtime requirements, as given
    cmdclass: dict[str, str] = field(default_factory=dict)  # command -> the class the project gives it

    @property
    def device_targets(self) -> list[str]:
        """The code the extensions' own nvcc flags put in the wheel (sm_80's cubin, compute_90's PTX), in
        their order: what `code=` names (`arch=compute_80` alone is only the virtual arch compiled through)."""
        flags = [a for e in self.extensions for a in _nvcc_flags(e)]
        found = [t for f in flags for m in re.finditer(r"(?<![A-Za-z])code=\[?([^\s\]]+)", f)
                 for t in re.findall(r"\b(?:sm|compute)_\d{2,3}[af]?\b", m[1])]
        found += [m[1] for f in flags for m in [re.fullmatch(r"-arch[= ](sm_\d{2,3}[af]?)", f)] if m]
        return list(dict.fromkeys(found))

    @property
    def stable_abi(self) -> str | None:
        """The torch minor the extensions' own TORCH_TARGET_VERSION names (torch's stable ABI), in any of
        their compilers' flags or their macros; None where they build against one release's ABI."""
        found = []
        for e in self.extensions:
            flags = [*_all_flags(e), *(f"-D{m[0]}={m[1]}" for m in _list(e.get("define_macros"))
                                       if isinstance(m, list) and len(m) == 2)]
            target = stable_target(" ".join(flags))
            if target is not None and minor_of(target) >= FLOOR:
                found.append(target)
        return max(found, key=minor_of) if found else None  # the wheel needs the newest any of them names

    @property
    def builds_cuda(self) -> bool:
        return any(e.get("kind") == "CUDAExtension" or e.get("cuda_sources", 0) for e in self.extensions)

    @property
    def own_build_ext(self) -> str | None:
        """The project's own build_ext, where it is not setuptools' or torch's BuildExtension: what it
        compiles, beyond the extensions' sources, the compile alone tells."""
        cls = self.cmdclass.get("build_ext")
        return cls if cls and not cls.startswith(("torch.utils.cpp_extension.", "setuptools.")) else None

    @property
    def builds_itself(self) -> list[str]:
        """Extensions of no sources: the project's own build_ext makes them (natten's CMake library)."""
        return [str(e.get("name", "?")) for e in self.extensions if not e.get("sources")]

    def shown_env(self, plan: Plan) -> dict[str, str | None]:
        """The variables it read as they may be shown: a value is masked where its name says it is a secret
        or it is a build variable not declared public (--env, [tool.wheelci] env); the rest redacted."""
        public = secret.shown_names(plan.run.public_env)
        hidden = {k for k in plan.run.build_env if k not in public}
        return {k: None if v is None else secret.MASK if secret.is_secret_name(k) or k in hidden else redact(v)
                for k, v in self.env.items()}

    def to_json(self, plan: Plan) -> dict[str, Any]:
        return {"env": self.shown_env(plan), "cuda": self.cuda, "failed_imports": self.failed_imports,
                "downloads": [redact(u) for u in self.downloads], "error": self.error,
                "setup_called": self.setup_called, "setup_requires": self.setup_requires,
                "install_requires": self.install_requires,
                "extensions": [{k: e.get(k) for k in ("name", "kind", "sources", "cuda_sources")} for e in self.extensions],
                "device_targets": self.device_targets}


def _nvcc_flags(ext: dict[str, Any]) -> list[str]:
    args = ext.get("extra_compile_args")
    flags = args.get("nvcc", []) if isinstance(args, dict) else args if isinstance(args, list) else []
    return [str(a) for a in flags] if isinstance(flags, list) else []


def _all_flags(ext: dict[str, Any]) -> list[str]:
    """Every compiler's extra flags of an extension (cxx and nvcc alike)."""
    args = ext.get("extra_compile_args")
    lists = list(args.values()) if isinstance(args, dict) else [args]
    return [str(a) for flags in lists if isinstance(flags, list) for a in flags]


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _strings(value: object) -> list[str]:
    return [v for v in _list(value) if isinstance(v, str)]


def parse(doc: object) -> Answers:
    """The probe's JSON as Answers; what is not of the shape the probe writes is left out (pure)."""
    if not isinstance(doc, dict):
        return Answers(error="the probe wrote no answers")
    env = doc.get("env")
    setup = doc.get("setup")
    setup = setup if isinstance(setup, dict) else None
    exts = setup.get("ext_modules") if setup else None
    return Answers(
        env={k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, (str, type(None)))}
        if isinstance(env, dict) else {},
        cuda=[f"{c.get('asked')} -> {c.get('answer')}" for c in _list(doc.get("cuda")) if isinstance(c, dict)],
        failed_imports=[n for n in _strings(doc.get("failed_imports")) if n],
        downloads=_strings(doc.get("downloads")),
        error=doc["error"] if isinstance(doc.get("error"), str) else None,
        setup_called=setup is not None,
        extensions=[e for e in exts if isinstance(e, dict)] if isinstance(exts, list) else [],
        setup_requires=_strings(setup.get("setup_requires")) if setup else [],
        install_requires=_strings(setup.get("install_requires")) if setup else [],
        cmdclass={k: v for k, v in (setup.get("cmdclass") or {}).items() if isinstance(k, str) and isinstance(v, str)}
        if setup and isinstance(setup.get("cmdclass"), dict) else {})


def ask(python: Path, project_dir: Path, environ: dict[str, str]) -> Answers | None:
    """The project's answers, or None where it has no setup.py to ask (CMake, meson, an in-tree backend:
    their own configure says what it builds)."""
    if not (project_dir / "setup.py").is_file():
        return None
    script = str(files("wheelci.resources") / "probe_setup.py")
    # its record lives as long as this read: the raw answers (a value the project read, its exception's
    # text) are shown only as Answers shows them, never kept in the build tree
    with tempfile.TemporaryDirectory(prefix="ci-probe-") as tmp:
        out = Path(tmp) / "answers.json"
        try:  # run as the compile runs it (PYTHONPATH too); what it prints is not read, never held in memory
            r = proc.run([python, script, out, project_dir], what="asking the project how it builds (setup.py, "
                         "nothing compiled)", check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=environ, cwd=project_dir, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            log.info(f"note: the project's setup.py gave no answer within {TIMEOUT:.0f} s (nothing compiled): the "
                     "compile tells what it builds")
            return None
        try:
            return parse(json.loads(out.read_text(errors="replace")))
        except (OSError, ValueError):
            return Answers(error=f"the probe stopped with exit status {r.returncode} before it answered")


@dataclass(frozen=True)
class Verdict:
    notes: list[str]
    refusal: str | None = None  # why no compile can give this build: said in seconds, not after it


def judge(answers: Answers, plan: Plan) -> Verdict:
    """Each point before the compile: whether this build can exist, whether it compiles anything, the
    device targets the wheel will hold, and what the project tried that the build lacks (pure)."""
    what = f"a {'CUDA ' + plan.cuda if plan.cuda else 'CPU'} build"
    shown = answers.shown_env(plan)
    notes = [f"the project reads {', '.join(f'{k}={v}' if v is not None else f'{k} (unset)' for k, v in shown.items())}"
             ] if shown else []
    if answers.downloads:
        notes.append(f"its setup.py tries to download {', '.join(redact(u) for u in answers.downloads[:3])}: nothing "
                     "downloaded is built here")
    if answers.error is not None and answers.setup_called:  # raised after setup(), which answered nothing
        notes.append(f"after setup() its setup.py raised {answers.error} (the probe's setup() returns nothing)")
    elif answers.error is not None:
        # what the probe itself causes is never the project's answer: a download it refused (however the
        # script words the failure), an exit the script chose (a guard that wants its own backend)
        if answers.downloads or answers.error.startswith("SystemExit"):
            return Verdict(notes + [f"its setup.py stopped under the probe ({answers.error}): the compile tells"])
        cpu = "" if plan.cuda else " (a CPU build of it cannot exist: build with --cuda X.Y)"
        # an import the project guards (torch_npu, habana_frameworks) fails too: only the one it stopped on counts
        lacks = ("; the build environment lacks it: --build-requires the package that provides it"
                 if answers.error.startswith(("ModuleNotFoundError", "ImportError")) else "")
        # what a compile that failed so would be told (a CUDA extension in a CPU build, no CUDA toolkit)
        known = hint(answers.error, cuda=plan.cuda, stable=plan.stable is not None)
        return Verdict(notes, f"{what} of this project cannot run: its setup.py stops before any compile under torch "
                              f"{plan.torch}: {answers.error}{f'; {known}' if known else cpu}{lacks}")
    if not answers.setup_called:
        return Verdict(notes + ["its setup.py never called setup(): the compile tells what it builds"])
    if not answers.extensions:
        read = [k for k, v in answers.env.items() if v is None]
        why = f"; it reads {', '.join(read)}: the project's own variables may make it compile" if read else ""
        # said, not refused: extensions declared in pyproject.toml, or a command of its own, may still build
        if plan.cuda and not plan.run.allow_no_device_code:
            notes.append(f"warning: {what} of this project compiles nothing as configured: setup() gets no "
                         f"extension{why}")
        else:
            notes.append("setup() gets no extension: a pure-Python wheel" + why)
        return Verdict(notes)
    if plan.stable_from_project and answers.stable_abi is None:  # the text said so; as configured, it does not
        return Verdict(notes, f"{what} of this project was planned stable-ABI from its scripts' TORCH_TARGET_VERSION, "
                              "but its extensions as configured compile without it (a classic build): --torch X "
                              "builds a classic wheel pinned to X")
    if (target := answers.stable_abi) and plan.stable is None:
        notes.append(f"its extensions compile against torch's stable ABI (TORCH_TARGET_VERSION {target}): the wheel "
                     f"loads on every torch from {target}, and this build pins torch=={plan.torch}; --stable-abi "
                     f"{target} builds one wheel for all of them")
    if answers.builds_itself:
        notes.append(f"{', '.join(answers.builds_itself)}: built by the project's own build step (its build_ext, "
                     "CMake): the device code read after the compile says what it holds")
        return Verdict(notes)
    if answers.own_build_ext:
        notes.append(f"its build_ext is its own ({answers.own_build_ext}): the device code read after the compile "
                     "says what it holds")
        return Verdict(notes)
    if plan.cuda and not answers.builds_cuda and not plan.run.allow_no_device_code:
        names = ", ".join(e.get("name", "?") for e in answers.extensions[:4])
        read = [k for k, v in answers.env.items() if v is None]
        notes.append(f"warning: {what} of this project compiles its CPU path only as configured ({names}: no CUDA "
                     f"source){'; it reads ' + ', '.join(read) if read else ''}")
        return Verdict(notes)
    if plan.cuda:
        own = answers.device_targets
        if own and plan.narrowed:
            notes.append(f"device targets: {plan.arch_list} (the project's own {' '.join(own)} replaced)")
        elif own:
            notes.append(f"device targets: {' '.join(own)} (the project's own; --arch-list replaces them)")
        else:
            notes.append(f"device targets: {plan.arch_list} (TORCH_CUDA_ARCH_LIST)")
    return Verdict(notes)


def switches_read(answers: Answers, plan: Plan, environ: dict[str, str]) -> dict[str, str]:
    """The build switches of a known convention (wheelci.config.switches) the project read and found unset,
    as the plan would set them had its reading of the text seen them; the user's never change."""
    reading = ScriptReading(["setup.py"], [Switch(name, None, c, "setup.py") for name, value in answers.env.items()
                                           if value is None and name not in environ and (c := convention_of(name))])
    found = plan_switches(reading, plan.run.build_env, cuda=plan.cuda is not None,
                          arch_list=plan.arch_list if plan.narrowed else None)
    return {k: v for k, v in found.sets.items() if k not in environ}


DEVICE_QUESTIONS = ("is_available", "device_count", "get_device_capability", "get_device_properties")


def wants_a_gpu(answers: Answers, plan: Plan) -> bool:
    """A CUDA build of a project that asked torch for a device, was told there is none, and so builds no CUDA
    extension, with no variable of its own set by the user (FORCE_CUDA=0 turns CUDA off on purpose):
    answering as a GPU of the arch list would is what it lacks (pure)."""
    asked = [c for c in answers.cuda if c.split(" -> ")[0] in DEVICE_QUESTIONS]
    switched = set(answers.env) & set(plan.run.build_env)  # a variable of its own the user set: the user decided
    return bool(plan.cuda and asked and answers.setup_called and not answers.builds_cuda and not switched)


def gpu_capability(arch_list: str) -> str:
    """The capability a GPU-less build answers with: the arch list's newest (what the wheel runs on)."""
    found = [tuple(int(p) for p in m) for m in re.findall(r"(\d+)\.(\d+)", arch_list)]
    major, minor = max(found) if found else (9, 0)
    return f"{major}.{minor}"


def checked(answers: Answers | None, plan: Plan) -> list[str]:
    """The verdict said: its notes returned, its refusal raised (a Finding: the project cannot be built so)."""
    if answers is None:
        return []
    verdict = judge(answers, plan)
    if verdict.refusal:
        raise Finding(verdict.refusal)
    return verdict.notes
