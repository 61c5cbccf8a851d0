"""`wheelci bench`: each benchmark's options; the work is wheelci.bench's (one module per benchmark)."""

from __future__ import annotations

import argparse
from pathlib import Path

from wheelci import cli
from wheelci.errors import CiError
from wheelci.util.sizes import parse_size
from wheelci.bench import BENCHMARKS, build, compile_cache, env, index, pipeline, stable, surgery


def main(args: argparse.Namespace) -> int:
    if args.benchmark == "surgery":
        return surgery.run(wheel=args.wheel, split_limit=args.split_limit, skip_split=args.skip_split,
                           as_json=args.json)
    if args.benchmark == "index":
        return index.run(wheels=args.wheels, repeat=args.repeat, no_torch=args.no_torch)
    if args.benchmark == "build":
        return build.run(projects=args.project, variants=args.variant)
    if args.benchmark == "stable":
        return stable.run(target=args.target, skip_build=args.skip_build)
    if args.benchmark == "pipeline":
        return pipeline.run(repeat=args.repeat)
    if args.benchmark == "env":
        return env.run(torch=args.torch, cuda=args.cuda, repeat=args.repeat)
    return compile_cache.run(project=args.project, cuda=args.cuda, arch_list=args.arch_list)


def _positive(text: str) -> int:
    """A count of rounds: a whole number of at least 1 (0 or less measured nothing, then failed on it)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a count of at least 1: {text!r}")
    return int(text)


def _size(text: str) -> str:
    """A --split-limit, read before the benchmark spends minutes on the steps before the split."""
    try:
        parse_size(text)
    except CiError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _first_line(module: object) -> str:
    """The benchmark module's summary, as its own parser had it for a description."""
    return (module.__doc__ or "").splitlines()[0]


def build_parser() -> cli.Parser:
    p = cli.parser("bench", "Benchmarks against the baseline a user would otherwise run.")
    sub = p.add_subparsers(dest="benchmark", metavar="{" + ",".join(BENCHMARKS) + "}", required=True)

    def add(name: str, module: object) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=_first_line(module).split(": `python -m")[0],
                              description=_first_line(module))

    s = add("surgery", surgery)
    s.add_argument("--wheel", type=Path, help="wheel to use (default: the torch 2.13.0 CPU wheel via pip)")
    s.add_argument("--split-limit", default="120MB", type=_size, help="limit for the split step (default 120MB)")
    s.add_argument("--skip-split", action="store_true", help="leave out the split step")
    s.add_argument("--json", action="store_true", help="print the timings as JSON")

    i = add("index", index)
    i.add_argument("--wheels", metavar="DIR", help="index these wheels instead of the default set")
    i.add_argument("--repeat", type=_positive, default=3, help="rounds; the median is reported (default 3)")
    i.add_argument("--no-torch", action="store_true", help="leave out the 192 MB torch wheel")

    b = add("build", build)
    b.add_argument("--project", choices=sorted(build.PROJECTS), action="append", help="default: all")
    b.add_argument("--variant", choices=sorted(build.VARIANTS), action="append", help="default: all")

    st = add("stable", stable)
    st.add_argument("--target", default="2.10", help="the stable-ABI target (default 2.10)")
    st.add_argument("--skip-build", action="store_true", help="only the matrix sizes")

    pl = add("pipeline", pipeline)
    pl.add_argument("--repeat", type=_positive, default=1, help="alternated rounds; the fastest of each side is shown")

    e = add("env", env)
    e.add_argument("--torch", default="2.14.1", help="a torch release PyPI's default build serves (default 2.14.1)")
    e.add_argument("--cuda", default="13.0", help="that build's CUDA (default 13.0)")
    e.add_argument("--repeat", type=_positive, default=2, help="rounds, each pip then uv or uv then pip (default 2)")

    c = add("compile-cache", compile_cache)
    c.add_argument("--project", choices=sorted(compile_cache.PROJECTS), default="example")
    c.add_argument("--cuda", default="13.0")
    c.add_argument("--arch-list", help="default: the matrix row's (the fan-out splits it in two)")
    assert tuple(sub.choices) == BENCHMARKS  # one subparser per benchmark, in wheelci.bench's order
    return p


if __name__ == "__main__":
    cli.run(build_parser(), main)
