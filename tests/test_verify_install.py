"""verify installs a wheel over a torch install without ever replacing that install: the torch stack
(torch, triton, nvidia-*) must be met by it offline, while other dependencies (real projects need
numpy or scipy) come from the package index. A fake torch install stands in for the GBs: pip reads
only its dist-info."""

from __future__ import annotations

from pathlib import Path

import pytest

from wheelci.verifyenv import install_fresh
from tests._wheels import build_wheel
from tests import _proc

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
    return _proc.run([str(python), "-c", code], capture_output=True).returncode == 0


def test_other_dependencies_come_from_the_index(torch_site, tmp_path):
    """numpy-like dependencies, and a pure-Python nvidia-* namesake the torch install does not hold."""
    wheel = build_wheel(tmp_path / "w", "needs-six", requires=("torch>=2.10", "nvidia-cudnn-cu13>=9.19,<10", "six",
                                                               'nvidia-ml-py; python_version >= "3"'))
    python, failed = install_fresh(wheel, torch_site, tmp_path / "t", [])
    assert failed is None
    assert installed(python, "six") and installed(python, "nvidia-ml-py") and installed(python, "needs-six")
    assert not installed(python, "torch") or "torch-site" in _proc.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.distribution('torch')._path)"],
        capture_output=True, text=True).stdout  # torch is the install's, seen through the .pth


@pytest.mark.parametrize("requirement", [
    "torch==2.12.0",               # another torch: fails, never downloaded
    "nvidia-cudnn-cu13>=9.21",     # a newer cuDNN than the install's
    "triton",                      # torch's compiler, which this install lacks
])
def test_the_torch_stack_is_never_downloaded(torch_site, tmp_path, requirement):
    wheel = build_wheel(tmp_path / "w", "needs-more", requires=(requirement, "six"))
    python, failed = install_fresh(wheel, torch_site, tmp_path / "t", [])
    assert failed == (f"FAILED: requires {requirement}, which the torch install does not meet (torch, triton and "
                      "that install's CUDA wheels are never downloaded here)"), failed
    assert not installed(python, "needs-more") and not installed(python, "six")


def test_a_torch_offered_by_find_links_never_shadows_the_install(torch_site, tmp_path):
    """A dependency pinning another build of torch that find-links offers (pip's configuration can name
    such directories: PIP_FIND_LINKS): pip installs it into the venv, and verify refuses rather than
    test the wheel against it. (A build with dependencies missing offline fails earlier, as it should.)"""
    links = tmp_path / "links"
    build_wheel(links, "torch", "2.13.0+shadow")
    build_wheel(links, "ci-verify-test-middle", requires=("torch==2.13.0+shadow",))
    wheel = build_wheel(tmp_path / "w", "needs-middle", requires=("ci-verify-test-middle",))
    python, failed = install_fresh(wheel, torch_site, tmp_path / "t", [links])
    assert failed and failed.startswith("FAILED: pip put torch into the verify venv over the torch install's"), failed


@pytest.mark.parametrize("requires, ok", [
    (("torch==2.13.0",), True),
    (("torch<3,>=2.12",), True),           # a stable wheel's range, narrowed by its project
    (("torch",), False),                   # no version: says nothing of the torch it was built against
    (('torch==2.13.0; extra == "x"',), False),  # only for an extra: a plain install has none
    (("numpy",), False),
])
def test_a_wheel_linking_libtorch_must_name_a_torch_range(torch_site, tmp_path, requires, ok):
    """A library NEEDing LibTorch (libc10.so) ties the wheel to the torch it was built against."""
    from tests.test_repair import _torch_op
    from wheelci.verify import verify_generic

    op = _torch_op(tmp_path).read_bytes()
    wheel = build_wheel(tmp_path / "w", "names-torch", requires=requires, tag="py3-none-linux_x86_64",
                        files={"names_torch/__init__.py": "", "names_torch/libop.so": op})
    result = verify_generic(wheel, torch_site, project_dir=tmp_path)
    expected = "ok" if ok else "FAILED: Requires-Dist does not name the torch it needs"
    assert result.checks["requires_torch"] == expected


def test_a_wheel_linking_no_libtorch_needs_no_torch_pin(torch_site, tmp_path):
    """A ctypes library (bitsandbytes' kind) or pure Python: no torch release to name, so none is asked."""
    from wheelci.verify import verify_generic

    wheel = build_wheel(tmp_path / "w", "names-torch", requires=("numpy",))
    result = verify_generic(wheel, torch_site, project_dir=tmp_path)
    assert result.checks["requires_torch"] == "ok (links no LibTorch: tied to no torch release)"


@pytest.mark.parametrize("requires, ok", [
    (["pytest", "numpy>=1.26", "hypothesis[numpy]"], True),
    (["names-torch[test]"], False),          # the wheel's own extra resolves against the wheel installed
    (["Names_Torch"], False),
    (["pkg @ https://example.invalid/pkg-1.0-py3-none-any.whl"], False),  # a URL's content can change
    (["./tests/helpers"], False),            # so can a path's (packaging cannot read it as a name)
    (["pytest", "-r requirements.txt"], False),
    (["helper-0.1-py3-none-any.whl"], False),  # a bare file name reads as a name too; pip installs the file
    (["helper-0.1.tar.gz"], False),
])
def test_only_requirements_by_name_are_installed_once(requires, ok):
    from wheelci.verifyenv import cacheable

    assert cacheable(requires, "names-torch") is ok


def test_a_wheel_named_by_its_bare_file_name_is_read_by_content(tmp_path, monkeypatch):
    from wheelci.verifyenv import requirement_files

    monkeypatch.chdir(tmp_path)
    (tmp_path / "helper-0.1-py3-none-any.whl").write_bytes(b"one")
    first = requirement_files(["helper-0.1-py3-none-any.whl", "pytest"])
    assert list(first) == ["helper-0.1-py3-none-any.whl"]
    (tmp_path / "helper-0.1-py3-none-any.whl").write_bytes(b"two")
    assert requirement_files(["helper-0.1-py3-none-any.whl"]) != first
