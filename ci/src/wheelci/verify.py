"""Verify: install a built wheel into a fresh venv with its torch, check it, and run the project's tests.

The fresh venv sees the cached torch install through a .pth file instead of reinstalling ~3 GB of
torch and CUDA wheels per run: pip still resolves the wheel's Requires-Dist against it (offline, so a
requirement on torch, triton or an nvidia-* wheel that install does not meet fails rather than
downloading something; other dependencies, numpy or scipy, come from the index), and the
package imports from the venv's own site-packages. The checks are the same for any extension (each
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
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from wheelci import cli
from wheelci.errors import CiError, Finding
from wheelci.util import log, proc
from wheelci.wheel.names import WheelName


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


def purelib(python: Path) -> str:
    """That interpreter's site-packages."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return proc.run([python, "-c", code], what=f"asking {python} for its site-packages", capture_output=True,
                    text=True).stdout.strip()


def fresh_venv(path: Path, base_site: Path | None = None) -> Path:
    """A new venv at path, optionally layered over another environment's site-packages; returns its python."""
    # pip runs from our own environment against the new interpreter (--python), so the venv needs none.
    proc.run([sys.executable, "-m", "venv", "--without-pip", path], what="creating the verify venv")
    python = path / "bin" / "python"
    if base_site is not None:
        site = purelib(python)
        (Path(site) / "_base_environment.pth").write_text(f"{base_site.resolve()}\n")  # a .pth line is read
        # relative to the site-packages holding it, never to where we were run
    return python


def pip_install(python: Path, *args: str) -> subprocess.CompletedProcess:
    return proc.run([sys.executable, "-m", "pip", "--python", python, "install", "--disable-pip-version-check",
                     "--no-input", *args], what="installing into the verify venv", check=False,
                    capture_output=True, text=True)


# torch and what it loads: the torch install verify runs over has these, and pip must never put another
# copy into the verify venv (a classic wheel pinning another torch must fail, not fetch that torch).
_ALWAYS_STACK = {"torch", "triton", "pytorch-triton"}
_STACK_PREFIXES = ("nvidia-", "cuda-")


def torch_stack(site: Path) -> dict[str, str]:
    """Canonical name -> version of the torch install's stack: torch, triton and the nvidia-*/cuda-*
    wheels it holds (pure-Python namesakes it does not hold, nvidia-ml-py, stay ordinary dependencies)."""
    from importlib.metadata import distributions

    from packaging.utils import canonicalize_name

    stack: dict[str, str] = {}
    for dist in sorted(distributions(path=[str(site)]), key=lambda d: (d.metadata["Name"] or "", d.version or "")):
        name = canonicalize_name(dist.metadata["Name"] or "")
        if name and dist.version and (name in _ALWAYS_STACK or name.startswith(_STACK_PREFIXES)):
            stack.setdefault(name, dist.version)
    return stack


def _installable(wheel: Path, tmp: Path) -> Path:
    """A PEP 825 variant wheel as pip installs it: the same bytes under the name without the label
    (pip refuses the label's sixth part; the variant.json inside is metadata pip ignores)."""
    name = WheelName.parse(wheel.name)
    if not name.variant:
        return wheel
    from wheelci.wheel.variant import plain_name

    (tmp / "plain").mkdir(exist_ok=True)
    plain = tmp / "plain" / plain_name(name)
    try:
        os.link(wheel, plain)
    except OSError:  # another filesystem
        import shutil
        shutil.copyfile(wheel, plain)
    return plain


def install_fresh(wheel: Path, torch_site: Path, tmp: Path, find_links: list[Path]) -> tuple[Path, str | None]:
    """A fresh venv in tmp over torch_site with the wheel installed: its python, and why the install
    failed (None when it did not). Offline first; a wheel that also needs other packages (numpy,
    scipy) gets those from the package index, with the torch install's stack pinned exactly as it is.
    Either way the venv must end up holding nothing of that stack itself: its torch, triton and CUDA
    wheels are the install's, whatever find-links or an index offered."""
    python = fresh_venv(tmp / "venv", torch_site)
    wheel = _installable(wheel, tmp)
    links = [arg for d in find_links for arg in ("--find-links", str(d))]
    stack = torch_stack(torch_site)
    unmet = _stack_requirements_unmet(wheel, stack)
    if unmet:
        return python, (f"FAILED: requires {', '.join(unmet)}, which the torch install does not meet "
                        "(torch, triton and that install's CUDA wheels are never downloaded here)")
    r = pip_install(python, "--no-index", *links, str(wheel))
    if r.returncode != 0 and _no_distribution_found(r.stderr):
        constraints = tmp / "torch-install-constraints.txt"
        constraints.write_text("".join(f"{name}==={version}\n" for name, version in sorted(stack.items())))
        r = pip_install(python, "--constraint", str(constraints), *links, str(wheel))
    if r.returncode != 0:
        reason = [ln for ln in r.stderr.splitlines() if "ERROR" in ln or "error:" in ln] or r.stderr.splitlines()[-1:]
        return python, f"FAILED: {reason[0].strip() if reason else ''}"
    shadowing = [name for name in sorted(torch_stack(Path(purelib(python)))) if name in stack or name in _ALWAYS_STACK]
    if shadowing:
        return python, (f"FAILED: pip put {', '.join(shadowing)} into the verify venv over the torch install's "
                        "(from find-links or an index): the wheel would be tested against another torch stack")
    return python, None


def _stack_requirements_unmet(wheel: Path, stack: dict[str, str]) -> list[str]:
    """The wheel's requirements (for a plain install) on the torch stack that the torch install does not
    meet: torch or triton it lacks, or a version of one of its packages it does not have."""
    from packaging.utils import canonicalize_name

    from wheelci.wheel.metadata import get_headers
    from wheelci.wheel.requirements import plain_install_requirement
    from wheelci.wheel.zipread import WheelArchive

    with WheelArchive.open(wheel) as wa:
        requires = get_headers(wa.metadata, "Requires-Dist")
    unmet = []
    for line in requires:
        req = plain_install_requirement(line)
        if req is None:
            continue  # for an extra, or unreadable: pip's own error says it
        name = canonicalize_name(req.name)
        if name in stack:
            if not req.specifier.contains(stack[name], prereleases=True):
                unmet.append(line)
        elif name in _ALWAYS_STACK:
            unmet.append(line)
    return unmet


def _no_distribution_found(stderr: str) -> bool:
    """pip failed offline for want of a distribution (not a conflict or a broken wheel)."""
    return "No matching distribution found for " in stderr


GENERIC = Path(__file__).resolve().parent / "resources" / "verify_probe.py"
TEST_TAIL = 10


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
                     build_dir: Path | None = None) -> dict[str, str]:
    """cibuildwheel's convention: a shell command with {project} and {wheel}, run with the verify
    venv first on PATH. Returns `test_command` ('ok', or FAILED with the exit status and the output's
    last lines) and, when the command ran pytest, each test's outcome (through PYTEST_ADDOPTS, which
    any pytest honours). CI_BUILD_DIR names the build tree, where a project may leave test programs."""
    text = command.replace("{project}", shlex.quote(str(project_dir))).replace("{wheel}", shlex.quote(str(wheel)))
    venv = python.parent.parent
    junit = cwd / "test-results.xml"
    env = {**os.environ, "VIRTUAL_ENV": str(venv), "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTEST_ADDOPTS": f"{os.environ.get('PYTEST_ADDOPTS', '')} --junitxml={shlex.quote(str(junit))}".strip()}
    env.pop("PYTHONPATH", None)
    if build_dir is not None:
        env["CI_BUILD_DIR"] = str(build_dir)
    r = proc.run(["sh", "-c", text], what="the test command", check=False, capture_output=True, text=True, cwd=cwd,
                 env=env)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    if r.returncode == 0:
        summary = lines[-1].strip("= ") if lines and " in " in lines[-1] else ""
        outcome = f"ok ({summary})" if summary else "ok"
    else:
        outcome = f"FAILED: exit {r.returncode}: " + " | ".join(lines[-TEST_TAIL:])
    return {"test_command": outcome, **pytest_results(junit)}


def grafted_runtime(names: list[str]) -> list[str]:
    """Libraries auditwheel must never graft (torch's, CUDA's, cuDNN's, OpenMP) found in the wheel."""
    from wheelci.native.libs import is_excluded

    return sorted(n for n in names if ".libs/" in n and is_excluded(n.rsplit("/", 1)[-1]))


def verify_generic(wheel: Path, torch_site: Path, *, project_dir: Path, test_command: str | None = None,
                   test_requires: list[str] = (), find_links: list[Path] = (),
                   build_dir: Path | None = None) -> VerifyResult:
    """Any extension: install it over its torch, import every top-level package, load every shared
    library, list the torch.ops namespaces it registers, check it pins torch and grafts none of the
    runtime; then its test command."""
    from wheelci.wheel.metadata import get_headers
    from wheelci.wheel.zipread import WheelArchive

    start = time.monotonic()
    checks: dict[str, object] = {}
    with WheelArchive.open(wheel) as wa:
        requires = get_headers(wa.metadata, "Requires-Dist")
        names = [m.name for m in wa.files]
    # torch== for a classic wheel, a range for a stable-ABI one (ci.abi checks which the libraries need);
    # that the torch verified under is inside it, pip's install says
    from wheelci.wheel.requirements import plain_install_requirement, requirement_name

    torch_reqs = [r for line in requires if (r := plain_install_requirement(line)) is not None
                  and requirement_name(line) == "torch" and r.specifier]
    checks["requires_torch"] = "ok" if torch_reqs else "FAILED: Requires-Dist does not name the torch it needs"
    grafted = grafted_runtime(names)
    checks["nothing_grafted"] = f"FAILED: {', '.join(grafted)}" if grafted else "ok"
    with tempfile.TemporaryDirectory(prefix="ci-verify-") as tmp:
        tmp = Path(tmp)
        python, failed = install_fresh(wheel, torch_site, tmp, find_links)
        if failed:
            return VerifyResult(wheel.name, {"install": failed, **checks})
        checks["install"] = "ok"
        site = purelib(python)
        # -I: the probe's own directory (ci/) is not on sys.path, or ci's `cache` or `errors` module
        # would be imported in place of the wheel's package of that name
        probe = json.dumps({"imports": importables(names), "libraries": libraries(names)})
        r = proc.run([python, "-I", GENERIC, site, probe], what="probing the installed wheel", check=False,
                     capture_output=True, text=True, cwd=tmp)
        try:
            checks.update(json.loads(r.stdout.strip().splitlines()[-1]))
        except (IndexError, json.JSONDecodeError):
            tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
            checks["import"] = f"FAILED: {tail}"
        if test_command:
            if test_requires:
                r = pip_install(python, *test_requires)
                if r.returncode != 0:
                    last = (r.stderr.strip().splitlines() or ["no output"])[-1]
                    checks["test_requires"] = f"FAILED: {last}"
                    return VerifyResult(wheel.name, checks, round(time.monotonic() - start, 2))
            log.info(f"running the test command: {test_command}")
            checks.update(run_test_command(test_command, python, project_dir, wheel, tmp, build_dir))
        else:
            checks["test_command"] = "skipped: none given ([tool.ci] test-command or --test-command)"
    return VerifyResult(wheel.name, checks, round(time.monotonic() - start, 2))


def build_parser() -> cli.Parser:
    p = cli.parser("python -m ci.verify", "install a wheel into a fresh venv over a torch install and test it")
    p.add_argument("wheel", type=Path)
    p.add_argument("--torch-site", type=Path, required=True, help="site-packages holding torch (and its CUDA wheels)")
    p.add_argument("--project", type=Path, help="the wheel's project: its [tool.ci] test command runs "
                                                "(placeholder {project})")
    p.add_argument("--test-command", help="run after the checks (default: the project's [tool.ci] test-command)")
    p.add_argument("--test-requires", action="append", metavar="REQ", help="installed before the test command")
    p.add_argument("--build-dir", type=Path, help="the build tree, passed to the tests as CI_BUILD_DIR")
    p.add_argument("--json", action="store_true")
    return p


def main(args) -> int:
    from wheelci.config import project

    if not args.wheel.is_file():
        raise CiError(f"{args.wheel}: no such file")
    WheelName.parse(args.wheel.name)
    if not (args.torch_site / "torch").is_dir():
        raise CiError(f"{args.torch_site}: no torch installed there")
    settings = project.Settings()
    if args.project is not None:
        if not args.project.is_dir():
            raise CiError(f"{args.project}: not a project directory")
        settings = project.read_project(args.project).settings  # refuses a directory that is no project
    result = verify_generic(args.wheel, args.torch_site, project_dir=(args.project or Path.cwd()).resolve(),
                            test_command=args.test_command or settings.test_command,
                            test_requires=settings.test_requires + (args.test_requires or []),
                            build_dir=args.build_dir)
    if args.json:
        cli.emit_json({**asdict(result), "passed": result.passed, "failures": result.failures})
    else:
        for k, v in result.checks.items():
            print(f"{k}: {v}")
    if not result.passed:
        raise Finding(f"verify failed for {args.wheel.name}: {'; '.join(result.failures)}")
    return 0


if __name__ == "__main__":
    cli.run(build_parser(), main)
