"""Our build images (docker/): `python -m ci.image build --cuda 11.8 [--push REGISTRY]` and `list`.

The matrix row supplies every build argument, so an image and the plans that use it cannot drift apart:
before anything is sent to an engine, the Dockerfile's ARGs (read with dockerfile-parse) must be exactly
what the row passes. Images build through the engine's own CLI (`docker build`, or `podman build`, which
takes the same flags), whose progress streams to stderr; the engine itself judges the Dockerfile.
"""

from __future__ import annotations

import io
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from wheelci import engine as eng
from wheelci.archs import OCI_PLATFORM
from wheelci.config import matrix as mx
from wheelci.errors import CiError
from wheelci.util import log, proc

DOCKER_DIR = Path(__file__).resolve().parent / "resources" / "docker"


def declared_args(dockerfile: bytes) -> dict[str, str | None]:
    """ARG name -> default (None when the build must pass it), over every stage."""
    from dockerfile_parse import DockerfileParser

    # the parser reads its file object in binary mode and decodes it; its stubs say IO[str]
    parsed = DockerfileParser(fileobj=io.BytesIO(dockerfile), env_replace=False)  # type: ignore[arg-type]
    args: dict[str, str | None] = {}
    for instr in parsed.structure:
        if instr["instruction"] != "ARG":
            continue
        try:
            words = shlex.split(instr["value"])
        except ValueError as e:
            raise CiError(f"Dockerfile line {instr['startline'] + 1}: ARG {instr['value']!r}: {e}") from None
        for word in words:  # `ARG A=1 B`: two arguments
            name, eq, default = word.partition("=")
            # a stage that declares a global ARG again (`ARG BASE`) takes the global default
            args[name] = default if eq else args.get(name)
    return args


def check_build_args(dockerfile: bytes, build_args: dict[str, str], what: str) -> None:
    """Every ARG without a default is passed, and nothing is passed that no ARG declares (docker would
    only warn about the one and build with an empty value for the other)."""
    declared = declared_args(dockerfile)
    missing = [a for a, default in declared.items() if default is None and a not in build_args]
    unknown = [a for a in build_args if a not in declared]
    if missing or unknown:
        raise CiError(f"{what}: missing {', '.join(missing) or 'none'}, undeclared {', '.join(unknown) or 'none'}")


@dataclass(frozen=True)
class ImageSpec:
    cuda: str
    manylinux: str
    tag: str
    dockerfile: str  # relative to the build context (docker/)
    context: str
    buildargs: dict[str, str]
    arch: str = "x86_64"  # the machine architecture built (aarch64: under QEMU on an x86_64 machine)


def our_images(cuda: str) -> list[mx.Image]:
    return [i for i in mx.load().row(cuda).images if i.origin == "ours"]


# aarch64: the same recipe on the aarch64 manylinux base, with NVIDIA's sbsa repository of the same distribution
ARM_ARGS = {"BASE": "quay.io/pypa/{manylinux}_aarch64",
            "CUDA_REPO": "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/sbsa/cuda-rhel8.repo"}


def spec(cuda: str, manylinux: str | None = None, registry: str | None = None, arch: str = "x86_64") -> ImageSpec:
    """What `docker build` gets for CUDA X's own image, checked against the Dockerfile's ARGs. aarch64:
    the row's recipe on the aarch64 base (every CUDA row of ours has an sbsa toolkit)."""
    matrix = mx.load()
    row = matrix.row(cuda)
    ours = [i for i in our_images(cuda) if manylinux in (None, i.manylinux)]
    if not ours:
        public = ", ".join(i.name for i in row.images if i.origin != "ours")
        raise CiError(f"CUDA {cuda} has no image of ours{f' for {manylinux}' if manylinux else ''} to build "
                      f"(it uses public images: {public})")
    img = ours[0]
    dockerfile = DOCKER_DIR / matrix.our_dockerfile
    args, name = dict(img.build_args), img.name
    if arch == "aarch64":
        args.update({k: v.format(manylinux=img.manylinux) for k, v in ARM_ARGS.items()})
        name = f"{img.manylinux}_aarch64_cuda_{cuda}"
    elif arch != "x86_64":
        raise CiError(f"--archs {arch}: no image recipe (x86_64, aarch64)")
    check_build_args(dockerfile.read_bytes(), args, f"matrix build args for {name} do not fit {dockerfile.name}")
    tag = f"{matrix.our_image_repo}/{name}"
    if registry:
        tag = f"{registry.rstrip('/')}/{tag}"
    return ImageSpec(cuda, img.manylinux, tag, matrix.our_dockerfile, str(DOCKER_DIR), args, arch)


def pick_engine(requested: str = "auto") -> str:
    """The engine that builds images: the one asked for, which must respond, or the first that does."""

    if requested == "auto":
        found = eng.detect()
        if found is None:
            why = "; ".join(f"{probe()}" for probe in eng.PROBES.values())
            raise CiError(f"building images needs Docker or Podman: {why}")
        return found
    if requested not in eng.PROBES:
        raise CiError(f"not a container engine: {requested!r} (choose docker or podman)")
    problem = eng.PROBES[requested]()
    if problem:
        raise CiError(f"building images with {requested}: {problem}")
    return requested


def exists(ref: str, engine: str = "docker") -> bool:
    return proc.run([engine, "image", "inspect", ref], what=f"looking up {ref}", check=False,
                    capture_output=True).returncode == 0


def build_command(engine: str, s: ImageSpec, pull: bool = True) -> list[str]:
    """`ENGINE build` for a spec: the same flags for docker and podman."""

    args = [f"--build-arg={k}={v}" for k, v in s.buildargs.items()]
    args += [f"--platform={OCI_PLATFORM[s.arch]}"] if s.arch != "x86_64" else []
    return [engine, "build", *(["--pull"] if pull else []), f"--file={Path(s.context) / s.dockerfile}",
            f"--tag={s.tag}", *args, s.context]


def build_spec(engine: str, s: ImageSpec, pull: bool = True) -> ImageSpec:
    """Build one spec with the engine's CLI; its progress goes to stderr, a failure is one line."""

    log.info(f"building {s.tag} from {s.dockerfile} with {engine}")
    proc.stream(build_command(engine, s, pull), what=f"building {s.tag}")
    return s


def push_spec(engine: str, s: ImageSpec, registry: str) -> ImageSpec:
    """Tag a built spec as REGISTRY/<its tag> and push it there; the pushed spec."""

    pushed = replace(s, tag=f"{registry.rstrip('/')}/{s.tag}")
    proc.run([engine, "tag", s.tag, pushed.tag], what=f"tagging {pushed.tag}")
    log.info(f"pushing {pushed.tag}")
    proc.stream([engine, "push", pushed.tag], what=f"pushing {pushed.tag}")
    return pushed


def build(cuda: str, manylinux: str | None = None, push: str | None = None, engine: str = "auto",
          arch: str = "x86_64") -> ImageSpec:
    engine = pick_engine(engine)
    s = build_spec(engine, spec(cuda, manylinux, arch=arch))
    return push_spec(engine, s, push) if push else s


if __name__ == "__main__":  # `python -m wheelci.image` (`python -m ci.image` here): the command line runs it
    import runpy

    runpy.run_module("wheelci.commands.image", run_name="__main__")
