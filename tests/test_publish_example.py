"""The example op wheel through both publishing paths: uploaded to a private index (pypiserver with
htpasswd on loopback) and served from a static index; pip installs it into a fresh venv that has
torch, and its op runs.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from wheelci.compile.hostenv import TorchSpec, ensure_env
from wheelci.verifyenv import fresh_venv
from tests._servers import PypiServer
from tests import _proc

USER, TOKEN = "ci-bot", "s3cret-token-for-the-example"
RUN_OP = ("import torch, {pkg} as m; x = torch.randn(3, 5, dtype=torch.float64);"
          "print((m.scaled_softmax(x, 2.0) - torch.softmax(x * 2.0, -1)).abs().max().item())")


@pytest.fixture(scope="module")
def cpu_torch_site(cpu_build) -> Path:
    """The cached CPU torch environment ci.build used (already created by the cpu_build fixture)."""
    return ensure_env(TorchSpec("2.13.0", None, None, False)).site


def install_and_run(tmp_path: Path, torch_site: Path, pkg: str, *pip_args: str) -> float:
    python = fresh_venv(tmp_path / "venv", torch_site)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    proc = _proc.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--isolated",
                      "--disable-pip-version-check", "--no-cache-dir", *pip_args, pkg.replace("_", "-")],
                     capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = _proc.run([str(python), "-c", RUN_OP.format(pkg=pkg)], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    return float(run.stdout.strip().splitlines()[-1])


def test_example_wheel_via_private_index(cpu_build, cpu_torch_site, tmp_path):
    pkg = cpu_build.wheel.name.split("-")[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWINE_")}
    env.update(TWINE_USERNAME=USER, TWINE_PASSWORD=TOKEN, PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring")
    with PypiServer(tmp_path / "srv", USER, TOKEN) as server:
        up = _proc.run([sys.executable, "-m", "ci.upload", "--repository-url", server.url, str(cpu_build.wheel)],
                       capture_output=True, text=True, env=env)
        assert up.returncode == 0, up.stderr
        assert TOKEN not in up.stdout + up.stderr
        err = install_and_run(tmp_path, cpu_torch_site, pkg, "--index-url", server.url + "simple/")
    assert err < 1e-12


def test_example_wheel_via_static_index(cpu_build, cpu_torch_site, tmp_path):
    pkg = cpu_build.wheel.name.split("-")[0]
    dist = tmp_path / "dist"
    dist.mkdir()
    shutil.copy(cpu_build.wheel, dist)
    proc = _proc.run([sys.executable, "-m", "ci.index", str(dist)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (dist / (cpu_build.wheel.name + ".metadata")).is_file()
    err = install_and_run(tmp_path, cpu_torch_site, pkg, "--index-url", (dist / "simple").as_uri() + "/")
    assert err < 1e-12


def test_build_upload_chains_after_verify(cpu_torch_site, tmp_path):
    """`ci.build --upload URL`: the verified wheels go to the private index, and pip gets them back."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWINE_")}
    env.update(TWINE_USERNAME=USER, TWINE_PASSWORD=TOKEN, PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring")
    out = tmp_path / "out"
    with PypiServer(tmp_path / "srv", USER, TOKEN) as server:
        proc = _proc.run([sys.executable, "-m", "ci.build", "--engine", "host", "--cpu", "-w", str(out),
                          "--upload", server.url], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert TOKEN not in proc.stdout + proc.stderr
        (wheel,) = out.glob("*.whl")
        assert (server.packages / wheel.name).read_bytes() == wheel.read_bytes()
        pkg = wheel.name.split("-")[0]
        err = install_and_run(tmp_path, cpu_torch_site, pkg, "--index-url", server.url + "simple/")
    assert err < 1e-12


def test_a_rerun_of_build_upload_is_done_and_a_different_file_still_fails(cpu_torch_site, tmp_path):
    """A rerun of `build --upload` failed on the file its first run sent, suggesting `--skip-existing`,
    an option `build` does not take. The same bytes on the index are success; a different file under the
    name is an error that names no option build lacks."""
    fixture = Path(__file__).resolve().parent / "fixtures" / "tiny_ext"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWINE_")}
    env.update(TWINE_USERNAME=USER, TWINE_PASSWORD=TOKEN, PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring")
    out = tmp_path / "out"
    with PypiServer(tmp_path / "srv", USER, TOKEN) as server:
        command = [sys.executable, "-m", "ci.build", str(fixture), "--engine", "host", "--cpu", "-w", str(out),
                   "--upload", server.url]
        first = _proc.run(command, capture_output=True, text=True, env=env)
        assert first.returncode == 0, first.stderr[-3000:]
        (wheel,) = out.glob("*.whl")
        again = _proc.run(command, capture_output=True, text=True, env=env)
        assert again.returncode == 0, again.stderr[-3000:]
        assert f"skipping {wheel.name}: the index has it with the same sha256" in again.stderr
        report = (out / "report.md").read_text()
        assert "| upload | ok |" in report and "Verify **passed" in report
        (server.packages / wheel.name).write_bytes(wheel.read_bytes() + b"another build")
        other = _proc.run(command, capture_output=True, text=True, env=env)
    assert other.returncode == 1, other.stderr[-3000:]
    errors = [line for line in other.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and f"the index already has a different {wheel.name}" in errors[0], other.stderr[-2000:]
    assert "--skip-existing" not in other.stderr and TOKEN not in other.stdout + other.stderr
