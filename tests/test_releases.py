"""A torch release the matrix does not list is read from its index: its CUDA toolkit, cuDNN, Pythons,
policy and ABI come from its own metadata (PEP 658 where served, else the wheel's METADATA by range
requests), cached with where they came from; the plan takes them with no change to the tool. Real
indexes here: this tool's own static index, served by nginx (ranges) and by a server without ranges."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests import _proc
from tests._servers import NegotiatingServer, Nginx
from tests._wheels import build_wheel, metadata_text, without_metadata
from wheelci import plan as pl
from wheelci.config import matrix as mx
from wheelci.config.releases import TorchIndex, parse_page, parse_release
from wheelci.errors import CiError

ROOT = Path(__file__).resolve().parent.parent
TOOLKIT = "cuda-toolkit[cublas,cudart]==13.3.1; platform_system == \"Linux\""
CUDNN = "nvidia-cudnn-cu13==9.30.0.1; platform_system == \"Linux\""
TAGS = [f"cp3{m}-cp3{m}-manylinux_2_28_x86_64" for m in (11, 12, 13)] + ["cp313-cp313t-manylinux_2_28_x86_64",
                                                                         "cp310-cp310-win_amd64"]


def names(version: str, tags=TAGS) -> list[str]:
    return [f"torch-{version}-{t}.whl" for t in tags]


def test_a_release_is_what_its_metadata_and_files_say():
    text = metadata_text("torch", "2.99.0", (TOOLKIT, CUDNN, "filelock"), headers="Requires-Python: >=3.11")
    release = parse_release(text, names("2.99.0") + names("2.98.0"), "https://idx/torch.metadata")
    assert (release.version, release.cuda, release.cudnn) == ("2.99.0", "13.3", "nvidia-cudnn-cu13==9.30.0.1")
    assert release.toolkit == "cuda-toolkit[cublas,cudart]==13.3.1"
    assert release.python == ("3.11", "3.12", "3.13")  # free-threaded and Windows wheels aside
    assert (release.manylinux, release.cxx11_abi) == ("manylinux_2_28", True)
    assert release.line == mx.TorchLine("2.99", ("3.11", "3.12", "3.13"), "manylinux_2_28", True)


def test_an_older_release_pins_the_runtime_and_is_pre_cxx11():
    """torch 2.6 and before: nvidia-cuda-runtime-cuNN pins the toolkit, manylinux1 wheels, the old ABI."""
    text = metadata_text("torch", "2.6.0", ('nvidia-cuda-runtime-cu12==12.4.127; platform_system == "Linux" and '
                                            'platform_machine == "x86_64"', "nvidia-cudnn-cu12==9.1.0.70"),
                         headers="Requires-Python: >=3.9.0")
    release = parse_release(text, names("2.6.0", ["cp39-cp39-manylinux1_x86_64", "cp313-cp313-manylinux1_x86_64"]), "s")
    assert (release.cuda, release.manylinux, release.cxx11_abi, release.python) == (
        "12.4", "manylinux2014", False, ("3.9", "3.13"))


def test_a_cpu_release_and_a_release_without_linux_wheels():
    cpu = parse_release(metadata_text("torch", "2.99.0+cpu", ("filelock",)), names("2.99.0+cpu"), "s")
    assert (cpu.version, cpu.cuda, cpu.cudnn) == ("2.99.0", None, None)
    with pytest.raises(CiError, match=r"torch 2\.99\.0: no x86_64 Linux wheel at s"):
        parse_release(metadata_text("torch", "2.99.0"), names("2.99.0", ["cp312-cp312-win_amd64"]), "s")


def test_pages_in_both_formats():
    doc = {"meta": {"api-version": "1.1"}, "name": "torch", "files": [
        {"filename": "torch-2.99.0-cp311-cp311-manylinux_2_28_x86_64.whl", "url": "../../t.whl",
         "hashes": {}, "core-metadata": {"sha256": "x"}}]}
    (f,) = parse_page(json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json", "http://h/simple/torch/")
    assert (f.url, f.metadata) == ("http://h/t.whl", True)
    html = b'<a href="/w/torch-2.99.0-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=ab">x</a>'
    (f,) = parse_page(html, "text/html", "http://h/simple/torch/")
    assert (f.filename, f.url, f.metadata) == ("torch-2.99.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                                               "http://h/w/torch-2.99.0-cp311-cp311-manylinux_2_28_x86_64.whl", False)
    with pytest.raises(CiError, match="not a simple index page"):
        parse_page(b"{}", "application/vnd.pypi.simple.v1+json", "http://h/simple/torch/")


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    """A static index (this tool's `index` stage) of two torch releases the matrix does not list: 2.99.0
    pins a newer CUDA toolkit (13.3) than any listed torch, 2.98.0 is a CPU build."""
    dist = tmp_path_factory.mktemp("dist")
    for version, requires in (("2.99.0", (TOOLKIT, CUDNN, "filelock")), ("2.98.0", ("filelock",))):
        for tag in ("cp311-cp311-manylinux_2_28_x86_64", "cp312-cp312-manylinux_2_28_x86_64"):
            build_wheel(dist, "torch", version, {"torch/__init__.py": ""}, tag=tag, requires=requires,
                        headers="Requires-Python: >=3.11")
    r = _proc.run([sys.executable, "-m", "ci.index", str(dist)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return dist


def test_read_from_a_local_index_and_cached_with_its_source(index_dir, tmp_path):
    index = TorchIndex((index_dir / "simple").as_uri(), tmp_path / "cache")
    assert index.versions() == ["2.98.0", "2.99.0"] and index.latest() == "2.99.0"
    release = index.release("2.99.0")
    assert (release.cuda, release.cudnn, release.python) == ("13.3", "nvidia-cudnn-cu13==9.30.0.1", ("3.11", "3.12"))
    assert release.source.endswith("-manylinux_2_28_x86_64.whl.metadata")  # PEP 658, as the index serves it
    (cached,) = (tmp_path / "cache").glob("*/2.99.0.json")
    assert json.loads(cached.read_text())["source"] == release.source
    shutil.rmtree(index_dir / "simple" / "torch")  # read from the cache now, not the index
    try:
        assert TorchIndex((index_dir / "simple").as_uri(), tmp_path / "cache").release("2.99.0") == release
    finally:
        _proc.run([sys.executable, "-m", "ci.index", str(index_dir)], cwd=ROOT, check=True, capture_output=True)
    cached.write_text("{cut off")  # a broken cache entry is read again, never trusted
    assert TorchIndex((index_dir / "simple").as_uri(), tmp_path / "cache").release("2.99.0") == release


def test_a_release_the_index_does_not_have_is_one_error(index_dir, tmp_path):
    index = TorchIndex((index_dir / "simple").as_uri(), tmp_path / "cache")
    with pytest.raises(CiError, match=r"torch 9\.9\.9 is not on file://.* \(newest there: 2\.99\.0\)"):
        index.release("9.9.9")


def test_over_http_the_wheel_is_read_by_ranges_when_no_metadata_is_served(index_dir, tmp_path):
    """nginx serves ranges: with the .metadata files gone, METADATA comes from the wheel itself, by a
    few range requests, not the whole file."""
    served = without_metadata(index_dir, tmp_path / "served")
    with Nginx(served, tmp_path / "nginx") as nginx:
        release = TorchIndex(nginx.url + "simple", tmp_path / "cache").release("2.99.0")
        log = (tmp_path / "nginx" / "access.log").read_text()
    assert (release.cuda, release.source.endswith(".whl")) == ("13.3", True)
    gets = [line for line in log.splitlines() if '"GET /torch-2.99.0' in line]
    assert gets and all('HTTP/1.1" 206 ' in line for line in gets), log  # ranges only, never the whole wheel


def test_a_server_without_ranges_is_one_error(index_dir, tmp_path):
    served = without_metadata(index_dir, tmp_path / "served")
    with NegotiatingServer(served) as server:
        with pytest.raises(CiError, match="the server ignores range requests"):
            TorchIndex(server.url + "simple", tmp_path / "cache").release("2.99.0")


def test_the_plan_takes_a_release_the_matrix_does_not_list(index_dir, tmp_path):
    """Tomorrow's torch: --torch 2.99.0 --cuda 13.3 plans from its metadata, and the note says where
    it came from; `latest` names it; a CUDA it was not built on, and a CPU release, are refused or taken."""
    index = TorchIndex((index_dir / "simple").as_uri(), tmp_path / "cache")

    def plan(**kw):
        return pl.make_plan(pl.Request(engine="host", **kw), project_dir=ROOT, index=index)

    p = plan(cuda="13.3", torch="2.99.0")
    assert (p.cuda, p.torch, p.cudnn_requirement, p.manylinux) == ("13.3", "2.99.0", "nvidia-cudnn-cu13==9.30.0.1",
                                                                   "manylinux_2_28")
    assert any(n.startswith("torch 2.99.0 is not in the matrix: CUDA 13.3") and "read from file://" in n
               for n in p.notes), p.notes
    assert plan(cuda="13.3", torch="latest").torch == "2.99.0"
    assert plan(cuda="13.3").torch == "2.99.0"  # the row lists no torch: the index's newest is built on it
    with pytest.raises(CiError, match=r"torch 2\.99\.0 on the index is built on CUDA 13\.3, not 13\.2"):
        plan(cuda="13.2", torch="2.99.0")
    cpu = plan(torch="2.98.0")
    assert (cpu.cuda, cpu.torch, cpu.python) == (None, "2.98.0", [f"{sys.version_info[0]}.{sys.version_info[1]}"])
    with pytest.raises(CiError, match=r"torch 9\.9\.9 is not on"):
        plan(torch="9.9.9")
    with pytest.raises(CiError, match=r"bad --torch '2\.99' \(want a release such as 2\.13\.0, latest"):
        plan(cuda="13.3", torch="2.99")


@pytest.fixture(scope="module")
def re_versioned_index(torch_cpu_wheel, tmp_path_factory) -> Path:
    """A real torch wheel (the 2.13.0 CPU build) published again as 2.99.0, a release no matrix lists,
    in a static index of this tool's own making."""
    from wheelci.wheel.rewrite import rewrite
    from wheelci.wheel.zipread import WheelArchive

    dist = tmp_path_factory.mktemp("re-versioned")
    with WheelArchive.open(torch_cpu_wheel) as wa:
        version_py = wa.read("torch/version.py").decode().replace("'2.13.0+cpu'", "'2.99.0+cpu'")
        rewrite(wa, dist, version="2.99.0+cpu", replace={"torch/version.py": version_py.encode()})
    r = _proc.run([sys.executable, "-m", "ci.index", str(dist)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return dist


@pytest.mark.slow
@pytest.mark.extended  # a build environment of its own and a build: outside CI's budget
@pytest.mark.network  # the build environment's other packages come from PyPI
def test_a_torch_release_no_matrix_lists_builds_and_verifies(re_versioned_index, tmp_path):
    """Tomorrow's torch, served from an index: `build --torch 2.99.0 --torch-index-url INDEX` reads the
    release from that index, makes its build environment from it and builds and verifies tiny_ext on the
    host, with no change to the tool."""
    with Nginx(re_versioned_index, tmp_path / "nginx") as nginx:
        r = _proc.run([sys.executable, "-m", "ci.build", str(ROOT / "tests" / "fixtures" / "tiny_ext"), "--cpu",
                       "--torch", "2.99.0", "--torch-index-url", nginx.url + "simple", "--engine", "host",
                       "-w", str(tmp_path / "out"), "--json"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["passed"] and report["plan"]["torch"] == "2.99.0", report
    assert any("torch 2.99.0 is not in the matrix" in n and nginx.url in n for n in report["plan"]["notes"])
    (wheel,) = (tmp_path / "out").glob("tiny_ext-*.whl")
    from wheelci.wheel.zipread import WheelArchive

    with WheelArchive.open(wheel) as wa:
        assert "Requires-Dist: torch==2.99.0" in wa.metadata


@pytest.mark.slow
@pytest.mark.extended  # a build environment and a CUDA compile of its own: outside CI's budget
@pytest.mark.network  # torch 2.15.0 and its CUDA 13.2 wheels from PyPI, nvcc 13.2 from NVIDIA's wheels
def test_torch_2_15_builds_on_cuda_13_2_on_the_host(tmp_path):
    """The newest torch on its own CUDA: the example (CUDA kernels, cuDNN) built on the host with nvcc and
    headers from NVIDIA's 13.2 wheels, its environment made by uv (pip here is capped below 2.15.0), and
    verified. One arch keeps the compile short; the matrix row's list is the plan's default."""
    r = _proc.run([sys.executable, "-m", "ci.build", "--cuda", "13.2", "--torch", "2.15.0", "--engine", "host",
                   "--arch-list", "9.0", "-w", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["passed"] and (report["plan"]["cuda"], report["plan"]["torch"]) == ("13.2", "2.15.0"), report
    assert report["verify"]["torch"] == "2.15.0+cu132", report["verify"]
    (wheel,) = (tmp_path / "out").glob("softmax_ext-*+pt2.15.0.cu132-*.whl")
    from wheelci.wheel.zipread import WheelArchive

    with WheelArchive.open(wheel) as wa:
        assert "Requires-Dist: nvidia-cudnn-cu13==9.26.0.51" in wa.metadata


def test_hostile_metadata_is_refused_or_read_safely():
    ok = ("3.11", "3.12", "3.13")
    with pytest.raises(CiError, match=r"no CPython wheel for x86_64 Linux within its Requires-Python"):
        parse_release(metadata_text("torch", "2.99.0", headers="Requires-Python: >=3.14"), names("2.99.0"), "s")
    odd = parse_release(metadata_text("torch", "2.99.0", (
        'cuda-toolkit==13.3.1; python_version ~= "abc"',  # a marker that cannot be evaluated: not a pin
        "NVIDIA_CUDNN_CU13==9.30.0.1",  # names compare normalised (PEP 503)
        "nvidia-cuda-runtime==13.*")), names("2.99.0"), "s")  # not a version: no toolkit read from it
    assert (odd.cuda, odd.cudnn, odd.python) == (None, "nvidia-cudnn-cu13==9.30.0.1", ok)


@pytest.mark.parametrize("lie,refusal", [
    (("Version: 2.99.0", "Version: 2.98.0"), r"says it is torch 2\.98\.0, not 2\.99\.0"),
    (("Name: torch", "Name: not-torch"), "not torch's metadata"),
], ids=["another-version", "another-project"])
def test_an_index_whose_metadata_lies_is_refused(index_dir, tmp_path, lie, refusal):
    """The .metadata of torch 2.99.0 naming another version or another project must not plan, nor be
    cached as 2.99.0."""
    lying = tmp_path / "lying"
    shutil.copytree(index_dir, lying)
    (meta,) = [m for m in lying.glob("torch-2.99.0-cp312*.metadata")]
    meta.write_text(meta.read_text().replace(*lie))
    index = TorchIndex((lying / "simple").as_uri(), tmp_path / "cache")
    with pytest.raises(CiError, match=refusal):
        index.release("2.99.0")
    assert not list((tmp_path / "cache").rglob("2.99.0.json"))


def test_a_cache_entry_of_the_wrong_shape_is_read_again(index_dir, tmp_path):
    index = TorchIndex((index_dir / "simple").as_uri(), tmp_path / "cache")
    good = index.release("2.99.0")
    (cached,) = (tmp_path / "cache").rglob("2.99.0.json")
    for bad in ({**json.loads(cached.read_text()), "python": "3.12"}, {**json.loads(cached.read_text()), "cuda": 13.3},
                {**json.loads(cached.read_text()), "version": "2.98.0"}, {**json.loads(cached.read_text()), "python": []}):
        cached.write_text(json.dumps(bad))
        assert TorchIndex((index_dir / "simple").as_uri(), tmp_path / "cache").release("2.99.0") == good


def test_a_mirror_with_a_token_is_read_and_the_token_kept_nowhere(index_dir, tmp_path):
    """userinfo in the index URL becomes basic auth; the token is in no note, error or cache file. A
    remote page's link to this machine's own files is not followed."""
    with NegotiatingServer(index_dir) as server:
        url = server.url.replace("http://", "http://user:s3cr3t-token@") + "simple"
        release = TorchIndex(url, tmp_path / "cache").release("2.99.0")
        p = pl.make_plan(pl.Request(engine="host", cuda="13.3", torch="2.99.0", torch_index_url=url),
                         project_dir=ROOT, env={"WHEELCI_CACHE_DIR": str(tmp_path / "c2")})
        with pytest.raises(CiError) as e:
            TorchIndex(url.replace("/simple", "/nowhere"), tmp_path / "cache").release("2.99.0")
    assert release.cuda == "13.3" and "s3cr3t" not in release.source
    assert "s3cr3t" not in str(e.value) and "s3cr3t" not in json.dumps(p.to_json())
    assert not any("s3cr3t" in f.read_text() for f in (tmp_path / "cache").rglob("*.json"))
    page = json.dumps({"meta": {"api-version": "1.0"}, "name": "torch", "files": [
        {"filename": "torch-2.99.0-cp311-cp311-manylinux_2_28_x86_64.whl", "url": "file:///etc/passwd", "hashes": {}}]})
    assert parse_page(page.encode(), "application/vnd.pypi.simple.v1+json", "http://h/simple/torch/") == []


def test_metadata_must_name_torch_and_one_version():
    """Metadata naming another project, or torch twice, or two Version headers (the second a lie) is no
    release: refused in one line, whatever the files around it say."""
    good = metadata_text("torch", "2.99.0", (TOOLKIT,))
    assert parse_release(good, names("2.99.0"), "s").version == "2.99.0"
    for text, why in ((metadata_text("torch-lookalike", "2.99.0", (TOOLKIT,)), "not torch"),
                      (good.replace("Name: torch", "Name: torch\nName: evil"), "not torch"),
                      (good.replace("Version: 2.99.0", "Version: 2.99.0\nVersion: 2.98.0"), "2 Version headers"),
                      (good.replace("Name: torch\n", ""), "not torch")):
        with pytest.raises(CiError, match=why) as e:
            parse_release(text, names("2.99.0"), "s")
        assert "\n" not in str(e.value)


def test_a_fifo_in_place_of_a_wheel_in_a_file_index_is_refused_not_waited_on(tmp_path):
    """A file: index whose torch wheel is a FIFO (and no .metadata): the plan's open waited for a writer
    forever."""
    import os

    from tests._wheels import run_stage

    index = tmp_path / "idx"
    (index / "torch").mkdir(parents=True)
    wheel = "torch-2.99.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    os.mkfifo(index / "torch" / wheel)
    (index / "torch" / "index.html").write_text(f'<html><body><a href="{wheel}">{wheel}</a></body></html>')
    root = Path(__file__).resolve().parent.parent
    r = run_stage("ci.plan", "--project-dir", root / "tests" / "fixtures" / "tiny_ext", "--cpu", "--torch", "2.99.0",
                  "--torch-index-url", f"file://{index}", env={"WHEELCI_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 2 and "not a regular file" in r.stderr, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1
