"""The one voice on stderr: info, warnings and timed steps, as a terminal and as GitHub Actions see them;
and no module of ci prints its own progress."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest

from tests._wheels import run_stage
from wheelci.util import log

ROOT = Path(__file__).resolve().parent.parent
# Where writing to stderr is the job: the logger itself, the command echo of --verbose, the CLI's error line,
# and the long tools whose own output streams through.
MAY_WRITE_STDERR = {"util/log.py", "util/proc.py", "cli.py", "__main__.py"}
PACKAGE = ROOT / "ci" / "src" / "wheelci"


@pytest.fixture
def voice(monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.setattr(log, "_voice", "ci.test")
    monkeypatch.setattr(log, "_open_steps", 0)


def test_info_and_warning_on_a_terminal(voice, capsys):
    log.info("compiling")
    log.warning("plain http")
    out, err = capsys.readouterr()
    assert out == "" and err == "ci.test: compiling\nci.test: warning: plain http\n"


def test_a_step_says_its_time_when_it_ends(voice, capsys):
    with log.step("compile"):
        log.info("inside")
    assert capsys.readouterr().err.splitlines() == ["ci.test: inside", "ci.test: compile: 0 s"]


def test_a_failed_step_adds_nothing_to_the_error(voice, capsys):
    with pytest.raises(RuntimeError):
        with log.step("compile"):
            raise RuntimeError("x")
    assert capsys.readouterr().err == ""


def test_github_actions_groups_the_outer_step_and_annotates_warnings(voice, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    with pytest.raises(RuntimeError):
        with log.step("compile (host)"):
            with log.step("inner"):  # groups do not nest on Actions: only the outer one groups
                log.warning("50% done\nsecond line")
            raise RuntimeError("x")
    with log.step("verify"):
        pass
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "::group::compile (host)",
        "::warning title=ci.test::50%25 done%0Asecond line",
        "ci.test: inner: 0 s",
        "::endgroup::",  # closed even though the step failed
        "::group::verify",
        "::endgroup::",
        "ci.test: verify: 0 s",
    ]


def _stderr_prints(path: Path) -> list[int]:
    """Lines of print(..., file=sys.stderr) and sys.stderr.write(...) calls."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "print":
            if any(k.arg == "file" and ast.unparse(k.value) == "sys.stderr" for k in node.keywords):
                lines.append(node.lineno)
        elif isinstance(f, ast.Attribute) and f.attr == "write" and ast.unparse(f.value) == "sys.stderr":
            lines.append(node.lineno)
    return lines


def test_no_module_prints_its_own_progress():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if rel in MAY_WRITE_STDERR or rel.startswith("resources/") or rel.startswith("bench"):
            continue
        if lines := _stderr_prints(path):
            found[rel] = lines
    assert found == {}, f"print through ci.util.log instead: {found}"


def _prints(path: Path) -> list[int]:
    """Lines of every print() call, to any stream."""
    return [node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"]


def test_the_packages_below_the_stages_never_print():
    """A stage's main prints its result on stdout (`--json` output must be only that); what the stages
    share (ci/util, wheel, native, config, compile) prints nothing, to either stream, except the logger
    and the command echo."""
    found = {}
    for package in ("util", "wheel", "native", "config", "compile"):
        for path in sorted((PACKAGE / package).rglob("*.py")):
            rel = str(path.relative_to(PACKAGE))
            if rel not in MAY_WRITE_STDERR and (lines := _prints(path)):
                found[rel] = lines
    assert found == {}, f"say it through ci.util.log, or return it to the stage: {found}"


HOSTILE = "one\n::error title=forged::project text\r::warning::two\u2028::notice::three \x1b]0;pwned\x07\x1b[31mred"
OWN_COMMAND = re.compile(r"::(?:group::|endgroup::$|warning title=|stop-commands::[0-9a-f]{32}$|[0-9a-f]{32}::$)")


def forged(text: str) -> list[str]:
    """The lines a workflow log would read as a command the tool did not write, or that drive a terminal."""
    return [ln for ln in text.splitlines() if (ln.startswith("::") and not OWN_COMMAND.match(ln)) or "\x1b" in ln]


def test_the_logger_never_lets_a_message_write_a_line_of_its_own(voice, capsys, monkeypatch):
    for actions in ("", "true"):
        monkeypatch.setenv("GITHUB_ACTIONS", actions)
        log.info(f"note: {HOSTILE}")
        log.warning(HOSTILE)
        with log.step(HOSTILE):
            log.info(f"running the test command: {HOSTILE}")
        err = capsys.readouterr().err
        assert not forged(err), err
        assert "project text" in err and "red" in err  # shown, as text


def test_a_real_build_prints_project_text_as_text_on_github_actions(tmp_path):
    """A project's [tool.wheelci] env value, a build switch its setup.py reads, reached a real build's note
    line raw: its newline started a `::error` workflow command of the project's choosing."""
    project = tmp_path / "p"
    shutil.copytree(ROOT / "tests" / "fixtures" / "tiny_ext", project,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    setup = project / "setup.py"
    setup.write_text('import os\nos.environ.get("MAMBA_FORCE_BUILD")\n' + setup.read_text())
    text = (project / "pyproject.toml").read_text()
    (project / "pyproject.toml").write_text(text.replace(
        "[tool.wheelci]\n", "[tool.wheelci]\nenv = { MAMBA_FORCE_BUILD = " + json.dumps("TRUE" + HOSTILE) + " }\n", 1))
    (tmp_path / "out").write_text("a file, not a wheel directory: the build stops after its notes\n")
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", tmp_path / "out",
                  "--public-env", "MAMBA_FORCE_BUILD",
                  env={"GITHUB_ACTIONS": "true", "WHEELCI_CACHE_DIR": str(tmp_path / "cache"),
                       "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")})
    out = r.stdout + r.stderr
    assert "MAMBA_FORCE_BUILD" in out and "project text" in out, out[-3000:]
    assert r.returncode != 0 and not forged(out), forged(out)
