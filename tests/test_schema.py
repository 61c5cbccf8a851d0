"""The JSON schema of [tool.wheelci] (wheelci.config.schema): the shipped resource is the one the
declarations make, it accepts the example's own table and refuses what the reader refuses (a typo, a
wrong type), and validate-pyproject finds it through its entry point, as it finds cibuildwheel's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from wheelci.config import schema
from wheelci.config.options import read_table
from wheelci.errors import CiError
from wheelci.util import toml
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent


def test_the_shipped_schema_is_the_generated_one():
    shipped = ROOT / "ci" / "src" / "wheelci" / "resources" / schema.RESOURCE
    assert shipped.read_text() == schema.text(), "stale: run `python ci/tools/docsgen.py`"
    assert schema.get_schema() == schema.schema()
    with pytest.raises(KeyError):
        schema.get_schema("cibuildwheel")


def test_validate_pyproject_finds_it_through_its_entry_point():
    points = toml.loads((ROOT / "ci" / "pyproject.toml").read_text())["project"]["entry-points"]
    target = points["validate_pyproject.tool_schema"]["wheelci"]
    module, _, function = target.partition(":")
    assert (module, function) == ("wheelci.config.schema", "get_schema")
    jsonschema.Draft7Validator.check_schema(getattr(schema, function)())


def _example_table() -> dict:
    return toml.loads((ROOT / "pyproject.toml").read_text())["tool"]["wheelci"]


def test_the_example_table_validates(tmp_path):
    table = _example_table()
    jsonschema.validate(table, schema.schema())
    instance = tmp_path / "table.json"
    instance.write_text(json.dumps(table))
    schemafile = ROOT / "ci" / "src" / "wheelci" / "resources" / schema.RESOURCE
    checker = Path(sys.executable).with_name("check-jsonschema")
    r = _proc.run([str(checker), "--schemafile", str(schemafile), str(instance)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("table", [
    {"test_command": "pytest"},  # a typo
    {"limit": True},
    {"exclude": [1, 2]},
    {"env": {"A": 1}},
    {"env": {"not a name": "x"}},
    {"stable-abi": 2.1},
    {"variants": "yes"},
    {"engine": "lxc"},
    {"cpu": {"limit": "pypi"}},  # the kind tables hold env only
    {"cuda": "FORCE_CUDA=1"},
])
def test_the_schema_refuses_what_the_reader_refuses(table):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(table, schema.schema())
    with pytest.raises(CiError):
        read_table(table)


def test_the_schema_accepts_every_shape_the_reader_takes():
    table = {"test-command": ["a", "b"], "test-requires": "pytest numpy", "exclude": ["x*"], "limit": 3_000_000,
             "python": ["3.11", "3.12"], "env": {"A": "1"}, "cuda": {"env": {"FORCE_CUDA": "1"}}, "variants": True,
             "stable-abi": "2.10", "engine": "host", "public-env": "A"}
    jsonschema.validate(table, schema.schema())
    read_table(table)
