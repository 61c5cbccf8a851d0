"""verify installs a wheel over a torch install without ever replacing that install: the torch stack
(torch, triton, nvidia-*) must be met by it offline, while other dependencies (real projects need
numpy or scipy) come from the package index. A fake torch install stands in for the GBs: pip reads
only its dist-info."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ci.verify import install_fresh
from tests._wheels import build_wheel

pytestmark = pytest.mark.network


@pytest.fixture
def torch_site(tmp_path: Path) -> Path:
    site = tmp_path / "torch-site"
    for name, version in (("torch", "2.13.0"), ("nvidia-cudnn-cu13", "9.20.0.48")):
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text("")
    return site


def installed(python: Path, name: str) -> bool:
    code = f"import importlib.metadata as m; m.version({name!r})"
    return subprocess.run([str(python), "-c", code], capture_output=True).returncode == 0


def test_other_dependencies_come_from_the_index(torch_site, tmp_path):
    wheel = build_wheel(tmp_path / "w", "needs-six", requires=("torch>=2.10", "nvidia-cudnn-cu13>=9.19,<10", "six"))
    python, failed = install_fresh(wheel, torch_site, tmp_path / "t", [])
    assert failed is None
    assert installed(python, "six") and installed(python, "needs-six")


@pytest.mark.parametrize("requirement, words", [
    ("torch==2.12.0", "torch"),            # another torch: fails, never downloaded
    ("nvidia-cufft>=12", "nvidia-cufft"),  # a CUDA wheel the torch install lacks
])
def test_the_torch_stack_is_never_downloaded(torch_site, tmp_path, requirement, words):
    wheel = build_wheel(tmp_path / "w", "needs-more", requires=(requirement, "six"))
    python, failed = install_fresh(wheel, torch_site, tmp_path / "t", [])
    assert failed and failed.startswith("FAILED:") and words in failed, failed
    assert not installed(python, "needs-more") and not installed(python, "six")
