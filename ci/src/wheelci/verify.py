"""Verify: install a built wheel into a fresh venv with its torch, check it, and run the project's tests.

The venv (ci.verifyenv) sees the cached torch install instead of reinstalling it, and the package
imports from the venv's own site-packages. The checks are the same for any extension (each
package imports, each library loads, the torch.ops namespaces it registers, nothing grafted, torch
pinned); what the extension computes is its own tests' job: the project's test command runs there
next, and a pytest run is reported test by test.

    python -m ci.verify WHEEL --torch-site DIR [--project DIR] [--test-command CMD] [--json]
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from wheelci.native.elf import device_code, scan_wheel
from wheelci.native.libs import is_excluded, links_libtorch
from wheelci.util import log, proc
from wheelci.util.cause import cause
from wheelci.util.secret import redact
from wheelci.verifyenv import install_fresh, purelib, requirements_for_tests
from wheelci.wheel.metadata import get_headers
from wheelci.wheel.names import WheelName
from wheelci.wheel.requirements import plain_install_requirement, requirement_name
from wheelci.wheel.zipread import WheelArchive


@dataclass
class VerifyResult:
    wheel: str
    checks: dict[str, object] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failures(self) -> list[str]:
        return [f"{k}: {v}" for k, v in self.checks.items() if isinstance(v, str) and v.startswith("FAILED")]

    @property
    def passed(self) -> bool:
        return not self.failures


PROBE = Path(__file__).resolve().parent / "resources" / "verify_probe.py"


# An extension module as an installer lays it out: `name.cpython-311-x86_64-linux-gnu.so`,
# `name.abi3.so`, `name.cp311-win...`; a bare `name.so` only outside the `lib*` naming of libraries.
_EXTENSION = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\.(?:cpython-[^./]+|abi3|cp3\d+[^./]*))\.so|(?!lib)([A-Za-z_][A-Za-z0-9_]*)\.so")
_LIBRARY = re.compile(r".+\.so(\.\d+)*")


def _installed(name: str) -> bool:
    """A member that lands in site-packages as code: not metadata, not .data, not a grafted .libs dir."""
    top = name.split("/", 1)[0]
    return not top.endswith((".dist-info", ".data", ".libs"))


def importables(names: list[str]) -> list[str]:
    """What a user can import from the wheel, one name per top-level thing: each regular package
    (the topmost directory with __init__.py), each module at the root (.py or an extension module,
    as flash-attn's `flash_attn_2_cuda*.so`), and each module or package inside a namespace package."""
    files = [n for n in names if _installed(n) and not n.endswith("/")]
    packages = {n.rsplit("/", 1)[0] for n in files if n.endswith("/__init__.py")}
    found = set()
    for n in files:
        *dirs, leaf = n.split("/")
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\.py", leaf) or _EXTENSION.fullmatch(leaf)
        for i in range(len(dirs)):
            if "/".join(dirs[: i + 1]) in packages:
                parts = dirs[: i + 1]
                break
        else:
            if not m or leaf == "__init__.py":
                continue
            parts = [*dirs, next(g for g in m.groups() if g)]
        if all(p.isidentifier() for p in parts):
            found.add(".".join(parts))
    return sorted(found)


def libraries(names: list[str]) -> list[str]:
    """Every shared library the wheel installs, at the root or in any package (not the grafted
    `.libs` copies, which load through the libraries that need them)."""
    return sorted(n for n in names if _installed(n) and _LIBRARY.fullmatch(n.rsplit("/", 1)[-1]))


def pytest_results(xml_path: Path) -> dict[str, str]:
    """Each test of a pytest run from its JUnit XML: 'ok', 'skipped: why' or 'FAILED: message'."""
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return {}
    results = {}
    for case in root.iter("testcase"):
        name = f"test {case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name', '?')}"
        outcome = "ok"
        for child in case:
            message = (child.get("message") or (child.text or "").strip()).splitlines()
            first = message[0][:200] if message else ""
            if child.tag in ("failure", "error"):
                outcome = f"FAILED: {first}"
            elif child.tag == "skipped":
                outcome = f"skipped: {first}"
        results[name] = outcome
    return results


def run_test_command(command: str, python: Path, project_dir: Path, wheel: Path, cwd: Path,
                     build_dir: Path | None = None, output: Output | None = None) -> dict[str, str]:
    """cibuildwheel's convention: a shell command with {project} and {wheel}, run with the verify
    venv first on PATH. Returns `test_command` ('ok', or FAILED with the exit status and the cause its
    output gives, wheelci.util.cause; the whole output goes to `output`) and, when the command ran
    pytest, each test's outcome (through PYTEST_ADDOPTS, which any pytest honours). CI_BUILD_DIR names
    the build tree, where a project may leave test programs."""
    text = command.replace("{project}", shlex.quote(str(project_dir))).replace("{wheel}", shlex.quote(str(wheel)))
    venv = python.parent.parent
    junit = cwd / "test-results.xml"
    env = {**os.environ, "VIRTUAL_ENV": str(venv),
           "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTEST_ADDOPTS": f"{os.environ.get('PYTEST_ADDOPTS', '')} --junitxml={shlex.quote(str(junit))}".strip()}
    env.pop("PYTHONPATH", None)
    if build_dir is not None:
        env["CI_BUILD_DIR"] = str(build_dir)
    r = proc.run(["sh", "-c", text], what="the test command", check=False, capture_output=True, text=True, cwd=cwd,
                 env=env)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    if output is not None:
        output.add(f"the test command: {command} (exit {r.returncode})", r.stdout + r.stderr)
    if r.returncode == 0:
        summary = lines[-1].strip("= ") if lines and " in " in lines[-1] else ""
        outcome = f"ok ({summary})" if summary else "ok"
    else:
        outcome = f"FAILED: exit {r.returncode}: {cause(r.stdout + r.stderr)}"
    return {"test_command": outcome, **pytest_results(junit)}


def grafted_runtime(names: list[str]) -> list[str]:
    """Libraries auditwheel must never graft (torch's, CUDA's, cuDNN's, OpenMP) found in the wheel."""

    return sorted(n for n in names if ".libs/" in n and is_excluded(n.rsplit("/", 1)[-1]))


def verify_generic(wheel: Path, torch_site: Path, *, project_dir: Path, test_command: str | None = None,
                   test_requires: Sequence[str] = (), find_links: Sequence[Path] = (),
                   build_dir: Path | None = None, log_file: Path | None = None,
                   require_gpu: bool = False) -> VerifyResult:
    """Any extension: install it over its torch, import every top-level package, load every shared
    library (wheelci.verify._probe), list the torch.ops namespaces it registers, check it pins torch and
    grafts none of the runtime; then its test command. With log_file, what the probes and the test
    command printed is appended there whole, and a failed verify names it (check `log`)."""

    start = time.monotonic()
    checks: dict[str, object] = {}
    output = Output(log_file)
    with WheelArchive.open(wheel) as wa:
        requires = get_headers(wa.metadata, "Requires-Dist")
        names = [m.name for m in wa.files]
    # torch== for a classic wheel, a range for a stable-ABI one (ci.abi checks which the libraries need);
    # that the torch verified under is inside it, pip's install says

    torch_reqs = [r for line in requires if (r := plain_install_requirement(line)) is not None
                  and requirement_name(line) == "torch" and r.specifier]
    linked = any(links_libtorch(lib.needed) for lib in scan_wheel(wheel))
    checks["requires_torch"] = ("ok" if torch_reqs else "ok (links no LibTorch: tied to no torch release)" if not linked
                                else "FAILED: Requires-Dist does not name the torch it needs")
    grafted = grafted_runtime(names)
    checks["nothing_grafted"] = f"FAILED: {', '.join(grafted)}" if grafted else "ok"
    with tempfile.TemporaryDirectory(prefix="ci-verify-") as tmp_name:
        tmp = Path(tmp_name)
        python, failed = install_fresh(wheel, torch_site, tmp, find_links)
        if failed:
            return VerifyResult(wheel.name, {"install": failed, **checks})
        checks["install"] = "ok"
        site = Path(purelib(python))
        # first, in the venv as the wheel's install left it: nothing of the tests' can hide what it lacks
        checks.update(_probe(python, site, {"imports": importables(names), "libraries": libraries(names)}, tmp, output))
        if not test_command:
            checks["test_command"] = "skipped: none given ([tool.wheelci] test-command or --test-command)"
        else:
            with requirements_for_tests(python, site, list(test_requires), torch_site,
                                        WheelName.parse(wheel.name).distribution) as failed:
                if failed is not None:
                    checks["test_requires"] = failed
                else:
                    log.info(f"running the test command: {test_command}")
                    checks.update(run_test_command(test_command, python, project_dir, wheel, tmp, build_dir, output))
    device = _device_code(wheel)
    if require_gpu:
        checks["require_gpu"] = gpu_outcome(checks, device)
    if device:
        _cuda_wheel_outcomes(checks)
    result = VerifyResult(wheel.name, checks)
    if log_file is not None and not result.passed and log_file.is_file():
        checks["log"] = f"the whole output: {log_file}"
    return VerifyResult(wheel.name, checks, round(time.monotonic() - start, 2))


def _cuda_wheel_outcomes(checks: dict[str, object]) -> None:
    """A CUDA wheel's checks say what its torch left out: under a CPU torch a failed import or load names
    that torch (its CUDA libraries come with a CUDA torch's nvidia-* wheels), and without a GPU "passed"
    says the kernels did not run."""
    if checks.get("gpu") == "none: a CPU torch":
        why = (f" (torch {checks.get('torch')} is a CPU build, without the CUDA libraries this CUDA wheel needs: "
               "verify it over a CUDA torch)")
        for key, value in checks.items():
            if key.startswith(("import ", "load ")) and isinstance(value, str) and value.startswith("FAILED"):
                checks[key] = value + why
    if str(checks.get("gpu", "")).startswith("none"):
        checks["gpu"] = "skipped: " + no_gpu(checks)  # "passed" alone would claim the kernels were checked


def gpu_outcome(checks: dict[str, object], device: bool) -> str:
    """`--require-gpu`: a CUDA wheel verified with its GPU, its kernels run by at least one test that ran
    and was not skipped, as pytest reports each (a command that reports no tests, or whose tests were all
    skipped, is not known to have run a kernel); FAILED otherwise."""
    if not device:
        return "FAILED: --require-gpu: the wheel holds no device code, so no GPU can run any of it"
    gpu = str(checks.get("gpu", "none: torch did not load"))
    if not gpu.startswith("ok"):
        return f"FAILED: --require-gpu: no GPU ran its kernels ({gpu.removeprefix('skipped: ')})"
    tests = {k: str(v) for k, v in checks.items() if k.startswith("test ")}
    ran = [k for k, v in tests.items() if not v.startswith("skipped")]
    if not str(checks.get("test_command", "")).startswith("ok"):
        return f"FAILED: --require-gpu: no test command passed ({checks.get('test_command', 'none ran')}): no CUDA test ran"
    if not tests:
        return ("FAILED: --require-gpu: the test command reported no tests (pytest reports each one), so no CUDA "
                "test is known to have run")
    if not ran:
        return f"FAILED: --require-gpu: every one of its {len(tests)} tests was skipped: no CUDA test ran"
    return f"ok: {gpu.removeprefix('ok ').strip('()')}, {len(ran)} of {len(tests)} tests ran"


def _device_code(wheel: Path) -> bool:
    return bool(device_code(wheel))


def no_gpu(checks: dict[str, object]) -> str:
    """What a verify of a CUDA wheel without a GPU did not check, as its outcome says it."""
    skipped = sum(1 for k, v in checks.items() if k.startswith("test ") and str(v).startswith("skipped"))
    return ("no GPU: " + (f"{skipped} test{'s' if skipped != 1 else ''} skipped, " if skipped else "")
            + "CUDA kernels not run")


def _probe(python: Path, site: Path, request: dict[str, Any], cwd: Path, output: "Output") -> dict[str, object]:
    """The package's own imports in one process; then each library they did not load, in a process of its
    own, as the package would never load two alternatives (a `_x_cpu.so` and a `_x_cuda.so` registering
    the same operators) into one. A library that loads nowhere still fails its check."""
    first, loaded = _probe_once(python, site, request, cwd, output)
    ops = set(first.pop("torch_ops", None) or [])
    loads: dict[str, object] = {}
    for rel in request["libraries"]:
        if rel in loaded:
            loads[f"load {rel}"] = "ok"
            continue
        alone, _ = _probe_once(python, site, {"load": rel}, cwd, output)
        loads[f"load {rel}"] = alone.pop(f"load {rel}", "FAILED: the probe printed no result")
        ops |= set(alone.pop("torch_ops", None) or [])
        for key in ("torch", "gpu"):  # when the imports' process died before saying
            if key in alone:
                first.setdefault(key, alone[key])
    checks = {k: first.pop(k) for k in ("torch",) if k in first}
    gpu = {k: first.pop(k) for k in ("gpu",) if k in first}
    return {**checks, **first, **loads, **({"torch_ops": sorted(ops)} if "torch" in checks else {}), **gpu}


def _probe_once(python: Path, site: Path, request: dict[str, Any], cwd: Path,
                output: "Output") -> tuple[dict[str, Any], list[str]]:
    """One probe process: its checks, and the libraries its imports loaded. A check the process died in
    (an abort in a library's static initializer, a segfault) fails with the cause its output gives."""
    # -I: the probe's own directory (ci/) is not on sys.path, or ci's `cache` or `errors` module
    # would be imported in place of the wheel's package of that name
    results = cwd / "probe-results.jsonl"
    results.unlink(missing_ok=True)
    r = proc.run([python, "-I", PROBE, site, json.dumps(request), results], what="probing the installed wheel",
                 check=False, capture_output=True, text=True, cwd=cwd)
    text = r.stdout + r.stderr
    output.add(f"probe {json.dumps(request)} (exit {r.returncode})", text)
    allowed = _allowed(request)
    checks: dict[str, object] = {}
    loaded: list[str] = []
    started: str | None = None
    for line in results.read_text(errors="replace").splitlines() if results.is_file() else []:
        got = _json_line(line)
        if not isinstance(got, dict):
            continue
        if isinstance(got.get("started"), str) and got["started"] in allowed:
            started = got["started"]
        elif isinstance(got.get("loaded"), list):
            loaded = [rel for rel in got["loaded"] if rel in request.get("libraries", [])]
        else:  # only the checks asked for: what a module printed never adds or overrides another
            checks.update({k: v for k, v in got.items() if k in allowed or k in ("torch", "torch_ops", "gpu")})
            started = None if started in got else started
    if r.returncode != 0 or not checks:
        why = f"FAILED: {cause(text) or 'it printed no result of its own'}" + _ended(r.returncode)
        if started is not None:
            checks[started] = why
        elif not any(k in checks for k in allowed):
            checks["load " + request["load"] if "load" in request else "import"] = why
    return checks, loaded


def _allowed(request: dict[str, Any]) -> set[str]:
    if "load" in request:
        return {f"load {request['load']}"}
    return {f"import {n}" for n in request["imports"]}


def _ended(returncode: int) -> str:
    """How the probe process ended, when a signal ended it (SIGABRT: an uncaught C++ exception)."""
    if returncode >= 0:
        return ""
    try:
        return f" (the process ended with {signal.Signals(-returncode).name})"
    except ValueError:
        return f" (the process ended with signal {-returncode})"


class Output:
    """What verify's commands printed, whole, in a log file (a failed check shows one line: its cause)."""

    def __init__(self, path: Path | None):
        self.path = path

    def add(self, title: str, text: str) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)

        with self.path.open("a", encoding="utf-8", errors="replace") as f:
            f.write(redact(f"===== {title}\n{text}{'' if text.endswith(chr(10)) or not text else chr(10)}"))


def _json_line(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None


if __name__ == "__main__":  # `python -m wheelci.verify` (`python -m ci.verify` here): the command line runs it
    import runpy

    runpy.run_module("wheelci.commands.verify", run_name="__main__")
