"""Our build images (docker/): `python -m ci.image build --cuda 11.8 [--push REGISTRY]` and `list`.

The matrix row supplies every build argument, so an image and the plans that use it cannot drift apart.
Builds go through the Docker SDK (no CLI parsing) and stream its progress to stderr. A small Dockerfile
reader checks, before anything is sent to a daemon, that the matrix passes exactly the ARGs the
Dockerfile declares without a default, and that the file is well formed.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from ci.config import matrix as mx
from ci.errors import CiError

DOCKER_DIR = Path(__file__).resolve().parent.parent / "docker"

# Dockerfile instructions (docs.docker.com/reference/dockerfile/); MAINTAINER is deprecated but parses.
INSTRUCTIONS = frozenset({"ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK",
                          "LABEL", "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME",
                          "WORKDIR"})
_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_PREDEFINED = {"PATH", "HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY", "TARGETPLATFORM",
               "TARGETOS", "TARGETARCH", "BUILDPLATFORM", "BUILDOS", "BUILDARCH"}


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


def parse_dockerfile(text: str, name: str = "Dockerfile") -> list[Instruction]:
    """Split a Dockerfile into instructions (comments dropped, `\\` continuations joined).

    CiError on an unknown instruction, a dangling continuation, or no FROM before the first build step.
    """
    out: list[Instruction] = []
    buf, start = "", 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):  # comment lines inside a continuation are skipped
            continue
        start = start or no
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        keyword, _, args = buf.strip().partition(" ")
        if keyword.upper() not in INSTRUCTIONS:
            raise CiError(f"{name}:{start}: unknown instruction {keyword!r}")
        if not args.strip():
            raise CiError(f"{name}:{start}: {keyword.upper()} has no arguments")
        out.append(Instruction(keyword.upper(), " ".join(args.split()), start))
        buf, start = "", 0
    if buf:
        raise CiError(f"{name}: ends inside a line continuation")
    first = next((i for i in out if i.keyword != "ARG"), None)
    if first is None or first.keyword != "FROM":
        raise CiError(f"{name}: the first instruction after the global ARGs must be FROM")
    return out


def declared_args(instrs: list[Instruction]) -> dict[str, str | None]:
    """ARG name -> default (None when the build must pass it)."""
    args: dict[str, str | None] = {}
    for i in instrs:
        if i.keyword == "ARG":
            name, eq, default = i.args.partition("=")
            args[name.strip()] = default if eq else None
    return args


def undefined_references(instrs: list[Instruction]) -> list[str]:
    """$VARs that no ARG/ENV declares before use (RUN is shell, so its own variables are its business)."""
    known, bad = set(_PREDEFINED), []
    for i in instrs:
        if i.keyword != "RUN":
            for ref in _REF.findall(i.args):
                if ref not in known:
                    bad.append(f"line {i.line}: {i.keyword} uses ${ref}")
        if i.keyword == "ARG":
            known.add(i.args.partition("=")[0].strip())
        elif i.keyword == "ENV":
            known.update(m[1] for m in re.finditer(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", i.args))
    return bad


def check_build_args(instrs: list[Instruction], build_args: dict[str, str], what: str) -> None:
    """Every ARG without a default is passed, and nothing is passed that no ARG declares."""
    declared = declared_args(instrs)
    missing = [a for a, default in declared.items() if default is None and a not in build_args]
    unknown = [a for a in build_args if a not in declared]
    if missing or unknown:
        raise CiError(f"{what}: missing {', '.join(missing) or 'none'}, undeclared {', '.join(unknown) or 'none'}")
    bad = undefined_references(instrs)
    if bad:
        raise CiError(f"{what}: {'; '.join(bad)}")


@dataclass(frozen=True)
class ImageSpec:
    cuda: str
    manylinux: str
    tag: str
    dockerfile: str  # relative to the build context (docker/)
    context: str
    buildargs: dict[str, str]


def our_images(cuda: str) -> list[mx.Image]:
    return [i for i in mx.load().row(cuda).images if i.origin == "ours"]


def spec(cuda: str, manylinux: str | None = None, registry: str | None = None) -> ImageSpec:
    """What `docker build` gets for CUDA X's own image, checked against the Dockerfile's ARGs."""
    matrix = mx.load()
    row = matrix.row(cuda)
    ours = [i for i in our_images(cuda) if manylinux in (None, i.manylinux)]
    if not ours:
        public = ", ".join(i.name for i in row.images if i.origin != "ours")
        raise CiError(f"CUDA {cuda} has no image of ours{f' for {manylinux}' if manylinux else ''} to build "
                      f"(it uses public images: {public})")
    img = ours[0]
    dockerfile = DOCKER_DIR / matrix.our_dockerfile
    instrs = parse_dockerfile(dockerfile.read_text(), dockerfile.name)
    check_build_args(instrs, img.build_args, f"matrix build args for {img.name} do not fit {dockerfile.name}")
    tag = f"{matrix.our_image_repo}/{img.name}"
    if registry:
        tag = f"{registry.rstrip('/')}/{tag}"
    return ImageSpec(cuda, img.manylinux, tag, matrix.our_dockerfile, str(DOCKER_DIR), dict(img.build_args))


def _client():
    from ci import engine as eng

    why = eng.docker_responds()
    if why:
        raise CiError(f"building images needs Docker: {why}")
    import docker

    return docker.from_env()


def exists(ref: str) -> bool:
    import docker.errors

    client = _client()
    try:
        client.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False
    finally:
        client.close()


def _stream(events, what: str) -> None:
    """Docker's JSON progress: build `stream` text, pull/push `status` lines; an `error` ends it."""
    last = None
    for ev in events:
        if "error" in ev:
            detail = ev.get("errorDetail", {}).get("message") or ev["error"]
            raise CiError(f"{what} failed: {detail.strip().splitlines()[-1]}")
        text = ev.get("stream") or " ".join(str(ev[k]) for k in ("id", "status", "progress") if ev.get(k))
        if text and text != last:
            sys.stderr.write(text if text.endswith("\n") else text + "\n")
            last = text


def build(cuda: str, manylinux: str | None = None, push: str | None = None) -> ImageSpec:
    s = spec(cuda, manylinux)
    client = _client()
    try:
        print(f"ci.image: building {s.tag} from docker/{s.dockerfile}", file=sys.stderr)
        _stream(client.api.build(path=s.context, dockerfile=s.dockerfile, tag=s.tag, buildargs=s.buildargs,
                                 decode=True, rm=True, pull=True), f"building {s.tag}")
        if push:
            pushed = spec(cuda, manylinux, registry=push)
            client.api.tag(s.tag, pushed.tag)
            print(f"ci.image: pushing {pushed.tag}", file=sys.stderr)
            _stream(client.api.push(pushed.tag, stream=True, decode=True), f"pushing {pushed.tag}")
            return pushed
        return s
    finally:
        client.close()


def main(args: argparse.Namespace) -> int:
    from ci.cli import emit_json

    if args.command == "list":
        specs = [spec(r.version, i.manylinux) for r in mx.load().rows for i in r.images if i.origin == "ours"]
        if args.json:
            emit_json([asdict(s) for s in specs])
        else:
            for s in specs:
                print(f"{s.cuda:<5} {s.tag}  " + " ".join(f"{k}={v}" for k, v in s.buildargs.items()))
        return 0
    if args.dry_run:
        result = spec(args.cuda, args.manylinux, registry=args.push)
    else:
        result = build(args.cuda, args.manylinux, push=args.push)
    if args.json:
        emit_json(asdict(result))
    else:
        print(result.tag)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from ci.cli import parser

    p = parser("ci.image", "Build (and push) our manylinux CUDA build images from docker/, with the build "
                           "arguments of their CUDA matrix row.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the image for one CUDA version")
    b.add_argument("--cuda", required=True, help=f"CUDA version ({', '.join(mx.load().versions)})")
    b.add_argument("--manylinux", help="policy, when the row has images of ours for several")
    b.add_argument("--push", metavar="REGISTRY", help="also tag as REGISTRY/... and push there")
    b.add_argument("--dry-run", action="store_true", help="print what would be built; needs no Docker")
    b.add_argument("--json", action="store_true", help="print the image spec as JSON")
    ls = sub.add_parser("list", help="list the images of ours the matrix uses")
    ls.add_argument("--json", action="store_true")
    return p


if __name__ == "__main__":
    from ci.cli import run

    run(build_parser(), main)
