"""The CUDA matrix data: complete, cited, internally consistent, and true where a real tool can tell."""

from __future__ import annotations

import os
import re
import sys
import zipfile
from pathlib import Path

import pytest

from wheelci.config import matrix as mx
from wheelci.util.cache import cache_dir
from wheelci.errors import CiError
from tests import _proc

NVCC_CACHE = cache_dir("nvcc-wheels")
REQUIRED_ROWS = {"11.8", "12.6", "12.8", "12.9", "13.0"}
ROWS = mx.rows()


def row_ids(rows=ROWS):
    return [r.version for r in rows]


def test_required_rows_present():
    assert REQUIRED_ROWS <= set(mx.load().versions)


def test_every_source_is_cited_in_the_header():
    text = mx.MATRIX_FILE.read_text()
    cited = set(re.findall(r"^#\s+\[([a-z0-9-]+)\]", text, re.M))
    used = {t.source for r in ROWS for t in r.torch} | {i.source for r in ROWS for i in r.images}
    assert used and used <= cited, f"sources without a citation: {used - cited}"


@pytest.mark.parametrize("row", ROWS, ids=row_ids())
def test_row_is_consistent(row: mx.CudaRow):
    m = mx.load()
    if row.default_torch or row.torch:
        assert row.torch_build(row.default_torch), "default torch must be one the row builds"
    assert row.torch_index_url.endswith("/" + row.tag)
    assert mx.check_arch_list(row.version, row.arch_list)  # the default list is valid for this nvcc
    assert row.arch_list.endswith("+PTX") and row.arch_list.count("+PTX") == 1, "PTX for the newest arch only"
    major = row.version.split(".")[0]
    for t in row.torch:
        m.torch_line(t.version)  # every torch version has its line (python, policy, ABI)
        assert re.fullmatch(rf"nvidia-cudnn-cu{major}==9\.\d+\.\d+\.\d+", t.cudnn), t.cudnn
    assert row.images, "every row needs a build image"
    for img in row.images:
        assert img.manylinux in mx.POLICIES
        assert img.gcc <= row.gcc_max, f"{img.name}: GCC {img.gcc} above nvcc {row.version}'s ceiling"
        assert (img.origin == "ours") == bool(img.build_args)
    size = "--compress-mode=size" in row.nvcc_flags
    assert size == (tuple(map(int, row.version.split("."))) >= (12, 8)), "compress-mode=size exists from 12.8"
    assert "-compress-all" in row.nvcc_flags


def test_a_torch_is_pypis_default_for_at_most_one_cuda():
    seen: dict[str, str] = {}
    for r in ROWS:
        for t in r.torch:
            if t.on_pypi:
                assert t.version not in seen, f"torch {t.version} on PyPI as CUDA {seen.get(t.version)} and {r.version}"
                seen[t.version] = r.version


def test_cu118_has_an_image_for_each_abi():
    """The cu118 ABI trap: pre-cxx11 torch (<= 2.6) and cxx11 torch (>= 2.7) both need an image."""
    row = mx.load().row("11.8")
    assert {i.cxx11_abi for i in row.images} == {False, True}
    assert any(i.name.startswith("sameli/manylinux2014") for i in row.images)


@pytest.mark.parametrize("text,code", [("8.6", "86"), ("9.0a", "90a"), ("9.0+PTX", "90"), ("12.0a+PTX", "120a")])
def test_arch_code(text, code):
    assert mx.arch_code(text) == code


@pytest.mark.parametrize("text", ["8.6\n", "9.0a+PTX\n", "x8.6"])
def test_arch_code_refuses_anything_around_an_arch(text):
    """fullmatch: a regex ending in `$` also matched before a trailing newline."""
    with pytest.raises(CiError, match="bad CUDA arch"):
        mx.arch_code(text)


@pytest.mark.parametrize("cuda,archs,bad", [("13.0", "5.0;8.0", "5.0"), ("13.0", "7.0 8.6", "7.0"),
                                            ("11.8", "8.6;10.0", "10.0"), ("12.6", "12.0", "12.0")])
def test_toolkit_rejects_archs(cuda, archs, bad):
    with pytest.raises(CiError, match=rf"nvcc {cuda} rejects arch {re.escape(bad)}"):
        mx.check_arch_list(cuda, archs)


@pytest.mark.parametrize("archs", ["", "sm_86", "8", "8.6+ptx"])
def test_bad_arch_syntax(archs):
    with pytest.raises(CiError):
        mx.check_arch_list("12.8", archs)


def test_arch_separators_normalize():
    assert mx.check_arch_list("12.8", "8.0, 8.6 9.0+PTX") == "8.0;8.6;9.0+PTX"


def test_unsupported_cuda_lists_supported():
    with pytest.raises(CiError, match=r"unsupported CUDA version '11\.9' \(supported: 11\.8, 12\.6"):
        mx.load().row("11.9")


@pytest.mark.parametrize("text", ["not toml [", "default_torch = '2.13.0'\n", "[[cuda]]\nversion = 1\n"])
def test_malformed_matrix_is_one_error(text):
    with pytest.raises(CiError, match="bad CUDA matrix"):
        mx.parse(text)


@pytest.mark.parametrize("typo, where, meant", [
    ("on_pypi = true", "on_pypy = true", "on_pypi"),
    ('gcc_max = ', 'gcc_maximum = ', "gcc_max"),
    ('cxx11_abi = ', 'cxx11abi = ', "cxx11_abi"),
    ('cpu_index_url = ', 'cpu_index = ', "cpu_index_url"),
])
def test_a_typo_in_the_matrix_is_refused_with_the_key_meant(typo, where, meant):
    """Every table of the matrix takes only its keys: `on_pypy = true` once dropped the PyPI flag silently."""
    text = mx.MATRIX_FILE.read_text()
    assert typo in text
    with pytest.raises(CiError, match=rf"bad CUDA matrix: unknown key '{where.split(' ')[0]}' in .*did you mean '{meant}'"):
        mx.parse(text.replace(typo, where, 1))


@pytest.fixture(scope="module")
def nvcc(tmp_path_factory) -> Path:
    """The host's nvcc when it is a matrix CUDA version, else nvcc from NVIDIA's wheels of the row
    that ships one (13.0): either way a real toolkit to question."""
    from wheelci.engine import host_nvcc, nvcc_version, real_nvcc

    host = host_nvcc()
    if host is not None and nvcc_version(host) in mx.load().versions:
        return real_nvcc(host)
    row = next(r for r in ROWS if r.nvcc_wheel_has_nvcc)
    root = tmp_path_factory.mktemp("nvcc-wheel")
    for req in row.nvcc_wheels:
        with zipfile.ZipFile(_nvcc_wheel(req)) as z:
            z.extractall(root)
    (found,) = root.glob("nvidia/*/bin/nvcc")
    for tool in found.parent.iterdir():
        tool.chmod(0o755)
    return found


def test_accepted_archs_match_nvcc(nvcc):
    """The table row for that nvcc lists exactly what `nvcc --list-gpu-arch` prints."""
    from wheelci.engine import nvcc_version

    out = _proc.run([str(nvcc), "--list-gpu-arch"], capture_output=True, text=True, check=True).stdout
    listed = {a.removeprefix("compute_") for a in out.split()}
    plain = {a for a in mx.accepted_archs(nvcc_version(nvcc)) if a.isdigit()}
    assert listed == plain


def test_gcc_ceiling_matches_nvcc(nvcc):
    """nvcc's own host_config.h states the newest GCC it accepts (`#if __GNUC__ > N` -> error)."""
    from wheelci.engine import nvcc_version

    header = next(nvcc.parent.parent.glob("**/include/crt/host_config.h"))
    found = re.search(r"#if __GNUC__ > (\d+)", header.read_text())
    assert found and int(found[1]) == mx.load().row(nvcc_version(nvcc)).gcc_max


ON_PYPI = [(r, t) for r in ROWS for t in r.torch if t.on_pypi]


@pytest.fixture(scope="module")
def pypi() -> dict:
    """Every torch release these tests check, as the tool's own reader finds it on PyPI (its metadata,
    cached per release), 4 at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from wheelci.config.releases import TorchIndex

    index = TorchIndex()
    versions = sorted({t.version for _, t in ON_PYPI} | {_newest_in_matrix(line.minor) for line in LINES})
    with ThreadPoolExecutor(4) as pool:
        return dict(zip(versions, pool.map(index.release, versions)))


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("row,build", ON_PYPI, ids=[f"{t.version}-cu{r.version}" for r, t in ON_PYPI])
def test_pypi_default_torch_matches_row(row: mx.CudaRow, build: mx.TorchBuild, pypi):
    """Where PyPI's default torch is a row's build, its metadata proves the CUDA, the cuDNN pin and the policy."""
    release = pypi[build.version]
    assert (release.cuda, release.cudnn) == (row.version, build.cudnn), release
    assert release.manylinux == mx.load().torch_line(build.version).manylinux, release


def _nvcc_wheel(requirement: str) -> Path:
    """NVIDIA's wheel for one toolkit piece (20-40 MB), downloaded once into the cache."""
    name, version = requirement.split("==")
    stem = f"{name.replace('-', '_')}-{version}-"
    NVCC_CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(NVCC_CACHE.glob(stem + "*.whl"))
    if not found:
        r = _proc.run([sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--quiet",
                       requirement, "-d", str(NVCC_CACHE)], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        found = sorted(NVCC_CACHE.glob(stem + "*.whl"))
    return found[0]


@pytest.mark.network
@pytest.mark.parametrize("row", ROWS, ids=row_ids())
def test_toolkit_facts_match_nvidias_wheels(row: mx.CudaRow, tmp_path):
    """Each row's arch table and GCC ceiling are what that toolkit itself says: the compute_* values its
    ptxas allows (`ptxas --help`), and crt/host_config.h's `#if __GNUC__ > N` error."""
    ptxas = header = None
    has_nvcc = False
    for req in row.nvcc_wheels:
        with zipfile.ZipFile(_nvcc_wheel(req)) as z:
            has_nvcc |= any(m.endswith("/bin/nvcc") for m in z.namelist())
            for member in z.namelist():
                if member.endswith("/bin/ptxas"):
                    ptxas = Path(z.extract(member, tmp_path))
                    os.chmod(ptxas, 0o755)
                elif member.endswith("/crt/host_config.h"):
                    header = z.read(member).decode()
    assert ptxas and header, f"{row.nvcc_wheels} hold no ptxas or host_config.h"
    assert has_nvcc == row.nvcc_wheel_has_nvcc  # whether a host build can take nvcc from the wheel
    assert f"release {row.version}," in _proc.run([ptxas, "--version"], capture_output=True, text=True).stdout
    help_text = _proc.run([ptxas, "--help"], capture_output=True, text=True).stdout
    section = help_text[help_text.index("--gpu-name"):]
    section = section[:section.index("Default value")]
    allowed = set(re.findall(r"'compute_(\w+)'", section))
    assert allowed == set(row.accepted_archs)
    assert int(re.search(r"#if __GNUC__ > (\d+)", header)[1]) == row.gcc_max


def _newest_in_matrix(minor: str) -> str:
    versions = {t.version for r in ROWS for t in r.torch if t.version.startswith(minor + ".")}
    return max(versions, key=lambda v: tuple(map(int, v.split("."))))


LINES = mx.load().torch_lines


@pytest.mark.network
@pytest.mark.parametrize("line", LINES, ids=[t.minor for t in LINES])
def test_torch_line_pythons_and_policy_match_pypi(line: mx.TorchLine, pypi):
    """Each torch line lists exactly the CPython range PyPI has wheels for (tags within Requires-Python),
    and its wheels' policy, which gives the C++ ABI."""
    release = pypi[_newest_in_matrix(line.minor)]
    assert line.python == release.python and line.python == tuple(f"3.{m}" for m in range(
        int(line.python[0].split(".")[1]), int(line.python[-1].split(".")[1]) + 1))
    assert (line.manylinux, line.cxx11_abi) == (release.manylinux, release.cxx11_abi), release


@pytest.mark.parametrize("needed, version, pin", [
    ({"libtorch.so", "libcudart.so.11.0"}, "2.7.1+cu118", "torch==2.7.1+cu118"),  # PyPI's 2.7.1 is cu126
    ({"libtorch.so", "libtorch_cuda.so"}, "2.7.1+cu126", "torch==2.7.1"),  # ... so this one keeps the plain pin
    ({"libtorch.so", "libcudart.so.13"}, "2.13.0+cu130", "torch==2.13.0"),
    ({"libtorch.so", "libcudart.so.13"}, "2.13.0", "torch==2.13.0"),
    ({"libtorch.so", "libc10.so"}, "2.7.1+cu118", "torch==2.7.1"),  # a CPU op runs on every build
    ({"libtorch.so"}, "2.13.0+cpu", "torch==2.13.0"),
])
def test_torch_pin_names_the_cuda_build_only_where_pypi_has_another(needed, version, pin):
    from wheelci.repair import torch_pin

    assert torch_pin(needed, version) == pin


def test_torch_pin_follows_the_matrix():
    from wheelci.repair import torch_pin

    for row in mx.rows():
        for build in row.torch:
            local = "cu" + row.version.replace(".", "")
            pin = torch_pin({"libcudart.so"}, f"{build.version}+{local}")
            assert pin == (f"torch=={build.version}" if build.on_pypi else f"torch=={build.version}+{local}")
