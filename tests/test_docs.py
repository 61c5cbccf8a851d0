"""The documentation against the code: every link in README.md and docs/ lands on a file and heading
that exist, docs/reference.md names every option of every stage and every [tool.wheelci] key, and the
README's first screen shows the two commands a fresh clone runs."""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import types
from pathlib import Path

import pytest

from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REFERENCE = ROOT / "docs" / "reference.md"
STAGES_WITH_PARSERS = ("build", "plan", "repair", "check", "split", "patch", "preload", "index", "upload",
                       "verify", "abi", "image", "engine", "cache")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The page without its fenced blocks, where a `[x](y)` is code, not a link."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def anchors(page: Path) -> set[str]:
    """The heading anchors GitHub gives a page: lowercased, punctuation but `-` and `_` dropped,
    spaces made `-`, a repeated one numbered."""
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(page.read_text()).splitlines():
        if not (m := re.match(r"^#{1,6}\s+(.*)$", line)):
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_land_on_files_and_headings(page):
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not ours to check
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target} (no {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string a parser takes, its subcommands' included, less the hidden ones."""
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options(sub)
        elif action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
            found.update(action.option_strings)
    return found


@pytest.mark.parametrize("stage", STAGES_WITH_PARSERS)
def test_the_reference_names_every_option(stage):
    module = importlib.import_module(f"wheelci.commands.{stage}")
    text = REFERENCE.read_text()
    section = text.split(f"## `wheelci {stage}`", 1)
    assert len(section) == 2, f"docs/reference.md has no section for wheelci {stage}"
    body = section[1].split("\n## ", 1)[0]
    common = text.split("## Common to every stage", 1)[1].split("\n## ", 1)[0]
    missing = sorted(o for o in _options(module.build_parser())
                     if not re.search(rf"`{re.escape(o)}[` ]", body + common))
    assert not missing, f"docs/reference.md's wheelci {stage} section does not name {missing}"


def test_the_reference_names_every_tool_ci_key():
    from wheelci.config.project import SETTINGS

    table = REFERENCE.read_text().split("## `[tool.wheelci]`", 1)[1].split("\n## ", 1)[0]
    missing = [key for key in SETTINGS if f"| `{key}` |" not in table]
    assert not missing, f"docs/reference.md's [tool.wheelci] table lacks {missing}"


def test_the_readme_shows_the_fresh_clone_commands_first():
    first_screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:40])
    for command in ("./scripts/build ", "./scripts/test"):
        assert command in first_screen, f"README.md's first 40 lines do not show {command.strip()}"


PACKAGE = ROOT / "ci" / "src" / "wheelci"


def documented_modules(text: str) -> set[str]:
    """Module paths (`compile/host.py`) the package table of docs/internals.md names, row by row: a row
    starts with its directory and runs on its indented lines."""
    block = text.split("## The package", 1)[1].split("```", 2)[1]
    found, directory = set(), None
    for line in block.splitlines():
        if m := re.match(r"^wheelci/(\S*)\s", line):
            directory = m.group(1)
        if directory is not None:
            found |= {directory + name for name in re.findall(r"(?<![\w/.*])([\w]+\.py)\b", line)}
    return found


def test_internals_names_every_module_of_the_package():
    modules = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    named = documented_modules((ROOT / "docs" / "internals.md").read_text())
    assert not modules - named, f"docs/internals.md does not name {sorted(modules - named)}"
    assert not named - modules, f"docs/internals.md names modules that are gone: {sorted(named - modules)}"
    # the check can fail
    sample = "## The package\n```\nwheelci/util/  log.py gone.py\n                x.py\n```\n"
    assert documented_modules(sample) == {"util/log.py", "util/gone.py", "util/x.py"}


def test_the_flow_in_the_docs_is_the_build_step_list():
    """README.md and docs/stages.md draw `wheelci build`'s flow: the plan, then build.STEPS in order (the
    bookkeeping steps, which print nothing of their own, left out)."""
    from wheelci.build import STEPS

    flow = " ──► ".join(["plan", *(step.name for step in STEPS if not step.quiet)])
    for page in (ROOT / "README.md", ROOT / "docs" / "stages.md"):
        drawn = [line for line in page.read_text().splitlines() if "──►" in line]
        assert drawn == [flow], (page.name, drawn, flow)


def _docsgen() -> types.ModuleType:
    """The repository's docs generator (ci/tools/docsgen.py: development tooling, not shipped)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docsgen", ROOT / "ci" / "tools" / "docsgen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_generated_parts_are_current():
    """docs/reference.md's options, [tool.wheelci] keys, variables, CUDA rows, stages, benchmarks, and the
    CUDA lists and store table other pages show, are made from the code (ci/tools/docsgen.py); run
    `python ci/tools/docsgen.py` after changing what they come from."""
    gen = _docsgen()
    text = REFERENCE.read_text()
    assert set(gen.parts(text)) >= set(gen.PARTS) - {"stores"}, gen.parts(text)
    seen = {name for page in gen.PAGES for name in gen.parts(page.read_text())}
    assert seen == set(gen.PARTS) | set(gen.INLINE_PARTS), seen
    for page in gen.PAGES:
        assert gen.render(page.read_text()) == page.read_text(), f"{page.name} is stale: run `python ci/tools/docsgen.py`"
    # the check can fail: a hand edit inside a generated part is undone, a table's or a sentence's
    edited = text.replace("| 11.8 | 2.7.1 |", "| 11.8 | 2.6.0 |")
    assert edited != text and gen.render(edited) == text
    workflow = (ROOT / "docs" / "workflow.md").read_text()
    edited = workflow.replace("11.8, 12.6, 12.8, 12.9, 13.0", "11.8, 12.6, 12.8, 13.0")
    assert edited != workflow and gen.render(edited) == workflow


def test_the_generator_is_the_repositorys_not_the_suites():
    """It writes a shipped resource and the docs: development tooling (ci/tools), not a test helper."""
    assert not (ROOT / "tests" / "_docsgen.py").exists()
    r = _proc.run([sys.executable, str(ROOT / "ci" / "tools" / "docsgen.py"), "--check"], capture_output=True,
                  text=True, cwd=ROOT)
    assert r.returncode == 0 and "stale" not in r.stdout, r.stdout + r.stderr
