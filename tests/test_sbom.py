"""Provenance (wheelci.sbom): every built wheel carries a CycloneDX 1.6 SBOM in .dist-info/sboms/ (PEP 770),
listed in RECORD, valid against the schema (cyclonedx-python-lib's own validator), deterministic, and
naming the project, torch, CUDA and cuDNN, the compiler and what repair grafted and excluded."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
import zipfile
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packaging.requirements import Requirement
from packaging.version import Version

from tests._elfbuild import build_lib, make_wheel
from wheelci import sbom
from wheelci.compile.hostenv import BuildEnv
from wheelci.errors import CiError
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
SBOMS = re.compile(r"^[^/]+\.dist-info/sboms/[^/]+\.cdx\.json$")

CUDA_INPUTS = sbom.Provenance(
    project="demo-ext", version="1.0+pt2.13.0.cu130", wheel="demo_ext-1.0+pt2.13.0.cu130-cp311-cp311-linux_x86_64.whl",
    content_digest="ab" * 32, revision="0123456789abcdef0123456789abcdef01234567", dirty=True, epoch=1_700_000_000,
    torch="2.13.0+cu130", torch_requirement="torch==2.13.0",
    torch_source="https://builder:tok3n-not-shown@packages.example.invalid/whl/cu130",
    cuda="13.0", arch_list="8.0;9.0", cudnn_requirement="nvidia-cudnn-cu13==9.13.0.50",
    nvcc="NVIDIA's nvcc 13.0 wheel (--nvcc wheel)",
    cuda_wheels=(("nvidia-cuda-nvcc", "13.0.88"), ("nvidia-cuda-runtime", "13.0.96")),
    compilers=("GCC: (GNU) 13.2.1 20231205 (Red Hat 13.2.1-6)",),
    grafted=(sbom.Grafted("demo_ext.libs/libgfortran-1a2b3c4d.so.5.0.0", "libgfortran.so.5.0.0", "cd" * 32),),
    excluded=("libc10.so", "libcudart.so.13", "libtorch_cuda.so"), other_sboms=("auditwheel.cdx.json",),
    tool_version="0.5.0")


def valid(text: str) -> dict:
    """The document, after the CycloneDX 1.6 schema's strict validator found nothing wrong with it."""
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    assert error is None, error
    return json.loads(text)


def components(doc: dict) -> dict[str, dict]:
    return {c["bom-ref"]: c for c in doc.get("components", [])}


def props(item: dict) -> dict[str, str]:
    return {p["name"]: p["value"] for p in item.get("properties", [])}


def hex_of(record_hash: str) -> str:
    value = record_hash.partition("=")[2]
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def test_the_document_names_cuda_cudnn_the_toolkit_and_what_repair_did():
    doc = valid(sbom.sbom_document(CUDA_INPUTS))
    assert doc["specVersion"] == "1.6" and doc["bomFormat"] == "CycloneDX"
    parts = components(doc)
    assert parts["cuda"]["version"] == "13.0" and parts["cuda"]["scope"] == "excluded"
    assert props(parts["cuda"]) == {"wheelci:arch-list": "8.0;9.0", "wheelci:toolkit": CUDA_INPUTS.nvcc}
    assert (parts["cudnn"]["name"], parts["cudnn"]["version"]) == ("nvidia-cudnn-cu13", "9.13.0.50")
    assert parts["cudnn"]["purl"] == "pkg:pypi/nvidia-cudnn-cu13@9.13.0.50"
    assert {parts[f"build:{n}"]["version"] for n, _ in CUDA_INPUTS.cuda_wheels} == {"13.0.88", "13.0.96"}
    gcc = parts["compiler:" + CUDA_INPUTS.compilers[0]]
    assert (gcc["name"], gcc["version"]) == ("gcc", "13.2.1")
    grafted = parts["grafted:demo_ext.libs/libgfortran-1a2b3c4d.so.5.0.0"]
    assert grafted["name"] == "libgfortran.so.5.0.0" and grafted["hashes"] == [{"alg": "SHA-256", "content": "cd" * 32}]
    providers = {c["name"]: props(c)["wheelci:provided-by"] for ref, c in parts.items() if ref.startswith("excluded:")}
    assert providers == {"libc10.so": "torch", "libtorch_cuda.so": "torch",
                         "libcudart.so.13": "NVIDIA's CUDA wheels, which torch requires"}
    torch = parts["torch"]
    assert torch["version"] == "2.13.0+cu130" and props(torch)["wheelci:requirement"] == "torch==2.13.0"
    project = doc["metadata"]["component"]
    assert project["name"] == "demo-ext" and project["version"] == "1.0+pt2.13.0.cu130"
    assert project["pedigree"]["commits"] == [{"uid": CUDA_INPUTS.revision}]
    assert props(project)["wheelci:git-dirty"] == "true"
    assert doc["externalReferences"] == [{"type": "bom", "url": "auditwheel.cdx.json",
                                          "comment": "an SBOM of the same wheel, kept as written"}]
    # what the installed wheel needs hangs off the project; what built it does not
    (root,) = [d for d in doc["dependencies"] if d["ref"] == "project"]
    assert set(root["dependsOn"]) == {r for r, c in parts.items() if c["scope"] == "required"}
    assert {"torch", "cudnn"} <= set(root["dependsOn"]) and "cuda" not in root["dependsOn"]


def test_the_document_holds_no_credentials():
    text = sbom.sbom_document(CUDA_INPUTS)
    assert "tok3n-not-shown" not in text and "builder" not in text and not re.search(r"://[^/\s\"]*@", text)
    assert components(json.loads(text))["torch"]["externalReferences"] == [
        {"type": "distribution", "url": "https://packages.example.invalid/whl/cu130"}]


def test_the_document_is_deterministic():
    """Same inputs, same bytes; the serial follows the wheel's content, the timestamp SOURCE_DATE_EPOCH."""
    first = sbom.sbom_document(CUDA_INPUTS)
    assert sbom.sbom_document(dataclasses.replace(CUDA_INPUTS)) == first
    doc = json.loads(first)
    assert doc["metadata"]["timestamp"] == "2023-11-14T22:13:20+00:00"
    other = json.loads(sbom.sbom_document(dataclasses.replace(CUDA_INPUTS, content_digest="cd" * 32)))
    assert other["serialNumber"] != doc["serialNumber"] and other["serialNumber"].startswith("urn:uuid:")
    undated = valid(sbom.sbom_document(dataclasses.replace(CUDA_INPUTS, epoch=None)))
    assert "timestamp" not in undated["metadata"]  # never the clock


def test_a_cpu_build_without_a_checkout_says_so():
    plain = dataclasses.replace(CUDA_INPUTS, revision=None, revision_note="the project directory is not a git checkout",
                                cuda=None, arch_list=None, cudnn_requirement=None, nvcc=None, cuda_wheels=(),
                                grafted=(), other_sboms=(), torch_source=None)
    doc = valid(sbom.sbom_document(plain))
    assert props(doc["metadata"]) == {"wheelci:cuda": "none: a CPU build"}
    assert props(doc["metadata"]["component"]) == {
        "wheelci:git-revision": "absent: the project directory is not a git checkout"}
    assert "pedigree" not in doc["metadata"]["component"]
    assert not {"cuda", "cudnn"} & set(components(doc))


@pytest.mark.parametrize("text,expected", [
    ("GCC: (Debian 12.2.0-14+deb12u1) 12.2.0", ("gcc", "12.2.0")),
    ("GCC: (GNU) 11.2.1 20220127 (Red Hat 11.2.1-9)", ("gcc", "11.2.1")),
    ("Ubuntu clang version 18.1.3 (1ubuntu1)", ("clang", "18.1.3")),
    ("Linker: LLD 18.1.3", ("linker", "18.1.3")),
])
def test_compiler_lines(text, expected):
    assert sbom._compiler(text) == expected


def test_a_bad_source_date_epoch_is_one_error():
    """One reader (wheelci.util.epoch) for the plan, the SBOM and the wheel writers."""
    from wheelci.util import epoch

    assert epoch.from_environ({"SOURCE_DATE_EPOCH": " 1700000000 "}) == 1_700_000_000
    assert epoch.from_environ({}) is None and epoch.from_environ({"SOURCE_DATE_EPOCH": ""}) is None
    with pytest.raises(CiError, match="SOURCE_DATE_EPOCH is not an integer: 'yesterday'"):
        epoch.from_environ({"SOURCE_DATE_EPOCH": "yesterday"})
    with epoch.fixed(1_600_000_000):
        assert epoch.current() == 1_600_000_000
    assert epoch.current() == epoch.from_environ(__import__("os").environ)


def _record(zf: zipfile.ZipFile) -> dict[str, str]:
    (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/RECORD")]
    return {row.split(",")[0]: row.split(",")[1] for row in zf.read(name).decode().splitlines() if row}


def _listed_sboms(wheel: Path) -> dict[str, dict]:
    """Every SBOM of the wheel, each checked against its RECORD hash and the 1.6 schema."""
    with zipfile.ZipFile(wheel) as zf:
        record = _record(zf)
        out = {}
        for name in filter(SBOMS.match, zf.namelist()):
            data = zf.read(name)
            assert name in record and hex_of(record[name]) == hashlib.sha256(data).hexdigest(), name
            out[name.rsplit("/", 1)[-1]] = json.loads(data) if name.endswith("auditwheel.cdx.json") else valid(data.decode())
        return out


def test_add_sbom_keeps_auditwheels_and_names_what_the_wheel_holds(tmp_path):
    """A wheel as a container CUDA build leaves it: gcc-built extension and grafted library, auditwheel's
    own SBOM. Ours lands beside it, listed in RECORD; a second pass gives the same bytes."""
    from wheelci.plan import Request, make_plan

    ext = build_lib(tmp_path / "lib" / "_ext.so", "_ext.so")
    foo = build_lib(tmp_path / "lib" / "libfoo.so.1", "libfoo.so.1")
    theirs = json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.4", "version": 1}).encode()
    wheel = make_wheel(tmp_path / "in", "demo-ext", {
        "demo_ext/_ext.so": ext, "demo_ext.libs/libfoo-1a2b3c4d.so.1": foo,
        "demo_ext-1.0.dist-info/sboms/auditwheel.cdx.json": theirs}, requires=("torch==2.13.0",))
    plan = make_plan(Request(cuda="13.0", torch=None, engine="docker"), project_dir=ROOT)
    env = BuildEnv(tmp_path, tmp_path / "python", tmp_path / "site", "2.13.0+cu130", "13.0", [])
    plan = dataclasses.replace(plan, run=dataclasses.replace(plan.run, source_date_epoch=1_700_000_000))
    kw = dict(plan=plan, env=env, excluded=["libc10.so", "libcudart.so.13"], project_dir=tmp_path)
    out = sbom.add_sbom(wheel, tmp_path / "out", **kw)
    found = _listed_sboms(out)
    assert set(found) == {"auditwheel.cdx.json", sbom.SBOM_NAME}
    with zipfile.ZipFile(out) as zf:
        assert zf.read("demo_ext-1.0.dist-info/sboms/auditwheel.cdx.json") == theirs
    doc = found[sbom.SBOM_NAME]
    parts = components(doc)
    assert parts["cuda"]["version"] == plan.cuda == "13.0"
    assert parts["image"]["name"] == (plan.image or f"cibuildwheel's pinned {plan.manylinux} image")
    assert props(parts["cuda"])["wheelci:toolkit"] == f"the image {parts['image']['name']}"
    assert Requirement(props(parts["cudnn"])["wheelci:requirement"]) == Requirement(plan.cudnn_requirement)
    grafted = parts["grafted:demo_ext.libs/libfoo-1a2b3c4d.so.1"]
    assert grafted["name"] == "libfoo.so.1"
    assert grafted["hashes"][0]["content"] == hashlib.sha256(foo.read_bytes()).hexdigest()
    gcc = _proc.run(["gcc", "-dumpfullversion"], capture_output=True, text=True, check=True).stdout.strip()
    assert [(c["name"], c["version"]) for r, c in parts.items() if r.startswith("compiler:")] == [("gcc", gcc)]
    assert {c["name"] for r, c in parts.items() if r.startswith("excluded:")} == {"libc10.so", "libcudart.so.13"}
    assert props(doc["metadata"]["component"])["wheelci:git-revision"].startswith("absent: ")
    assert doc["externalReferences"][0]["url"] == "auditwheel.cdx.json"
    again = sbom.add_sbom(out, tmp_path / "again", **kw)
    assert again.read_bytes() == out.read_bytes()


def test_a_built_wheel_carries_a_valid_sbom(tiny_cpu_build):
    """The host CPU build of tests/fixtures/tiny_ext: our SBOM listed in RECORD, valid, naming the project
    and its revision, torch at the version the wheel requires and the libraries left to torch."""
    found = _listed_sboms(tiny_cpu_build.wheel)
    doc = found[sbom.SBOM_NAME]
    with zipfile.ZipFile(tiny_cpu_build.wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        headers = zf.read(meta).decode().splitlines()
    version = next(h.split(": ", 1)[1] for h in headers if h.startswith("Version: "))
    (torch_req,) = [Requirement(h.split(": ", 1)[1]) for h in headers
                    if h.startswith("Requires-Dist: ") and Requirement(h.split(": ", 1)[1]).name == "torch"]
    project = doc["metadata"]["component"]
    assert (project["name"], project["version"]) == ("tiny-ext", version)
    torch = components(doc)["torch"]
    assert torch_req.specifier.contains(Version(torch["version"]).public)
    assert Requirement(props(torch)["wheelci:requirement"]) == torch_req
    assert Version(torch["version"]).public == tiny_cpu_build.report["plan"]["torch"]
    (report_wheel,) = tiny_cpu_build.report["wheels"]
    excluded = {c["name"] for r, c in components(doc).items() if r.startswith("excluded:")}
    assert excluded == set(report_wheel["excluded"]) and excluded  # torch's libraries, at least libc10
    assert any(r.startswith("compiler:") for r in components(doc))
    assert props(doc["metadata"]) == {"wheelci:cuda": "none: a CPU build"}
    revision = props(project)["wheelci:git-revision"]
    inside = _proc.run(["git", "-C", ROOT, "rev-parse", "--verify", "HEAD"], capture_output=True, text=True)
    if inside.returncode == 0:  # the fixture is tracked in this checkout: the commit it was built from
        assert _proc.run(["git", "-C", ROOT, "merge-base", "--is-ancestor", revision, "HEAD"]).returncode == 0
        assert project["pedigree"]["commits"] == [{"uid": revision}]
    else:
        assert revision.startswith("absent: ")
    names = [s["name"] for s in tiny_cpu_build.report["steps"]]
    sbom_step = tiny_cpu_build.report["steps"][names.index("sbom")]
    assert sbom_step["status"] == "ok" and sbom_step["outputs"] == [tiny_cpu_build.wheel.name]
    assert names.index("finish") < names.index("sbom") < names.index("check")


def _git(*args: str, cwd: Path) -> None:
    _proc.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True)


def test_an_untracked_module_that_ships_makes_the_revision_dirty(tmp_path):
    """`git status --untracked-files=no` called the revision clean while a new module, which the build
    takes (git's unignored files), shipped; an ignored file, or an untracked one outside what the build
    read (its -w), leaves it clean."""
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "__init__.py").write_text("")
    (project / ".gitignore").write_text("*.log\n")
    _git("init", "-q", cwd=project)
    _git("add", ".", cwd=project)
    _git("commit", "-q", "-m", "first", cwd=project)
    (project / "build.log").write_text("ignored\n")
    commit, note, dirty = sbom.git_revision(project)
    assert commit and note is None and not dirty
    (project / "pkg" / "extra.py").write_text("shipped = True\n")
    assert sbom.git_revision(project)[2] is True  # no list of sources: every unignored file counts
    sources = ["pkg/__init__.py", ".gitignore"]
    assert sbom.git_revision(project, [*sources, "pkg/extra.py"])[2] is True
    (project / "pkg" / "extra.py").unlink()
    (project / "wheelhouse").mkdir()
    (project / "wheelhouse" / "x.whl").write_text("an output\n")
    assert sbom.git_revision(project, sources)[2] is False
    (project / "pkg" / "__init__.py").write_text("changed = True\n")
    assert sbom.git_revision(project, sources)[2] is True


@pytest.mark.network  # the build tools come from pip's configured index
def test_the_sbom_names_the_torch_the_build_environment_installed(tmp_path, monkeypatch):
    """The SBOM named the plan's index (the PyTorch CPU index, unreachable here) for a torch pip took from
    a find-links directory. The build environment now records where pip's install report says torch came
    from, and the SBOM names that file."""
    from wheelci.compile import hostenv
    from wheelci.plan import Request, make_plan
    from tests._wheels import build_wheel

    links = tmp_path / "links"
    version = "0.0.0+sbomtest"  # a release no index has: pip can only take this file
    wheel = build_wheel(links, "torch", version, {
        "torch/__init__.py": f"__version__ = {version!r}\n\n\nclass version:\n    cuda = None\n"})
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    # the PyTorch CPU index (unreachable here): only for it does pip's own configuration stand in (an index of
    # the user's is the only source of its torch)
    spec = hostenv.TorchSpec("0.0.0", None, hostenv.PYTORCH_INDEX + "whl/cpu", False)
    root = tmp_path / "envs" / "torch-0.0.0-cpu"
    made = hostenv.cached_env(root, lambda where: hostenv.create_env(where, spec))
    env = hostenv.cached_env(root, lambda where: pytest.fail("made twice"))  # as a later build reads it
    assert made.torch_version == env.torch_version == version
    plan = make_plan(Request(cuda=None, torch=None, engine="host"), project_dir=ROOT)
    assert plan.torch_index_url  # what the SBOM used to name
    built = build_wheel(tmp_path / "in", "demo-ext", "1.0", requires=(f"torch=={version}",))
    out = sbom.add_sbom(built, tmp_path / "out", plan=plan, env=env, excluded=[], project_dir=tmp_path)
    doc = _listed_sboms(out)[sbom.SBOM_NAME]
    torch = components(doc)["torch"]
    assert torch["externalReferences"] == [{"type": "distribution", "url": wheel.as_uri()}]
    assert plan.torch_index_url not in json.dumps(doc)
    assert env.torch_source == wheel.as_uri()  # kept in the environment's stamp


def test_a_container_builds_torch_source_is_what_its_pip_was_told(tmp_path):
    """A container build with --find-links: the container's pip takes torch from that directory or its own
    indexes, never from the plan's index, which the SBOM named; with no find-links, the index the
    container's pip is given."""
    from wheelci.plan import Request, make_plan

    env = BuildEnv(tmp_path, tmp_path / "python", tmp_path / "site", "2.13.0+cu130", "13.0", [])
    links = tmp_path / "links"
    links.mkdir()
    wheel = make_wheel(tmp_path / "in", "demo-ext", {"demo_ext/__init__.py": b""}, requires=("torch==2.13.0",))
    for find_links, expected in ((links, f"the build container's pip: the find-links directory {links} or its "
                                          "configured indexes"), (None, None)):
        plan = make_plan(Request(cuda="13.0", torch=None, engine="docker", find_links=find_links), project_dir=ROOT)
        out = sbom.add_sbom(wheel, tmp_path / f"out-{bool(find_links)}", plan=plan, env=env, excluded=[],
                            project_dir=tmp_path)
        torch = components(_listed_sboms(out)[sbom.SBOM_NAME])["torch"]
        if expected:
            assert props(torch)["wheelci:source"] == expected and "externalReferences" not in torch
        else:  # `pip install torch==2.13.0 --index-url INDEX` in the container
            assert torch["externalReferences"] == [{"type": "distribution", "url": plan.torch_index_url}]
            assert "wheelci:source" not in props(torch)


@pytest.mark.parametrize("version, expected", [
    ("2.13.0+cu130", "https://mirror.example/whl/cu130"),  # PyPI serves no local version: the index named
    ("2.13.0", "https://mirror.example/whl/cu130 or https://pypi.org/simple (uv took the best match of these "
               "indexes)"),
])
def test_a_uv_install_records_the_indexes_it_was_given(version, expected):
    """uv writes no install report; it is only ever given indexes (hostenv.uv_args), so those are the source."""
    from wheelci.compile import hostenv

    spec = hostenv.TorchSpec("2.13.0", "13.0", "https://mirror.example/whl/cu130", True)
    args = ["--isolated", "--index-url", spec.index_url, "--extra-index-url", hostenv.PYPI, "torch==2.13.0"]
    assert hostenv.torch_source(None, hostenv.uv_args(args), version) == expected
    assert hostenv.torch_source(None, hostenv.uv_args(["--isolated", "torch==2.13.0"]), version) == hostenv.PYPI
