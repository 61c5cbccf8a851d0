"""The benchmarks' command line (wheelci.commands.bench): every benchmark and option named in its help, a
bad benchmark or option value refused in one line with exit 2, the same under `wheelci bench` as under
`python -m ci.bench`, and one benchmark run for real (the stable-ABI matrix sizes, which build nothing)."""

from __future__ import annotations

import pytest

from tests._wheels import run_stage

BENCHMARKS = ("surgery", "index", "build", "stable", "pipeline", "env", "compile-cache")
# Each benchmark's options, as its help must name them.
OPTIONS = {
    "surgery": ("--wheel", "--split-limit", "--skip-split", "--json"),
    "index": ("--wheels", "--repeat", "--no-torch"),
    "build": ("--project", "--variant"),
    "stable": ("--target", "--skip-build"),
    "pipeline": ("--repeat",),
    "env": ("--torch", "--cuda", "--repeat"),
    "compile-cache": ("--project", "--cuda", "--arch-list"),
}
# `python -m ci.bench` (this repository) and `wheelci bench` (the console script's way, run as a module)
ENTRIES = {"python -m ci.bench": ("ci.bench",), "wheelci bench": ("wheelci", "bench")}


def test_the_benchmarks_are_the_librarys():
    from wheelci.bench import BENCHMARKS as declared

    assert declared == BENCHMARKS == tuple(OPTIONS)


@pytest.mark.parametrize("entry", ENTRIES)
def test_help_lists_every_benchmark(entry):
    r = run_stage(*ENTRIES[entry], "--help", timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.startswith(f"usage: {entry} "), r.stdout[:200]
    for name in BENCHMARKS:
        assert f"\n    {name} " in r.stdout, (name, r.stdout)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmarks_help_names_its_options(entry, name):
    r = run_stage(*ENTRIES[entry], name, "--help", timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.startswith(f"usage: {entry} {name} "), r.stdout[:200]
    for option in OPTIONS[name]:
        assert option in r.stdout, (name, option, r.stdout)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("args, prog, says", [
    (("surgeon",), "", "invalid choice: 'surgeon'"),
    ((), "", "the following arguments are required"),
    (("index", "--repeat", "x"), " index", "argument --repeat: not a count of at least 1: 'x'"),
    (("env", "--repeat", "0"), " env", "argument --repeat: not a count of at least 1: '0'"),
    # read before the steps ahead of the split run, and without the credential a URL-shaped value holds
    (("surgery", "--split-limit", "https://u:s3cr3tTOKEN@h"), " surgery", "argument --split-limit: not a size"),
    (("build", "--variant", "rocm"), " build", "argument --variant: invalid choice: 'rocm'"),
    (("stable", "--no-such-option"), "", "unrecognized arguments: --no-such-option"),
])
def test_bad_usage_is_one_line_and_exit_2(entry, args, prog, says):
    r = run_stage(*ENTRIES[entry], *args, timeout=60)
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"{entry}{prog}: error: ") and says in line and "s3cr3t" not in line, line


@pytest.mark.parametrize("entry", ENTRIES)
def test_stable_matrix_sizes(entry):
    """The one benchmark that needs nothing built nor fetched: the wheels each mode needs."""
    r = run_stage(*ENTRIES[entry], "stable", "--skip-build", timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    from wheelci.bench.stable import CUDA_MAJORS, TORCH_SPAN

    classic, stable = len(TORCH_SPAN) * len(CUDA_MAJORS), len(CUDA_MAJORS)
    (line,) = [line for line in r.stdout.splitlines() if line.startswith("wheels for torch")]
    assert line.startswith(f"wheels for torch {TORCH_SPAN[0]}-{TORCH_SPAN[-1]} x {'/'.join(CUDA_MAJORS)}: "
                           f"classic {classic}, stable {stable} "), line
    assert "compile s" not in r.stdout  # --skip-build built nothing
