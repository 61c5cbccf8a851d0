"""Text from outside is data wherever it is shown: a project's name and version are checked (PEP 508,
PEP 440) before any output; report.md escapes every cell from the project, its tests or a wheel
(Markdown, HTML, terminal escapes); the plan's lines cannot be started by a value; report.md's bound
keeps the outcome and the failures whatever the names' lengths. The fuzz tests: whatever the names,
versions and test output, no line of its own (a Markdown heading, an HTML tag, a workflow command)."""

from __future__ import annotations

import dataclasses
import re
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import _proc
from wheelci import plan as pl
from wheelci import report
from wheelci.config.project import read_project
from wheelci.errors import CiError
from wheelci.util import untrusted

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"
FORGED = "x\n\n## Verify **passed**\n<!-- the real outcome:\n::error::forged\n::stop-commands::t\n"
FUZZ = settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
TAG = re.compile(r"<[A-Za-z!/?]")  # the start of an HTML tag, comment or processing instruction
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)")  # inline code: its text is literal, never a tag


def project_named(tmp_path: Path, name: str, version: str = "0.1.0") -> Path:
    project = tmp_path / "project"
    shutil.copytree(TINY, project)
    text = (project / "pyproject.toml").read_text()
    text = text.replace('name = "tiny-ext"', f"name = {_toml(name)}").replace('version = "0.1.0"', f"version = {_toml(version)}")
    (project / "pyproject.toml").write_text(text)
    return project


def _toml(s: str) -> str:
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in s) + '"'


@pytest.mark.parametrize("name,version", [(FORGED, "0.1.0"), ("a" * 17000, "0.1.0"), ("ok-name", "1.0\n::error::x"),
                                          ("ok-name", "<b>1</b>")])
def test_a_name_or_version_that_is_no_name_or_version_stops_the_plan_in_one_line(tmp_path, name, version):
    project = project_named(tmp_path, name, version)
    r = _proc.run([sys.executable, "-m", "ci.plan", "--project-dir", str(project)], cwd=ROOT,
                  capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[:2000])
    (line,) = r.stderr.strip().splitlines()
    assert "not a valid project name" in line or "not a PEP 440 version" in line, line
    assert "::" not in line.split(":", 2)[-1] and "Verify" not in line and "<b>" not in line


def test_a_setup_py_projects_directory_name_stands_in_as_a_valid_name(tmp_path):
    odd = tmp_path / "my proj\n::error::x"
    shutil.copytree(TINY, odd)
    (odd / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n')
    assert read_project(odd).name == "my-proj-error-x"


def build_report(name: str = "tiny-ext", test_output: str = "", check: str = "test_one", many: int = 0,
                 note: str = "") -> report.BuildReport:
    checks = {check: f"FAILED: {test_output}", **{f"test_{i}_{name[:50]}": "ok" for i in range(many)}}
    return report.BuildReport(
        plan={"project": name, "cuda": None, "torch": "2.13.0", "engine": "host", "project_dir": "/p"},
        wheels=[report.WheelReport(f"{name}-1.0-py3-none-any.whl", "py3-none-any", 10, {f"lib{name}.so": [name]},
                                   [name], [f"{name}; extra == '{test_output}'"],
                                   device_code={f"{name}/lib{test_output}.so": ["sm_80"]})],
        verify=checks, passed=False, notes=[note or name],
        steps=[{"name": "compile", "status": "ok", "seconds": 1.0, "outputs": [name, test_output]},
               {"name": "verify", "status": "failed", "seconds": 2.0, "error": test_output or "1 test failed"}])


def own_lines(md: str) -> list[str]:
    """The lines that would be markup of their own: a heading past the title, an HTML tag anywhere, a
    workflow command."""
    lines = md.splitlines()
    bad = [ln for ln in lines[1:] if ln.lstrip(" >").startswith("#")]
    bad += [ln for ln in lines if TAG.search(CODE_SPAN.sub("", ln)) or ln.lstrip().startswith("::") or "\x1b" in ln]
    return bad


def test_report_md_shows_a_forged_name_and_hostile_test_output_as_text():
    """A name with newlines, a heading and an HTML comment; a failing test's output with raw HTML and ANSI
    colours: one title line, the real outcome, no tag, no escape sequence."""
    output = "\x1b[31mE   assert 1 == 2\x1b[0m <script>alert(1)</script> <img src=x> **bold** [link](http://x)"
    md = report.to_markdown(build_report(FORGED, output, check="<!-- hidden -->"))
    assert not own_lines(md), own_lines(md)
    assert md.count("**Stopped at step verify**") == 1 and "Verify **passed**" not in CODE_SPAN.sub("", md)
    assert "E assert 1 == 2" in md and "&lt;script&gt;" in md  # shown, as text


def test_report_md_shows_a_librarys_path_in_its_device_code_line_as_text():
    lib = "pkg/x`<img src=x onerror=alert(1)>` [click](https://evil.example) `.so\n## Forged heading\n<!--"
    md = report.to_markdown(dataclasses.replace(build_report("p"), wheels=[dataclasses.replace(
        build_report("p").wheels[0], device_code={lib: ["sm_80"]})]))
    assert not own_lines(md), own_lines(md)
    assert "[click](" not in CODE_SPAN.sub("", md)


@pytest.mark.parametrize("secret_value", ["Pa#ss&w*rd|CANARY9", "a<b>c~d\\e[f]g_CANARY", "CANARYtokenABCDEFGHIJ"])
def test_report_md_and_the_job_summary_redact_a_secret_before_escaping_or_cutting(tmp_path, monkeypatch, secret_value):
    """Redacted after escaping, a secret holding Markdown's or HTML's characters no longer matched its
    registered value, and one cut at a cell's edge left its prefix: both reached report.md."""
    from wheelci.util import secret

    secret.add(secret_value)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    r = dataclasses.replace(build_report("p", f"login with {secret_value} refused"), verify={
        "test_login": f"FAILED: login with {secret_value} refused",
        "test_cut": "FAILED: " + "x" * (report.CELL - 20) + " " + secret_value})
    (tmp_path / "out").mkdir()
    _, md_path = report.write(r, tmp_path / "out")
    for text in (md_path.read_text(), summary.read_text()):
        assert "CANARY" not in text, [ln for ln in text.splitlines() if "CANARY" in ln]
        assert "CANARY" not in text.replace("\\", "").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")


def test_report_md_keeps_the_outcome_and_failures_whatever_the_names_length():
    r = build_report("n" * 17000, "boom " * 5000, many=300)
    md = report.to_markdown(r)
    assert len(md.encode()) <= report.MAX_BYTES
    assert "**Stopped at step verify**" in md and "| test_one | FAILED: boom" in md, md[:3000]


def test_the_plan_shows_a_forged_name_and_notes_on_their_own_lines_only():
    plan = dataclasses.replace(pl.make_plan(pl.Request(cuda=None, engine="host"), project_dir=ROOT),
                               project=FORGED, notes=[FORGED, "\x1b]0;title\x07\x1b[2J"])
    text = pl.format_plan(plan)
    assert not [ln for ln in text.splitlines() if ln.startswith("::") or ln.startswith("#") or "\x1b" in ln]
    assert len(text.splitlines()) == len(pl.format_plan(dataclasses.replace(plan, project="p", notes=["a", "b"])).splitlines())


def test_stop_commands_wrap_lines_with_a_fresh_token():
    first, *middle, last = untrusted.workflow_commands_off(["::error::x", "plain"])
    token = first.removeprefix("::stop-commands::")
    assert len(token) >= 32 and last == f"::{token}::" and middle == ["::error::x", "plain"]
    assert untrusted.workflow_commands_off([])[0] != first


@pytest.mark.parametrize("value", ["stop-commands", "::stop-commands::", "commands::"])
def test_a_secret_inside_the_stop_commands_marker_never_rewrites_it(value, monkeypatch):
    """A secret value that is part of `::stop-commands::TOKEN` rewrote the marker as the output was
    redacted: the lines it wraps then ran as workflow commands."""
    import io

    from wheelci.util import secret

    for name in ("_values", "_users", "_needles"):  # this test's odd secret stays in this test
        monkeypatch.setattr(secret, name, type(getattr(secret, name))(getattr(secret, name)))
    secret.add(value)
    out = io.StringIO()
    secret.RedactingStream(out).write("\n".join(untrusted.workflow_commands_off(["::error::x", f"a {value} b"])) + "\n")
    first, middle, plain, last = out.getvalue().splitlines()
    token = first.removeprefix("::stop-commands::")
    assert re.fullmatch("[0-9a-f]{32}", token) and last == f"::{token}::", out.getvalue()
    assert plain == "a *** b" and middle == "::error::x"


_PLAN = pl.make_plan(pl.Request(cuda=None, engine="host"), project_dir=ROOT)
text_from_outside = st.text(st.characters(codec="utf-8"), max_size=300) | st.sampled_from(
    ["\n# h", "\n<!--", "\n::error::x", "\r::warning::y", "\u2028## z", "\x1b[1m", "`` ` ``", "|", "<b", "\n>#"])


@FUZZ
@given(name=text_from_outside, version=text_from_outside, output=text_from_outside, check=text_from_outside)
def test_fuzz_report_md_and_the_plan_never_make_lines_of_their_own(name, version, output, check):
    r = build_report(name + version, output, check=check, note=version + output)
    md = report.to_markdown(dataclasses.replace(r, plan={**r.plan, "torch": version}))
    assert not own_lines(md), own_lines(md)
    assert len(md.encode()) <= report.MAX_BYTES and "**Stopped at step verify**" in md
    text = pl.format_plan(dataclasses.replace(_PLAN, project=name, project_dir=Path("/x" + version), notes=[output]))
    assert not [ln for ln in text.splitlines() if ln.lstrip().startswith("::") or "\x1b" in ln]


@FUZZ
@given(name=text_from_outside, version=text_from_outside)
def test_fuzz_names_and_versions_are_checked_or_refused_in_one_line(name, version):
    from wheelci.config.project import _check_name_and_version

    try:
        _check_name_and_version(name, version, Path("pyproject.toml"))
    except CiError as e:
        assert "\n" not in str(e), str(e)
        return
    assert "\n" not in name + version and "<" not in name


def test_on_github_actions_the_plan_is_printed_with_workflow_commands_off(tmp_path):
    """`wheelci plan` in a workflow: whatever a value holds, the runner reads no command from its lines."""
    r = _proc.run([sys.executable, "-m", "ci.plan", "--project-dir", str(TINY)], cwd=ROOT, capture_output=True,
                  text=True, env={**__import__("os").environ, "GITHUB_ACTIONS": "true"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    token = lines[0].removeprefix("::stop-commands::")
    assert lines[0] != token and len(token) >= 32 and lines[-1] == f"::{token}::"
    assert any(ln.startswith("project ") for ln in lines[1:-1])


HOSTILE_TOOL = (r"import sys; w = sys.stdout.write; w('::error title=wheelci::build OK\n'); "
                r"w('\x1b]52;c;ZXZpbA==\x07\x1b[2K\x1b[1;1Hok \x1b[32mgreen\x1b[0m\n'); w('::add-mask::report\n'); "
                r"w('\x1b\x1b]x\x07[2J \x1b\x01]0;t\x07 \xc2\x9b2J\n'); w('::error::no newline at the end')")


@pytest.mark.parametrize("actions", [True, False], ids=["github-actions", "terminal"])
def test_a_tools_streamed_output_keeps_its_colours_and_drives_nothing(capfd, monkeypatch, actions):
    """A project's setup.py or tests print what they like while the tool streams them: on GitHub Actions no
    line of it runs as a workflow command (GitHub's stop-commands switch around it), and anywhere only its
    colours reach the terminal (no clipboard write, no cursor move or cleared line to redraw it)."""
    from wheelci.util import proc

    monkeypatch.setenv("GITHUB_ACTIONS", "true" if actions else "false")
    proc.stream([sys.executable, "-c", HOSTILE_TOOL], what="a hostile tool")
    err = capfd.readouterr().err
    assert "\x1b]52" not in err and "\x1b[2K" not in err and "\x1b[1;1H" not in err
    assert "\x1b[2J" not in err and "\x1b\x01]" not in err and "\x9b" not in err  # rebuilt or split escapes, C1
    assert "ok \x1b[32mgreen\x1b[0m" in err
    lines = err.splitlines()
    commands = [i for i, ln in enumerate(lines) if ln.startswith(("::error", "::add-mask"))]
    if actions:
        (start,) = [i for i, ln in enumerate(lines) if ln.startswith("::stop-commands::")]
        token = lines[start].removeprefix("::stop-commands::")
        assert len(token) == 32 and start < min(commands) and max(commands) < lines.index(f"::{token}::")
    else:
        assert not any("stop-commands" in ln for ln in lines)
