"""PEP 825 wheel variants end to end: the files (checked with variantlib, the reference implementation),
ci.index's variants files and PyTorch-style roots, ci.upload against pypiserver, and real installers
choosing: uv 0.13.9 with its wheel-variants preview and built-in nvidia provider (a machine faked with
NV_VARIANT_PROVIDER_FORCE_*), pip (which has no variant support).

The fast tests use small pure wheels made variants by ci.wheel.variant; the slow ones build
tests/fixtures/tiny_ext for real (CPU plain wheel, CUDA 13.0 variant) and serve the set on loopback.
The gpu test lets uv read a real driver and runs the variant's CUDA tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests._servers import NegotiatingServer, PypiServer, StaticServer
from tests._wheels import age_past_racy, assert_valid_record, build_wheel, run_stage
from wheelci.errors import CiError
from wheelci.index import build_index
from wheelci.wheel import variant as v
from wheelci.wheel.names import WheelName
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"
# the pinned uv beside this interpreter (the dev venv), else $UV or the one on PATH (a GPU machine's)
UV = next(Path(c) for c in (str(Path(sys.executable).with_name("uv")), os.environ.get("UV"), shutil.which("uv"), "uv")
          if c and Path(c).is_file() or c == "uv")
FORCE_DRIVER = "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION"
FORCE_SM = "NV_VARIANT_PROVIDER_FORCE_SM_ARCH"


def variantlib_dist_info(wheel: Path):
    """The wheel's variant.json as variantlib reads it (raises on anything it refuses)."""
    from variantlib.variant_dist_info import VariantDistInfo

    name = WheelName.parse(wheel.name)
    with zipfile.ZipFile(wheel) as z:
        (member,) = [n for n in z.namelist() if n.endswith(".dist-info/variant.json")]
        return VariantDistInfo(z.read(member), name.variant)


def variantlib_file(path: Path):
    from variantlib.variants_json import VariantsJson

    return VariantsJson(json.loads(path.read_text()))


def properties(info, label: str) -> set[str]:
    return {p.to_str() for p in info.variants[label].properties}


# ---------------------------------------------------------------- names and what a build declares (pure)


@pytest.mark.parametrize("filename, label, build", [
    ("x-1.0-cp311-cp311-manylinux_2_28_x86_64-cu130.whl", "cu130", None),
    ("x-1.0-1-cp311-cp311-manylinux_2_28_x86_64-cu13.whl", "cu13", "1"),
    ("x-1.0-1-cp311-cp311-manylinux_2_28_x86_64.whl", None, "1"),
    ("x-1.0-py3-none-any-null.whl", "null", None),
])
def test_wheel_names_carry_the_label(filename, label, build):
    name = WheelName.parse(filename)
    assert (name.variant, name.build, name.filename) == (label, build, filename)
    assert v.plain_name(name) == filename.replace(f"-{label}.whl", ".whl") if label else True


@pytest.mark.parametrize("filename, words", [
    ("x-1.0-py3-none-any-CU130.whl", "variant label 'CU130'"),
    ("x-1.0-py3-none-any-abcdefghijklmnopq.whl", "1-16 characters"),
    ("x-1.0-b-py3-none-any-cu130.whl", "build tag must start with a digit"),
])
def test_bad_labels_are_refused(filename, words):
    with pytest.raises(CiError, match=words):
        WheelName.parse(filename)


def test_sm_arch_is_declared_only_for_lists_without_ptx():
    assert v.sm_arch("9.0") == ["90_real"]
    assert v.sm_arch("9.0a; 8.6,8.0") == ["80_real", "86_real", "90_real"]
    assert v.sm_arch("8.0;9.0+PTX") is None
    doc = v.cuda_variant("13.0", "9.0")
    assert doc.variants == {"cu130": {"nvidia": {"cuda_version_lower_bound": ["13.0"], "sm_arch": ["90_real"]}}}
    assert list(v.cuda_variant("13.0", "7.5;12.0+PTX", stable_major=13).variants) == ["cu13"]
    # every default list of the CUDA matrix ends in PTX: a default build serves every newer GPU too
    from wheelci.config import matrix

    for row in matrix.load().rows:
        assert v.sm_arch(row.arch_list) is None, row.version
        assert v.cuda_variant(row.version, row.arch_list).variants[v.cuda_label(row.version)] == {
            "nvidia": {"cuda_version_lower_bound": [row.version]}}


def test_local_labels_name_their_root():
    assert [v.root_label(x) for x in ("0.1.0+pt2.13.0.cu130", "0.1.0+cu13", "0.1.0+pt2.13.0.cpu", "0.1.0",
                                      "0.1.0+internal.1")] == ["cu130", "cu13", "cpu", None, None]


# ---------------------------------------------------------------- the variant wheel


def test_a_variant_wheel_is_the_plain_wheel_plus_its_variant_json(tmp_path):
    plain = build_wheel(tmp_path / "in", files={"demo/__init__.py": "X = 1\n"})
    out = v.add_variant(plain, tmp_path / "out", v.cuda_variant("13.0", "9.0"))
    assert out.name == "demo-1.0-py3-none-any-cu130.whl"
    info = variantlib_dist_info(out)
    assert properties(info, "cu130") == {"nvidia :: cuda_version_lower_bound :: 13.0", "nvidia :: sm_arch :: 90_real"}
    # what uv's built-in provider answers to, spelled exactly
    assert info.providers["nvidia"].requires == ["nvidia-variant-provider>=0.0.1,<1.0.0"]
    assert info.providers["nvidia"].plugin_api == "nvidia_variant_provider.plugin:NvidiaVariantPlugin"
    members = assert_valid_record(out)
    with zipfile.ZipFile(plain) as z:
        assert all(members[n] == z.read(n) for n in z.namelist() if not n.endswith("RECORD"))
    with pytest.raises(CiError, match="already a variant wheel"):
        v.add_variant(out, tmp_path / "again", v.cuda_variant("12.8", "9.0"))


def test_settings_read_variants(tmp_path):
    from wheelci.config.project import read_settings

    (tmp_path / "pyproject.toml").write_text("[tool.wheelci]\nvariants = true\n")
    assert read_settings(tmp_path).variants is True
    (tmp_path / "pyproject.toml").write_text('[tool.wheelci]\nvariants = "yes"\n')
    with pytest.raises(CiError, match="variants must be true or false"):
        read_settings(tmp_path)


# ---------------------------------------------------------------- ci.index


@pytest.fixture
def release(tmp_path) -> Path:
    """demo 1.0 as a release with variants: the plain wheel, cu130 (PTX: no sm_arch) and cu128
    (sm_80/90 only) variants, and the local-labelled cu130 build for the PyTorch-style root."""
    dist = tmp_path / "dist"
    plain = build_wheel(dist, files={"demo/__init__.py": "BUILD = 'plain'\n"})
    for cuda, archs in (("13.0", "7.5;9.0+PTX"), ("12.8", "8.0;9.0")):
        label = v.cuda_label(cuda)
        src = build_wheel(tmp_path / label, files={"demo/__init__.py": f"BUILD = {label!r}\n"})
        v.add_variant(src, dist, v.cuda_variant(cuda, archs))
    build_wheel(dist, version="1.0+pt2.13.0.cu130", files={"demo/__init__.py": "BUILD = 'cu130 local'\n"})
    assert plain.exists()
    age_past_racy(tmp_path)  # the second index run below must find every hash trusted
    return dist


def test_index_links_a_variants_file_variantlib_accepts(release):
    r = run_stage("ci.index", release, "--json")
    assert r.returncode == 0, r.stderr
    out = release / "simple"
    info = variantlib_file(out / "demo" / "demo-1.0-variants.json")
    assert properties(info, "cu130") == {"nvidia :: cuda_version_lower_bound :: 13.0"}
    assert properties(info, "cu128") == {"nvidia :: cuda_version_lower_bound :: 12.8", "nvidia :: sm_arch :: 80_real",
                                         "nvidia :: sm_arch :: 90_real"}
    import hashlib

    digest = hashlib.sha256((out / "demo" / "demo-1.0-variants.json").read_bytes()).hexdigest()
    page = (out / "demo" / "index.html").read_text()
    assert f'<a href="demo-1.0-variants.json#sha256={digest}">demo-1.0-variants.json</a>' in page
    files = {f["filename"]: f for f in json.loads((out / "demo" / "index.json").read_text())["files"]}
    assert files["demo-1.0-variants.json"]["hashes"]["sha256"] == digest
    # the project page holds the plain wheel and the variants; the local build lives in its root only
    assert set(files) == {"demo-1.0-py3-none-any.whl", "demo-1.0-py3-none-any-cu130.whl",
                          "demo-1.0-py3-none-any-cu128.whl", "demo-1.0-variants.json"}
    root_files = [f["filename"] for f in json.loads((out / "cu130" / "demo" / "index.json").read_text())["files"]]
    assert root_files == ["demo-1.0+pt2.13.0.cu130-py3-none-any.whl"]
    assert json.loads((out / "index.json").read_text())["projects"] == [{"name": "demo"}]
    # incremental, like every page: a second run reads and writes nothing
    again = json.loads(run_stage("ci.index", release, "--json").stdout)
    assert (again["hashed"], again["written"], again["removed"]) == (0, [], [])
    # a variant gone: the file follows; the root goes with its last build, and only what ci.index wrote goes
    (release / "demo-1.0-py3-none-any-cu128.whl").unlink()
    (release / "demo-1.0+pt2.13.0.cu130-py3-none-any.whl").unlink()
    (out / "cu130" / "notes.txt").write_text("not ours")
    third = json.loads(run_stage("ci.index", release, "--json").stdout)
    assert str(out / "demo" / "demo-1.0-variants.json") in third["written"]
    assert list(variantlib_file(out / "demo" / "demo-1.0-variants.json").variants) == ["cu130"]
    assert not (out / "cu130" / "demo").exists() and (out / "cu130" / "notes.txt").exists()


def test_a_variants_file_in_dir_is_linked_when_it_agrees(release):
    build_index(release, release.parent / "first")
    shutil.copy(release.parent / "first" / "demo" / "demo-1.0-variants.json", release)
    out = release / "simple"
    build_index(release, out)
    assert not (out / "demo" / "demo-1.0-variants.json").exists()
    assert '<a href="../../demo-1.0-variants.json#sha256=' in (out / "demo" / "index.html").read_text()


def test_index_into_dir_itself_does_not_take_its_own_file_for_input(release):
    first = build_index(release, release)
    assert (release / "demo" / "demo-1.0-variants.json").exists()
    again = build_index(release, release)
    assert (again.written, again.removed) == ([], []) and first.files == again.files


def refused(dist: Path, *words: str) -> None:
    """ci.index refuses: exit 2, one line naming the problem, nothing written."""
    r = run_stage("ci.index", dist)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), r.stderr
    assert not (dist / "simple").exists()
    assert not list(dist.rglob("*.metadata"))


def test_variants_of_one_release_with_different_versions_are_refused(release, tmp_path):
    other = build_wheel(tmp_path / "local", version="1.0+x")
    v.add_variant(other, release, v.cuda_variant("12.9", "9.0"))
    refused(release, "disagree on the version", "1.0, 1.0+x")


def test_a_label_used_twice_is_refused(release, tmp_path):
    other = build_wheel(tmp_path / "abi3", tag="cp311-abi3-linux_x86_64")
    doc = v.cuda_variant("13.0", "9.0")  # cu130 again, now with sm_arch
    v.add_variant(other, release, doc)
    refused(release, "label cu130 is used twice with different properties", "sm_arch :: 90_real")


def test_a_variants_file_the_wheels_contradict_is_refused(release, tmp_path):
    # cu128 as its wheel says, cu130 with an sm_arch its wheel does not declare
    doc = v.merge("demo 1.0", [("a", v.cuda_variant("12.8", "8.0;9.0")), ("b", v.cuda_variant("13.0", "9.0"))])
    (release / "demo-1.0-variants.json").write_bytes(v.dumps(doc))
    refused(release, "demo-1.0-variants.json contradicts the variant wheels of demo 1.0",
            "it says cu130 is nvidia :: cuda_version_lower_bound :: 13.0, nvidia :: sm_arch :: 90_real")


def test_a_variant_wheel_without_variant_json_is_refused(release, tmp_path):
    plain = build_wheel(tmp_path / "bare")
    shutil.copy(plain, release / "demo-1.0-py3-none-any-cu129.whl")
    refused(release, "variant label cu129 but no demo-1.0.dist-info/variant.json")


def test_a_variants_file_ci_index_did_not_write_is_never_replaced(release):
    page = release / "simple" / "demo" / "demo-1.0-variants.json"
    page.parent.mkdir(parents=True)
    page.write_text("{}\n")
    r = run_stage("ci.index", release)
    assert r.returncode == 2 and "refusing to overwrite files python -m ci.index did not write" in r.stderr, r.stderr
    assert page.read_text() == "{}\n" and not (release / "simple" / "demo" / "index.html").exists()


def test_a_release_of_variants_alone_is_indexed_with_a_warning(tmp_path):
    dist = tmp_path / "dist"
    v.add_variant(build_wheel(tmp_path / "in"), dist, v.cuda_variant("13.0", "9.0"))
    r = run_stage("ci.index", dist)
    assert r.returncode == 0, r.stderr
    assert "has variant wheels but no plain wheel" in r.stderr


# ---------------------------------------------------------------- real installers


def fresh_venv(path: Path) -> Path:
    _proc.run([str(UV), "venv", "-q", "--python", sys.executable, str(path)], check=True)
    return path / "bin" / "python"


def uv_install(python: Path, index: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """uv pip install with the wheel-variants preview; env fakes (or, left out, hides) the GPU machine."""
    base = {k: val for k, val in os.environ.items() if not k.startswith(("UV_", "NV_VARIANT_", "PIP_"))}
    full = {**base, "UV_PREVIEW_FEATURES": "wheel-variants", "UV_NO_CONFIG": "1",
            "UV_CACHE_DIR": str(python.parent.parent.parent / "uv-cache"), **env}
    return _proc.run([str(UV), "pip", "install", "--python", str(python), "--no-deps", "--index-url", index,
                      *args], capture_output=True, text=True, env=full)


def pip_install(python: Path, index: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: val for k, val in os.environ.items() if not k.startswith("PIP_")}
    return _proc.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--isolated",
                      "--no-cache-dir", "--disable-pip-version-check", "--no-deps", "--index-url", index, *args],
                     capture_output=True, text=True, env=env)


def installed(python: Path, project: str) -> tuple[str, str | None]:
    """(version, variant label or None) of what the installer put there, read from its dist-info."""
    code = ("import importlib.metadata as m, json, sys; d = m.distribution(sys.argv[1]); "
            "t = d.read_text('variant.json'); print(json.dumps([d.version, t and list(json.loads(t)['variants'])[0]]))")
    r = _proc.run([str(python), "-c", code, project], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    version, label = json.loads(r.stdout)
    return version, label


MACHINES = [  # (what the provider is told, the build uv must choose)
    ({}, None),  # no driver: the plain wheel
    ({FORCE_DRIVER: "13.0"}, "cu130"),
    ({FORCE_DRIVER: "12.9", FORCE_SM: "8.6"}, "cu128"),  # sm_86 runs the cu128 variant's sm_80 code
    ({FORCE_DRIVER: "12.9", FORCE_SM: "7.5"}, None),  # a GPU the cu128 variant has no code for
    ({FORCE_DRIVER: "12.6"}, None),  # a driver older than every variant
]


@pytest.mark.parametrize("machine, want", MACHINES)
def test_uv_chooses_the_variant_the_machine_supports(release, tmp_path, machine, want):
    build_index(release)
    with NegotiatingServer(release) as server:
        python = fresh_venv(tmp_path / "venv")
        r = uv_install(python, server.url + "simple/", "demo", **machine)
        assert r.returncode == 0, r.stderr
        assert installed(python, "demo") == ("1.0", want)
        assert ("/simple/demo/", "index.json") in server.served  # uv read the PEP 691 page


def test_uv_reads_the_html_page_too(release, tmp_path):
    build_index(release)
    with StaticServer(release, tmp_path / "access.log") as server:
        python = fresh_venv(tmp_path / "venv")
        r = uv_install(python, server.url + "simple/", "demo", **{FORCE_DRIVER: "13.0"})
        assert r.returncode == 0, r.stderr
        assert installed(python, "demo") == ("1.0", "cu130")
        assert any("demo-1.0-variants.json" in line for line in server.requests())


def test_pip_takes_the_plain_wheel_and_the_cuda_root_takes_the_local_build(release, tmp_path):
    build_index(release)
    with NegotiatingServer(release) as server:
        python = fresh_venv(tmp_path / "venv")
        r = pip_install(python, server.url + "simple/", "demo")
        assert r.returncode == 0, r.stderr
        assert installed(python, "demo") == ("1.0", None)
        r = pip_install(python, server.url + "simple/cu130/", "--force-reinstall", "demo")
        assert r.returncode == 0, r.stderr
        assert installed(python, "demo") == ("1.0+pt2.13.0.cu130", None)


def test_a_release_without_variants_serves_its_cpu_build_on_the_page_and_cuda_from_its_root(tmp_path):
    """A classic release of a +pt2.13.0.cpu and a +pt2.13.0.cu130 build: on the project page the CUDA build
    would outrank the CPU one (pip and uv take the higher local label) and a machine with a CPU torch would
    get a build it cannot load. The page serves the CPU build; the CUDA build is served from simple/cu130/."""
    dist = tmp_path / "dist"
    for label in ("cpu", "cu130"):
        build_wheel(dist, version=f"1.0+pt2.13.0.{label}", files={"demo/__init__.py": f"BUILD = {label!r}\n"})
    build_index(dist)
    page = (dist / "simple" / "demo" / "index.html").read_text()
    assert "1.0+pt2.13.0.cpu" in page and "cu130" not in page
    assert "1.0+pt2.13.0.cu130" in (dist / "simple" / "cu130" / "demo" / "index.html").read_text()
    with NegotiatingServer(dist) as server:
        for install in (pip_install, uv_install):
            python = fresh_venv(tmp_path / f"venv-{install.__name__}")
            r = install(python, server.url + "simple/", "demo")
            assert r.returncode == 0, r.stderr
            assert installed(python, "demo") == ("1.0+pt2.13.0.cpu", None), install.__name__
            r = install(python, server.url + "simple/cu130/", "--reinstall" if install is uv_install else
                        "--force-reinstall", "demo")
            assert r.returncode == 0, r.stderr
            assert installed(python, "demo") == ("1.0+pt2.13.0.cu130", None), install.__name__


# ---------------------------------------------------------------- ci.upload and pypiserver


@pytest.fixture
def pypiserver(tmp_path):
    with PypiServer(tmp_path / "pypiserver", "ci", "secret-pw") as server:
        yield server


def upload(server: PypiServer, *files: Path) -> subprocess.CompletedProcess:
    return run_stage("ci.upload", "--repository-url", server.url, "--no-check", *files,
                     env={"TWINE_USERNAME": "ci", "TWINE_PASSWORD": "secret-pw"})


def test_pypiserver_refuses_the_variants_file_and_nothing_is_uploaded(release, pypiserver):
    build_index(release)
    r = upload(pypiserver, *sorted(release.glob("demo-1.0-*.whl")), release / "simple" / "demo" / "demo-1.0-variants.json")
    assert r.returncode == 1, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "refused demo-1.0-variants.json: HTTP 400" in line and "Bad filename" in line, r.stderr
    assert "does not take a release's variants file" in line and "secret-pw" not in r.stderr
    assert not any(pypiserver.packages.iterdir())


def test_variant_wheels_without_their_file_upload_with_a_warning(release, pypiserver, tmp_path):
    r = upload(pypiserver, *sorted(release.glob("demo-1.0-*.whl")))
    assert r.returncode == 0, r.stderr
    assert "variant wheels without the release's variants file" in r.stderr
    assert sorted(p.name for p in pypiserver.packages.iterdir()) == sorted(p.name for p in release.glob("demo-1.0-*.whl"))
    python = fresh_venv(tmp_path / "venv")  # pip reads pypiserver's page and takes the plain wheel
    r = pip_install(python, pypiserver.url + "simple/", "demo")
    assert r.returncode == 0, r.stderr
    assert installed(python, "demo") == ("1.0", None)


def test_upload_refuses_a_variants_file_its_wheels_contradict(release, pypiserver, tmp_path):
    doc = v.merge("demo 1.0", [("x", v.cuda_variant("13.0", "9.0"))])
    (tmp_path / "demo-1.0-variants.json").write_bytes(v.dumps(doc))
    r = upload(pypiserver, release / "demo-1.0-py3-none-any-cu130.whl", tmp_path / "demo-1.0-variants.json")
    assert r.returncode == 2, r.stderr
    assert "contradicts the variant wheels given with it" in r.stderr.strip().splitlines()[-1]
    assert not any(pypiserver.packages.iterdir())


# ---------------------------------------------------------------- split


from tests.test_split import native_wheel  # noqa: E402,F401  (the fixture: demo with three 200 kB libraries)


def test_a_split_companion_of_a_variant_is_that_variant_too(native_wheel, tmp_path):
    variant = v.add_variant(native_wheel, tmp_path / "variant", v.cuda_variant("13.0", "9.0"))
    out = tmp_path / "split"
    r = run_stage("ci.split", variant, "--limit", "300KB", "-w", out, "--json")
    assert r.returncode == 0, r.stderr
    parts = [Path(w["path"]) for w in json.loads(r.stdout)["wheels"]]
    assert [p.name for p in parts] == [f"{d}-1.0+cpu-py3-none-linux_x86_64-cu130.whl"
                                       for d in ("demo", "demo_libs", "demo_libs2")]
    for p in parts:
        assert properties(variantlib_dist_info(p), "cu130") == {"nvidia :: cuda_version_lower_bound :: 13.0",
                                                               "nvidia :: sm_arch :: 90_real"}
        assert_valid_record(p)
    index = build_index(out)
    assert index.projects == 3
    for project in ("demo", "demo_libs", "demo_libs2"):
        variantlib_file(out / "simple" / project.replace("_", "-") / f"{project}-1.0+cpu-variants.json")
    # uv installs the three as one variant set on a machine they suit, and the split package works
    target = tmp_path / "site"
    env = {k: val for k, val in os.environ.items() if not k.startswith(("UV_", "NV_VARIANT_"))}
    r = _proc.run([str(UV), "pip", "install", "--no-deps", "--target", str(target), "--python", sys.executable,
                   *map(str, parts)], capture_output=True, text=True,
                  env={**env, "UV_PREVIEW_FEATURES": "wheel-variants", "UV_NO_CONFIG": "1",
                       "UV_CACHE_DIR": str(tmp_path / "uv-cache"), FORCE_DRIVER: "13.0", FORCE_SM: "9.0"})
    assert r.returncode == 0, r.stderr
    r = _proc.run([sys.executable, "-c", "import demo; print(demo.answer())"], capture_output=True, text=True,
                  env={"PATH": os.environ["PATH"], "PYTHONPATH": str(target)}, cwd="/")
    assert r.returncode == 0 and r.stdout.strip() == "63", r.stderr


# ---------------------------------------------------------------- tiny_ext built for real (slow)


@pytest.fixture(scope="module")
def tiny_release(tmp_path_factory) -> Path:
    """tiny_ext's release as the host builds it: the CPU plain wheel (--local-version none) and the CUDA
    13.0 variant with its local-labelled twin (--variant; arch 9.0 keeps the compile short), in one
    directory. WHEELCI_VARIANT_DIST names a directory of such wheels built elsewhere (a GPU machine
    without the package index runs the gpu test on those)."""
    given = os.environ.get("WHEELCI_VARIANT_DIST")
    if given:
        return Path(given)
    dist = tmp_path_factory.mktemp("tiny-release")
    for args in (("--cpu", "--local-version", "none"), ("--cuda", "13.0", "--variant", "--arch-list", "9.0")):
        out = tmp_path_factory.mktemp("tiny-build")
        r = run_stage("ci.build", TINY, "--engine", "host", *args, "-w", out)
        assert r.returncode == 0, r.stderr[-3000:]
        report = json.loads((out / "report.json").read_text())
        assert report["passed"] and all(w["name"] in {p.name for p in out.glob("*.whl")} for w in report["wheels"])
        for wheel in out.glob("*.whl"):
            shutil.copy(wheel, dist)
    return dist


def tiny_names(dist: Path) -> dict[str, Path]:
    """plain / variant / local: the release's three wheels."""
    found: dict[str, Path] = {}
    for wheel in dist.glob("tiny_ext-*.whl"):
        name = WheelName.parse(wheel.name)
        found["variant" if name.variant else "local" if "+" in name.version else "plain"] = wheel
    return found


@pytest.mark.slow
@pytest.mark.network
def test_tiny_ext_builds_a_plain_wheel_and_a_variant(tiny_release):
    wheels = tiny_names(tiny_release)
    assert sorted(wheels) == ["local", "plain", "variant"], sorted(p.name for p in tiny_release.iterdir())
    plain, variant, local = (WheelName.parse(wheels[k].name) for k in ("plain", "variant", "local"))
    assert (plain.version, variant.version, variant.variant) == ("0.1.0", "0.1.0", "cu130")
    assert local.version == "0.1.0+pt2.13.0.cu130" and local.tag == variant.tag
    info = variantlib_dist_info(wheels["variant"])
    assert properties(info, "cu130") == {"nvidia :: cuda_version_lower_bound :: 13.0", "nvidia :: sm_arch :: 90_real"}
    assert_valid_record(wheels["variant"])
    from wheelci.native.elf import device_code

    assert device_code(wheels["variant"]) and not device_code(wheels["plain"])


TINY_MACHINES = [
    ({FORCE_DRIVER: "13.0", FORCE_SM: "9.0"}, "cu130"),  # an H100 with a CUDA 13 driver
    ({FORCE_DRIVER: "13.0"}, None),  # no GPU arch known: the sm_90-only variant is not offered
    ({FORCE_DRIVER: "13.0", FORCE_SM: "8.9"}, None),  # a GPU the variant has no code for
    ({FORCE_DRIVER: "12.8", FORCE_SM: "9.0"}, None),  # a driver older than the toolkit
    ({}, None),  # no driver
]


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("machine, want", TINY_MACHINES)
def test_uv_installs_tiny_ext_as_the_machine_allows(tiny_release, tmp_path, machine, want):
    dist = tmp_path / "dist"
    shutil.copytree(tiny_release, dist)
    r = run_stage("ci.index", dist)
    assert r.returncode == 0, r.stderr
    variantlib_file(dist / "simple" / "tiny-ext" / "tiny_ext-0.1.0-variants.json")
    with NegotiatingServer(dist) as server:
        python = fresh_venv(tmp_path / "venv")
        r = uv_install(python, server.url + "simple/", "tiny-ext", **machine)
        assert r.returncode == 0, r.stderr
        assert installed(python, "tiny-ext") == ("0.1.0", want)


@pytest.mark.slow
@pytest.mark.network
def test_pip_installs_tiny_ext_plain_and_from_the_cu130_root(tiny_release, tmp_path):
    dist = tmp_path / "dist"
    shutil.copytree(tiny_release, dist)
    build_index(dist)
    with NegotiatingServer(dist) as server:
        python = fresh_venv(tmp_path / "venv")
        r = pip_install(python, server.url + "simple/", "tiny-ext")
        assert r.returncode == 0, r.stderr
        assert installed(python, "tiny-ext") == ("0.1.0", None)
        r = pip_install(python, server.url + "simple/cu130/", "--force-reinstall", "tiny-ext")
        assert r.returncode == 0, r.stderr
        assert installed(python, "tiny-ext") == ("0.1.0+pt2.13.0.cu130", None)


# ---------------------------------------------------------------- a real GPU (gpu)


def _torch_cuda() -> str | None:
    """Why this interpreter cannot run the variant's CUDA tests, or None when it can."""
    r = _proc.run([sys.executable, "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"],
                  capture_output=True, text=True)
    if r.returncode != 0:
        return "no torch in the interpreter running the tests"
    version, available = r.stdout.split()
    return None if available == "True" else f"torch {version} sees no CUDA device"


@pytest.mark.gpu
@pytest.mark.slow
def test_uv_reads_the_real_driver_and_the_variants_cuda_tests_pass(tiny_release, tmp_path):
    """On a GPU machine: uv's nvidia provider reads the real driver and GPU (nothing forced), picks the
    cu130 variant, and tiny_ext's own tests pass against what uv installed, its CUDA kernel included,
    run by this interpreter (whose torch must be the one the wheels were built against)."""
    why = _torch_cuda()
    if why:
        pytest.skip(why)
    dist = tmp_path / "dist"
    shutil.copytree(tiny_release, dist)
    build_index(dist)
    python = fresh_venv(tmp_path / "venv")
    with NegotiatingServer(dist) as server:
        r = uv_install(python, server.url + "simple/", "tiny-ext")
    assert r.returncode == 0, r.stderr
    assert installed(python, "tiny-ext") == ("0.1.0", "cu130"), "uv did not pick the variant for this GPU"
    site = _proc.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     capture_output=True, text=True, check=True).stdout.strip()
    report = tmp_path / "junit.xml"
    r = _proc.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                   str(TINY / "tests")], capture_output=True, text=True, cwd=tmp_path,
                  env={**os.environ, "PYTHONPATH": site})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    import xml.etree.ElementTree as ET

    cases = {c.get("name"): c for c in ET.parse(report).iter("testcase")}
    assert cases["test_add_one_cuda"].find("skipped") is None, "the CUDA test did not run"
    # and the copy those tests imported was uv's
    r = _proc.run([sys.executable, "-c", "import tiny_ext; print(tiny_ext.__file__)"], capture_output=True,
                  text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": site})
    assert r.stdout.strip().startswith(site), r.stdout + r.stderr
