"""Verify: install the repaired wheel into a fresh venv with its torch, and exercise it for real.

The fresh venv sees the cached torch install through a .pth file instead of reinstalling ~3 GB of
torch and CUDA wheels per run: pip still resolves the wheel's Requires-Dist against it (with
--no-index, so an unmet requirement fails the install rather than downloading something), and the
package imports from the venv's own site-packages. Then: both ops against torch's softmax,
torch.library.opcheck, gradcheck and gradgradcheck in float64, a scripted model saved and loaded in
another process, and the Python-free C++ runner on that model. CUDA checks run where a GPU is.

    python -m ci.verify WHEEL --torch-site DIR [--runner PATH] [--json]
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ci import cli
from ci.errors import CiError, Finding
from ci.wheelname import WheelName

CHECKS = Path(__file__).with_name("verify_checks.py")


@dataclass
class VerifyResult:
    wheel: str
    checks: dict[str, object] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failures(self) -> list[str]:
        return [f"{k}: {v}" for k, v in self.checks.items()
                if isinstance(v, str) and (v.startswith("FAILED") or k == "import" and v != "ok")]

    @property
    def passed(self) -> bool:
        return not self.failures


def fresh_venv(path: Path, base_site: Path | None = None) -> Path:
    """A new venv at path, optionally layered over another environment's site-packages; returns its python."""
    # pip runs from our own environment against the new interpreter (--python), so the venv needs none.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    if base_site is not None:
        site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
        (Path(site) / "_base_environment.pth").write_text(f"{base_site}\n")
    return python


def pip_install(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--disable-pip-version-check", "--no-input", *args],
                          capture_output=True, text=True)


def install_fresh(wheel: Path, torch_site: Path, tmp: Path, find_links: list[Path]) -> tuple[Path, str | None]:
    """A fresh venv in tmp over torch_site with the wheel installed offline: its python, and why the
    install failed (None when it did not)."""
    python = fresh_venv(tmp / "venv", torch_site)
    links = [arg for d in find_links for arg in ("--find-links", str(d))]
    proc = pip_install(python, "--no-index", *links, str(wheel))
    if proc.returncode == 0:
        return python, None
    reason = [ln for ln in proc.stderr.splitlines() if "ERROR" in ln] or proc.stderr.splitlines()[-1:]
    return python, f"FAILED: {reason[0] if reason else ''}"


def run_runner(runner: Path, model: str, library: str, torch_lib: str) -> str:
    """Run the C++ program as a Python-free deployment would: libraries found via LD_LIBRARY_PATH
    (the op library, torch's, and the CUDA wheels' lib directories next to torch)."""
    site = Path(torch_lib).parent.parent
    dirs = [str(Path(library).parent), torch_lib, *map(str, sorted(site.glob("nvidia/*/lib")))]
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(dirs)}
    proc = subprocess.run([str(runner), model, "1.7"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return f"FAILED: exit {proc.returncode}: {lines[-1] if lines else ''}"
    return "ok"


def verify(wheel: Path, torch_site: Path, *, runner: Path | None = None, find_links: list[Path] = (),
           log=print) -> VerifyResult:
    """Install `wheel` into a fresh venv layered over `torch_site` and run every check.

    `find_links`: directories holding the wheels it may require besides torch's (split companions)."""
    name = WheelName.parse(wheel.name)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ci-verify-") as tmp:
        tmp = Path(tmp)
        python, failed = install_fresh(wheel, torch_site, tmp, find_links)
        if failed:
            return VerifyResult(wheel.name, {"install": failed})
        proc = subprocess.run([str(python), str(CHECKS), name.distribution, str(tmp)],
                              capture_output=True, text=True, cwd=tmp)
        try:
            checks = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            checks = {"import": f"FAILED: {tail}"}
        checks = {"install": "ok", **checks}
        if runner is not None and "model" in checks:
            checks["cpp_runner"] = run_runner(runner, checks["model"], checks["library"], checks["torch_lib"])
        elif runner is None:
            checks["cpp_runner"] = "skipped: no runner built"
        if not checks.get("cuda_available"):
            checks["cuda"] = "skipped: no GPU (CPU kernels verified)"
        for transient in ("model", "library", "torch_lib"):
            checks.pop(transient, None)
    return VerifyResult(wheel.name, checks, round(time.monotonic() - start, 2))


GENERIC = Path(__file__).with_name("verify_generic.py")
TEST_TAIL = 10


def top_packages(wheel: Path) -> list[str]:
    """The wheel's top-level importable names: packages and single-file modules, not .dist-info/.libs."""
    import zipfile

    names = set()
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            top, _, rest = n.partition("/")
            if rest and rest == "__init__.py":
                names.add(top)
            elif not rest and n.endswith(".py"):
                names.add(n[:-3])
    return sorted(names)


def run_test_command(command: str, python: Path, project_dir: Path, wheel: Path, cwd: Path) -> str:
    """cibuildwheel's convention: a shell command with {project} and {wheel}, run with the verify
    venv first on PATH. 'ok', or FAILED with the exit status and the output's last lines."""
    text = command.replace("{project}", shlex.quote(str(project_dir))).replace("{wheel}", shlex.quote(str(wheel)))
    venv = python.parent.parent
    env = {**os.environ, "VIRTUAL_ENV": str(venv), "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(["sh", "-c", text], capture_output=True, text=True, cwd=cwd, env=env)
    if proc.returncode == 0:
        return "ok"
    tail = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()][-TEST_TAIL:]
    return f"FAILED: exit {proc.returncode}: " + " | ".join(tail)


def verify_generic(wheel: Path, torch_site: Path, *, project_dir: Path, test_command: str | None = None,
                   test_requires: list[str] = (), find_links: list[Path] = (), log=print) -> VerifyResult:
    """Any extension: install it over its torch, import every top-level package, load every shared
    library, list the torch.ops namespaces it registers, check it pins torch; then its test command."""
    from ci.wheelfile import WheelArchive, get_headers

    start = time.monotonic()
    checks: dict[str, object] = {}
    with WheelArchive.open(wheel) as wa:
        requires = get_headers(wa.metadata, "Requires-Dist")
    checks["requires_torch"] = ("ok" if any(r.replace(" ", "").startswith("torch==") for r in requires)
                                else "FAILED: Requires-Dist does not pin torch")
    with tempfile.TemporaryDirectory(prefix="ci-verify-") as tmp:
        tmp = Path(tmp)
        python, failed = install_fresh(wheel, torch_site, tmp, find_links)
        if failed:
            return VerifyResult(wheel.name, {"install": failed, **checks})
        checks["install"] = "ok"
        site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        proc = subprocess.run([str(python), str(GENERIC), site, *top_packages(wheel)], capture_output=True,
                              text=True, cwd=tmp)
        try:
            checks.update(json.loads(proc.stdout.strip().splitlines()[-1]))
        except (IndexError, json.JSONDecodeError):
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            checks["import"] = f"FAILED: {tail}"
        if test_command:
            if test_requires:
                proc = pip_install(python, *test_requires)
                if proc.returncode != 0:
                    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                    checks["test_requires"] = f"FAILED: {last}"
                    return VerifyResult(wheel.name, checks, round(time.monotonic() - start, 2))
            log(f"running the test command: {test_command}")
            checks["test_command"] = run_test_command(test_command, python, project_dir, wheel, tmp)
        else:
            checks["test_command"] = "skipped: none given ([tool.ci] test-command or --test-command)"
    return VerifyResult(wheel.name, checks, round(time.monotonic() - start, 2))


def build_parser() -> cli.Parser:
    p = cli.parser("python -m ci.verify", "install a wheel into a fresh venv over a torch install and test it")
    p.add_argument("wheel", type=Path)
    p.add_argument("--torch-site", type=Path, required=True, help="site-packages holding torch (and its CUDA wheels)")
    p.add_argument("--runner", type=Path, help="the C++ runner built with the wheel")
    p.add_argument("--json", action="store_true")
    return p


def main(args) -> int:
    if not args.wheel.is_file():
        raise CiError(f"{args.wheel}: no such file")
    if not (args.torch_site / "torch").is_dir():
        raise CiError(f"{args.torch_site}: no torch installed there")
    result = verify(args.wheel, args.torch_site, runner=args.runner)
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
