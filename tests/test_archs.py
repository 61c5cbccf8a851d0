"""aarch64 from the same command: --archs in the plan (cibuildwheel reads it as meant), how this machine
reaches each architecture (natively, QEMU, or not at all), the Arm GPUs an arch list serves, our
aarch64 image recipe, and one error line for what cannot be done."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from wheelci import archs, cibw, image
from wheelci import plan as pl
from wheelci.config import matrix as mx
from wheelci.engine import Facts
from wheelci.errors import CiError
from tests._wheels import run_stage
from tests.test_plan import cibw_options

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"
X86_EMULATING = Facts(engine="docker", machine="x86_64", emulates=("aarch64",))


def plan_for(cuda=None, archs_=("aarch64",), facts=X86_EMULATING, **kw) -> pl.Plan:
    return pl.make_plan(pl.Request(cuda=cuda, archs=tuple(archs_), **kw), project_dir=ROOT, facts=facts)


def test_archs_are_cibuildwheels_words_once_each_in_order():
    assert archs.parse(None) == [archs.machine()]  # as cibuildwheel: this machine's unless named
    assert archs.parse("aarch64") == ["aarch64"]
    assert archs.parse("aarch64, x86_64 aarch64") == ["aarch64", "x86_64"]
    assert archs.parse("ARM64,amd64") == ["aarch64", "x86_64"]
    assert archs.parse("native") == [archs.machine()]
    for bad in ("arm", "ppc64le", "x86-64", "x" * 5000):
        with pytest.raises(CiError, match="unknown architecture") as e:
            archs.parse(bad)
        assert len(str(e.value)) < 200
    for empty in ("", ",", " , ,"):
        with pytest.raises(CiError, match="names no architecture"):
            archs.parse(empty)


def test_the_kernels_qemu_handlers_are_read_from_binfmt_misc(tmp_path):
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\n")
    assert archs.emulated(tmp_path) == ("aarch64",)
    (tmp_path / "status").write_text("disabled\n")  # binfmt_misc switched off as a whole
    assert archs.emulated(tmp_path) == ()
    (tmp_path / "status").write_text("enabled\n")
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/bin/qemu-aarch64\nflags: P\n")
    assert archs.emulated(tmp_path) == ()  # no F flag: a container cannot reach the interpreter
    (tmp_path / "qemu-aarch64").write_text("disabled\ninterpreter /x\n")
    assert archs.emulated(tmp_path) == ()
    assert archs.emulated(tmp_path / "not-mounted") == ()
    assert archs.reach("aarch64", "x86_64", ("aarch64",)) == "emulated"
    assert archs.reach("aarch64", "aarch64", ()) == "native"
    assert archs.reach("aarch64", "x86_64", ()) is None


def test_an_aarch64_cpu_plan_is_what_cibuildwheel_builds_for_aarch64():
    plan = plan_for()
    assert plan.archs == ["aarch64"] and plan.reach == {"aarch64": "emulated"}
    assert plan.identifiers == ["cp311-manylinux_aarch64"]
    assert plan.environment["CIBW_ARCHS_LINUX"] == "aarch64"
    assert plan.environment["CIBW_MANYLINUX_AARCH64_IMAGE"] == "manylinux_2_28"
    assert "CIBW_MANYLINUX_X86_64_IMAGE" not in plan.environment
    assert any("under QEMU emulation" in n for n in plan.notes), plan.notes
    options = cibw_options(plan)  # cibuildwheel's own reading: one aarch64 build, on the aarch64 image
    from cibuildwheel.architecture import Architecture

    assert Architecture.parse_config(plan.environment["CIBW_ARCHS_LINUX"], "linux") == {Architecture.aarch64}
    build = options.build_options(None)
    assert build.manylinux_images is not None and "manylinux_2_28_aarch64" in build.manylinux_images["aarch64"]
    text = pl.format_plan(plan)
    assert "archs           aarch64 (emulated)" in text


def test_both_archs_in_one_plan_and_an_image_for_one_only():
    plan = plan_for(archs_=("x86_64", "aarch64"))
    assert plan.identifiers == ["cp311-manylinux_x86_64", "cp311-manylinux_aarch64"]
    assert plan.environment["CIBW_ARCHS_LINUX"] == "x86_64 aarch64"
    assert {cibw.image_variable(a) for a in plan.archs} <= set(plan.environment)
    with pytest.raises(CiError, match="one image"):
        plan_for(archs_=("x86_64", "aarch64"), image="localhost/x:1")
    given = plan_for(image="localhost/arm:1")
    assert given.environment["CIBW_MANYLINUX_AARCH64_IMAGE"] == "localhost/arm:1"
    assert "CIBW_MANYLINUX_X86_64_IMAGE" not in given.environment


def test_an_aarch64_cuda_plan_names_its_sbsa_image_and_the_arm_gpus_its_arch_list_serves():
    plan = plan_for("13.0", arch_list="9.0;10.0;12.0a")
    assert plan.image == "cuda-wheel-ci/manylinux_2_28_aarch64_cuda_13.0"
    assert plan.environment["CIBW_MANYLINUX_AARCH64_IMAGE"] == plan.image
    (gpus,) = [n for n in plan.notes if n.startswith("aarch64 (sbsa) GPUs")]
    assert "GH200 9.0: cubin sm_90" in gpus and "GB300 10.3: cubin sm_100" in gpus
    assert "DGX Spark (GB10) 12.1: not served" in gpus  # sm_120a runs on 12.0 only
    assert "Jetson Thor 11.0: not served" in gpus
    ptx = plan_for("13.0", arch_list="9.0+PTX")
    assert "GB200 10.0: PTX compute_90 (JIT at first load)" in next(n for n in ptx.notes if "GPUs" in n)
    assert any("build --cuda 13.0 --archs aarch64" in n for n in plan.notes)
    spec = image.spec("13.0", arch="aarch64")
    assert spec.tag == plan.image
    assert spec.buildargs["BASE"] == "quay.io/pypa/manylinux_2_28_aarch64" and "/sbsa/" in spec.buildargs["CUDA_REPO"]
    assert "--platform=linux/arm64" in image.build_command("docker", spec)
    assert not any(a.startswith("--platform") for a in image.build_command("docker", image.spec("13.0")))


def test_an_aarch64_cuda_row_without_a_recipe_of_ours_is_refused_or_takes_the_image_given():
    with pytest.raises(CiError, match="no image recipe of ours") as e:
        plan_for("12.9")  # its images are public x86_64 ones
    assert "--image" in str(e.value) and "13.0" in str(e.value)
    given = plan_for("12.9", image="localhost/arm-cuda:1")
    assert given.environment["CIBW_MANYLINUX_AARCH64_IMAGE"] == "localhost/arm-cuda:1"
    old = plan_for("11.8", torch="2.6.0")  # its x86_64 image is manylinux2014; the recipe of ours is 2_28
    assert old.image == image.spec("11.8", arch="aarch64").tag == "cuda-wheel-ci/manylinux_2_28_aarch64_cuda_11.8"
    assert any(f"build --cuda 11.8 --archs aarch64" in n for n in old.notes)


def test_one_python_of_any_version_for_another_architecture():
    """Its wheel is verified by the image's interpreter of that Python, over that Python's torch: any one
    Python, not only this process's; several would need a torch each."""
    assert plan_for(python=["3.12"]).identifiers == ["cp312-manylinux_aarch64"]
    with pytest.raises(CiError, match="one Python"):
        plan_for(python=["3.11", "3.12"])


def test_how_each_machine_reaches_aarch64():
    with pytest.raises(CiError, match="the host builds for this x86_64 machine only"):
        plan_for(engine="host")
    lost = plan_for(facts=Facts(engine=None, machine="x86_64"))
    assert lost.engine.value == "docker" and lost.reach == {"aarch64": "unavailable"}
    assert any("does not run aarch64 code" in n and "qemu-user-static" in n for n in lost.notes), lost.notes
    from wheelci.compile.container import refuse_unreachable

    with pytest.raises(CiError, match="does not run aarch64 code"):  # build_project: before any step
        refuse_unreachable(lost)
    refuse_unreachable(plan_for())
    arm = plan_for("13.0", facts=Facts(machine="aarch64", nvcc="13.0", gcc=12), engine="host")
    assert arm.reach == {"aarch64": "native"} and arm.engine.value == "host"
    assert any("NVIDIA's aarch64 (sbsa) wheels" in n for n in arm.notes), arm.notes
    cpu = plan_for(facts=Facts(machine="aarch64"))  # on an Arm machine a CPU build is a host build, as on x86_64
    assert cpu.engine.value == "host" and not any("QEMU" in n for n in cpu.notes)
    x86_on_arm = plan_for(archs_=("x86_64",), facts=Facts(engine="docker", machine="aarch64"))
    (note,) = [n for n in x86_on_arm.notes if "does not run" in n]
    assert "--install amd64" in note and "an x86_64 machine" in note  # the hint names the architecture missing


def test_cli_refusals_are_one_line(tmp_path):
    r = run_stage("ci.build", TINY, "--cpu", "--archs", "sparc", "--dry-run")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unknown architecture" in r.stderr, r.stderr
    r = run_stage("ci.build", TINY, "--cpu", "--archs", "aarch64", "--engine", "host", "--dry-run")
    assert r.returncode == 2 and "--engine host" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    r = run_stage("ci.build", TINY, "--cpu", "--archs", "x86_64,aarch64", "-w", tmp_path / "w", "--engine", "docker")
    assert r.returncode == 2 and "once per architecture" in r.stderr and not (tmp_path / "w").exists(), r.stderr
    r = run_stage("ci.build", TINY, "--cpu", "--archs", "aarch64", "--engine", "docker", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["archs"] == ["aarch64"] and doc["identifiers"] == ["cp311-manylinux_aarch64"]


def test_the_abi_policy_of_an_aarch64_wheel_is_auditwheels_aarch64_list():
    from wheelci.native.elf import libstdcxx_versions

    x86, arm = libstdcxx_versions("manylinux_2_28_x86_64"), libstdcxx_versions("manylinux_2_28_aarch64")
    assert arm and arm["GLIBCXX"] and x86 == libstdcxx_versions("manylinux_2_28")  # a bare policy: x86_64's
    assert arm["CXXABI"] != x86["CXXABI"]  # auditwheel lists aarch64's own (it has the ARM EABI ones)
    old_arm = libstdcxx_versions("manylinux2014_aarch64")
    assert old_arm and old_arm["GLIBCXX"] < arm["GLIBCXX"]


def test_pinned_images_of_each_arch_come_from_cibuildwheel():
    from wheelci.emulate import pinned_image

    assert pinned_image("manylinux_2_28", "aarch64").startswith("quay.io/pypa/manylinux_2_28_aarch64@sha256:")
    assert pinned_image("localhost/x:1", "aarch64") == "localhost/x:1"
    assert pinned_image("myimage", "aarch64") == "myimage"  # as cibuildwheel reads a name it does not pin


def test_the_cross_install_asks_pip_for_every_manylinux_tag_of_that_arch():
    from wheelci.compile.crossenv import platforms

    tags = platforms("aarch64")
    assert "manylinux_2_28_aarch64" in tags and "manylinux2014_aarch64" in tags and "manylinux_2_17_aarch64" in tags
    assert all(t.endswith("_aarch64") for t in tags)


@pytest.mark.slow
@pytest.mark.network
def test_every_nvcc_wheel_row_has_aarch64_wheels_for_an_arm_host_build():
    """What an aarch64 host build installs (the row's nvcc and toolkit wheels, as on x86_64) exists for
    aarch64 on the package index: pip resolves each row's pins for an aarch64 machine, downloading nothing."""
    from wheelci.compile.crossenv import platforms
    from tests import _proc

    rows = [r for r in mx.rows() if r.nvcc_wheel_has_nvcc]
    assert rows
    for row in rows:
        r = _proc.run([sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--quiet", "--no-deps",
                       "--ignore-installed", "--target", str(ROOT / "never-written"), "--only-binary=:all:",
                       *[f"--platform={p}" for p in platforms("aarch64")], "--python-version", "3.11",
                       *row.nvcc_wheels, *row.toolkit_wheels], capture_output=True, text=True)
        assert r.returncode == 0, f"CUDA {row.version}: {r.stderr.strip()[-500:]}"
    assert not (ROOT / "never-written").exists()
