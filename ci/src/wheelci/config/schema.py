"""The JSON schema of `[tool.wheelci]`, made from the declarations (wheelci.config.options) and shipped as
wheelci/resources/wheelci.schema.json, as cibuildwheel ships its own.

validate-pyproject reads it through the `validate_pyproject.tool_schema` entry point (get_schema).
`python ci/tools/docsgen.py` (in the repository) writes the resource again after a declaration changed;
tests/test_schema.py fails while the shipped file is stale.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from wheelci.config import options
from wheelci.config.options import Option

RESOURCE = "wheelci.schema.json"
_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_STRINGS = {"type": "array", "items": {"type": "string"}}

# option kind -> the JSON schema of its TOML value (what options.read_value accepts)
KINDS: dict[str, dict[str, Any]] = {
    "str": {"type": "string", "minLength": 1},
    "csv": {"anyOf": [{"type": "string", "minLength": 1}, {**_STRINGS, "minItems": 1}]},
    "command": {"anyOf": [{"type": "string", "pattern": r"\S"},
                          {"type": "array", "items": {"type": "string", "pattern": r"\S"}, "minItems": 1}]},
    "words": {"anyOf": [{"type": "string"}, _STRINGS]},
    "env": {"type": "object", "propertyNames": {"pattern": _NAME}, "additionalProperties": {"type": "string"}},
    "limit": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]},
    "stable_abi": {"type": "string", "pattern": r"^\s*\d+\.\d+\s*$"},
    "bool": {"type": "boolean"},
}


def _property(o: Option) -> dict[str, Any]:
    value = {"enum": list(o.choices or ())} if o.kind == "choice" else dict(KINDS[o.kind])
    doc = {"description": o.help + (f" (variable {o.variable}, option {o.flag})" if o.variable else
                                    f" (option {o.flag})"), **value}
    if o.default not in (None, False) or o.kind == "bool":
        doc["default"] = o.default if o.default is not None else False
    return doc


def schema() -> dict[str, Any]:
    """The schema of the table, every key an option's, its kind tables holding only their own keys."""
    props = {o.key: _property(o) for o in options.OPTIONS if o.key}
    per_kind = {o.key: _property(o) for o in options.OPTIONS if o.key and o.per_kind}
    for kind in options.KINDS:
        props[kind] = {"description": f"settings for {kind.upper() if kind == 'cpu' else 'CUDA'} builds only, "
                                      "over the table's", "type": "object", "additionalProperties": False,
                       "properties": per_kind}
    return {"$schema": "http://json-schema.org/draft-07/schema#",
            "title": "wheelci's settings: [tool.wheelci] in pyproject.toml", "type": "object",
            "additionalProperties": False, "properties": props}


def text() -> str:
    """The schema as the resource holds it."""
    return json.dumps(schema(), indent=2, sort_keys=False) + "\n"


def get_schema(tool_name: str = "wheelci") -> dict[str, Any]:
    """The shipped schema, for validate-pyproject's `validate_pyproject.tool_schema` entry point."""
    if tool_name != "wheelci":
        raise KeyError(f"no schema for [tool.{tool_name}]: this plugin validates [tool.wheelci]")
    data: dict[str, Any] = json.loads(resources.files("wheelci.resources").joinpath(RESOURCE).read_text())
    return data
