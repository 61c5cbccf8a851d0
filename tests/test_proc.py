"""ci.util.proc: a failed tool is one line with the run's purpose, the tool and its last stderr line."""

from __future__ import annotations

import sys

import pytest

from wheelci.errors import CiError
from wheelci.util import log, proc


def test_a_failure_says_what_it_was_for_which_tool_and_its_last_line():
    code = "import sys; print('noise', file=sys.stderr); print('the reason', file=sys.stderr); sys.exit(3)"
    with pytest.raises(CiError) as e:
        proc.run([sys.executable, "-c", code], what="reading torch's version")
    assert str(e.value) == f"reading torch's version: {proc.tool_name([sys.executable])} failed with exit status 3: the reason"


def test_python_dash_m_is_named_by_its_module_and_a_missing_tool_is_said_so(tmp_path):
    assert proc.tool_name(["/x/bin/python", "-m", "pip", "install"]) == "pip"
    assert proc.tool_name("sh -c 'unbalanced") == "sh" and proc.tool_name("") == "?"
    with pytest.raises(CiError, match=r"^probing: absent-tool is not installed"):
        proc.run([tmp_path / "absent-tool", "--version"], what="probing")


def test_unchecked_runs_return_and_verbose_echoes(monkeypatch, capsys):
    monkeypatch.setattr(log, "VERBOSE", True)
    r = proc.run([sys.executable, "-c", "raise SystemExit(1)"], what="x", check=False)
    assert r.returncode == 1
    assert capsys.readouterr().err.startswith(f"+ {sys.executable} -c 'raise SystemExit(1)'")
