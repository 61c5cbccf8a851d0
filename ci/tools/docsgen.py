"""The docs' generated parts and the shipped JSON schema of [tool.wheelci]
(wheelci/resources/wheelci.schema.json, wheelci.config.schema), made from what the code declares: the stages (wheelci.__main__),
the benchmarks, the options of `build` and `plan` and the `[tool.wheelci]` keys (wheelci.config.options),
the tool's variables (wheelci.util.variables), the CUDA matrix's rows (matrix.toml) and the compile
cache's stores (wheelci.config.stores), in docs/reference.md and wherever another page names them. The
prose around them is written by hand; a table sits between `<!-- begin generated: NAME -->` and
`<!-- end generated: NAME -->`, a list inside a sentence between `<!-- generated: NAME -->` and
`<!-- /generated -->`. Development tooling of the repository's, not shipped:

    python ci/tools/docsgen.py          # rewrite the docs' generated parts and the schema
    python ci/tools/docsgen.py --check  # exit 1 when any is stale (tests/test_docs.py, test_schema.py check the same)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from wheelci.config.options import Option

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference.md"
PAGES = tuple(ROOT / "docs" / name for name in ("reference.md", "workflow.md", "building.md"))  # with generated parts
BLOCK = re.compile(r"(<!-- begin generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)", re.S)
INLINE = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->)(?P<body>.*?)(<!-- /generated -->)", re.S)


def _cell(text: str) -> str:
    """Text in a Markdown table cell: a `|` escaped, flags, variables and keys in code spans."""
    text = text.replace("|", "\\|")
    return re.sub(r"(?<![`\w])(--[a-z][\w-]*|WHEELCI_[A-Z_]+|\[tool\.[\w.]+\](?: [a-z][\w-]*)?)(?![\w`])", r"`\1`", text)


def stages() -> str:
    from wheelci.__main__ import STAGES

    return "Stages: " + ", ".join(f"`{s}`" for s in STAGES) + ".\n"


def bench() -> str:
    from wheelci.bench import BENCHMARKS

    return (f"`wheelci bench {{{','.join(BENCHMARKS)}}} [ARGS]` (also `python -m ci.bench` in this repository):\n"
            "benchmarks against the baseline a user would otherwise run. Their options and figures are in\n"
            "[performance.md](performance.md).\n")


def _flag_cell(o: Option) -> str:
    arg = "" if o.kind == "bool" else " " + (o.metavar or ("{" + ",".join(o.choices) + "}" if o.choices
                                                            else o.name.upper()))
    return ", ".join(f"`{f}{arg}`" for f in o.flags)


def _options(command: str) -> str:
    from wheelci.config import options

    rows = ["| option | meaning | default | variable | `[tool.wheelci]` |", "|---|---|---|---|---|"]
    if command == "build":
        rows.append("| `PROJECT` | a project directory or an sdist (`.tar.gz`); default: the current directory | | | |")
    else:
        rows += ["| `PROJECT` | a project directory or an sdist (`.tar.gz`); default: `--project-dir`, else the "
                 "current directory | | | |", "| `--project-dir DIR` | where `pyproject.toml` is (as `PROJECT`) | `.` | | |"]
    for group, title in options.GROUPS.items():
        taken = [o for o in options.OPTIONS if o.group == group and command in o.commands]
        rows += [f"| **{title}** | | | | |"] if taken else []
        for o in taken:
            default = f"`{o.default}`" if o.default not in (None, False) else ""
            rows.append(f"| {_flag_cell(o)} | {_cell(o.help)} | {default} | "
                        f"{f'`{o.variable}`' if o.variable else ''} | {f'`{o.key}`' if o.key else ''} |")
    return "\n".join(rows) + "\n"


TYPES = {"str": "string", "csv": "string (comma-separated) or list of strings",
         "command": "string, or a list of strings run in order (stopping at the first that fails)",
         "words": "list of strings (a string is whitespace-separated items)",
         "env": "table of strings, names that are identifiers",
         "limit": "string (`pypi`, `github`, a size like `\"3GB\"`) or an integer byte count",
         "stable_abi": "string such as `\"2.10\"` (a TOML number 2.10 would read as 2.1)",
         "bool": "`true` or `false`"}


def tool_table() -> str:
    from wheelci.config import options

    rows = ["| key | type | meaning | variable | option |", "|---|---|---|---|---|"]
    for o in options.OPTIONS:
        if o.key:
            kind = "one of " + ", ".join(f"`{c}`" for c in o.choices or ()) if o.kind == "choice" else TYPES[o.kind]
            rows.append(f"| `{o.key}` | {kind} | {_cell(o.help)} | `{o.variable}` | `{o.flag}` |")
    for o in options.OPTIONS:
        if o.per_kind and o.key:
            for kind in options.KINDS:
                rows.append(f"| `{kind}.{o.key}` (`[tool.wheelci.{kind}] {o.key}`) | as `{o.key}` | `{o.key}` for "
                            f"{'CUDA' if kind == 'cuda' else 'CPU'} builds only, over the table's | | `{o.flag}` "
                            "(over both) |")
    return "\n".join(rows) + "\n"


def variables() -> str:
    from wheelci.util import variables as v

    rows = ["| variable | effect |", "|---|---|"]
    rows += [f"| `{x.name}` | {x.help}" + (f" (formerly `{x.old}`, still read)" if x.old else "") + " |"
             for x in v.VARIABLES]
    return "\n".join(rows) + "\n"


def matrix() -> str:
    from wheelci.config import matrix as mx

    m = mx.load()
    rows = ["| `--cuda` | default torch | default `TORCH_CUDA_ARCH_LIST` | nvcc's GCC ceiling |", "|---|---|---|---|"]
    rows += [f"| {r.version} | {r.default_torch or '(from the index)'} | `{r.arch_list}` | {r.gcc_max} |"
             for r in m.rows]
    rows.append(f"| `--cpu` | {m.default_torch} | | |")
    return "\n".join(rows) + "\n"


def _rows() -> list[str]:
    from wheelci.config import matrix as mx

    return [r.version for r in mx.load().rows]


def cuda_choices() -> str:
    """The CUDA versions as `--cuda` lists them in its refusal: cpu, then every row."""
    return ", ".join(["cpu", *_rows()])


def cuda_range() -> str:
    rows = _rows()
    return f"{rows[0]} to {rows[-1]}"


def rows_without_torch() -> str:
    from wheelci.config import matrix as mx

    return ", ".join(r.version for r in mx.load().rows if not r.default_torch)


def stores() -> str:
    from wheelci.config.stores import STORES

    rows = ["| store | `--compile-cache` | credentials |", "|---|---|---|"]
    rows += [f"| {s.kind} | `{s.form}` | {s.credentials} |" for s in STORES]
    return "\n".join(rows) + "\n"


PARTS: dict[str, Callable[[], str]] = {
    "stages": stages, "build-options": lambda: _options("build"), "plan-options": lambda: _options("plan"),
    "tool-wheelci": tool_table, "variables": variables, "matrix": matrix, "bench": bench, "stores": stores,
}
INLINE_PARTS: dict[str, Callable[[], str]] = {
    "cuda-choices": cuda_choices, "cuda-range": cuda_range, "rows-without-torch": rows_without_torch,
}


def render(text: str) -> str:
    """`text` with every generated part made again (an unknown part's name is an error)."""
    def part(m: re.Match[str]) -> str:
        return m.group(1) + PARTS[m.group("name")]() + m.group(4)

    def inline(m: re.Match[str]) -> str:
        return m.group(1) + INLINE_PARTS[m.group("name")]() + m.group(4)

    return INLINE.sub(inline, BLOCK.sub(part, text))


def parts(text: str) -> list[str]:
    return [m.group("name") for m in (*BLOCK.finditer(text), *INLINE.finditer(text))]


SCHEMA = ROOT / "ci" / "src" / "wheelci" / "resources" / "wheelci.schema.json"


def main(argv: list[str]) -> int:
    from wheelci.config import schema

    stale = 0
    for path, new in (*((page, render(page.read_text())) for page in PAGES), (SCHEMA, schema.text())):
        old = path.read_text() if path.is_file() else None
        if "--check" in argv:
            print(f"{path}: {'stale: run python ci/tools/docsgen.py' if new != old else 'up to date'}")
            stale |= new != old
        elif new != old:
            path.write_text(new)
            print(f"wrote {path}")
    return stale


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "ci" / "src"))
    sys.exit(main(sys.argv[1:]))
