"""The `--help` import rule (docs/internals.md): `wheelci --help` loads nothing of the package beyond
`wheelci` itself, and `wheelci build --help` and `wheelci plan --help` load the command line, the options
and the utilities below them, nothing of the library (the plan, the build, the compile) and no third-party
module (requests, packaging, twine, auditwheel: each stays inside the function that needs it). Read off
sys.modules in a fresh interpreter, so a module-level import added anywhere they reach fails here."""

from __future__ import annotations

import json
import sys

import pytest

from tests import _proc

PROBE = """
import contextlib, io, json, runpy, sys
sys.argv = ["wheelci", *sys.argv[1:]]
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    runpy.run_module("wheelci", run_name="__main__")
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""
# what a stage's --help may load of the package: the command line, the options and their data, util
ALLOWED = ("wheelci", "wheelci.cli", "wheelci.commands", "wheelci.config", "wheelci.config.options",
           "wheelci.config.stores", "wheelci.errors", "wheelci.util")


def loaded(*args: str) -> list[str]:
    r = _proc.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return list(json.loads(r.stderr.strip().splitlines()[-1]))


def test_the_commands_help_imports_nothing_of_the_package_beyond_its_entry():
    assert [m for m in loaded("--help") if m.split(".")[0] == "wheelci"] == ["wheelci"]


@pytest.mark.parametrize("stage", ["build", "plan"])
def test_a_stages_help_imports_its_parser_and_nothing_of_the_library(stage):
    modules = loaded(stage, "--help")
    ours = [m for m in modules if m.split(".")[0] == "wheelci"]
    assert f"wheelci.commands.{stage}" in ours
    beyond = [m for m in ours if m != f"wheelci.commands.{stage}" and m not in ALLOWED and not m.startswith("wheelci.util.")]
    assert not beyond, beyond
    third_party = [m for m in modules if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "wheelci"
                   and not m.startswith("_") and m != "__main__"]
    assert not third_party, third_party
