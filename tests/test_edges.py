"""The fifth review's small promises at the edges: a user's value echoed in an error is bounded, a store URL
refuses what sccache cannot honour rather than dropping it, and a refused credential is reported as refused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests import _proc
from tests._servers import Redis
from tests.test_compile_cache import sccache_binary

ROOT = Path(__file__).resolve().parent.parent


def test_a_huge_wrong_typed_table_value_is_one_bounded_line(tmp_path):
    import shutil

    project = tmp_path / "tiny_ext"
    shutil.copytree(ROOT / "tests" / "fixtures" / "tiny_ext", project)
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        "[tool.wheelci]", "[tool.wheelci]\nlimit = [" + ", ".join(['"x"'] * 200_000) + "]\n", 1))
    r = _proc.run([sys.executable, "-m", "wheelci", "plan", str(project), "--cpu"], capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr[:500]
    assert len(r.stderr) < 1200 and "limit must be a size" in r.stderr and "(list, 1000000 characters)" in r.stderr


def test_any_error_line_is_bounded():
    """Whatever a message holds, the command's one line says at most ERROR_WIDTH characters of it."""
    from wheelci.cli import ERROR_WIDTH, shown

    assert len(shown("x" * 5_000_000)) == ERROR_WIDTH
    assert shown("a\nb\x1b[2J") == "a\\nb\\x1b[2J"


@pytest.mark.parametrize("url,words", [
    ("redis://127.0.0.1:6379?db=2", "a redis:// URL takes no query"),
    ("rediss://h:6380/1?ssl_cert_reqs=none", "a rediss:// URL takes no query"),
    ("https://dav.example/cache/?token=abc", "a https:// URL takes no query"),
    ("s3://bucket?endpoint=ftp://minio:9000", "endpoint is an http:// or https:// URL"),
    ("s3://bucket?endpoint=file:///etc", "endpoint is an http:// or https:// URL"),
    ("s3://bucket?endpoint=http://h:port", "endpoint is not a URL"),
    ("s3://bucket?endpoint=%20http://h", "endpoint holds a space or a control character"),
    ("s3://bucket?endpoint=http://h%0d%0aX-Injected:1", "endpoint holds a space or a control character"),
])
def test_a_store_url_refuses_what_sccache_cannot_honour(url, words):
    from wheelci.config.compilecache import parse
    from wheelci.errors import CiError

    with pytest.raises(CiError, match=words):
        parse(url, {})


def test_a_refused_redis_password_is_reported_as_refused(tmp_path, capsys):
    """sccache retries a wrong password silently; the report says the store refused the credentials, not
    that it did not answer."""
    from wheelci.compile import sccache
    from wheelci.config.compilecache import parse
    from wheelci.util import log

    log.configure("test")
    with Redis(tmp_path / "redis", password="the-right-password") as store:
        wrong = store.url.replace("the-right-password", "a-wrong-password")
        with sccache.serving(parse(wrong, {}), sccache_binary(), tmp_path / "work", "", timeout=3) as (server, reports):
            assert server is None
        assert sccache.refused(parse(store.url, {})) is None
    (report,) = reports
    assert report.note == "the store refused its credentials (wrong user or password): compiled locally", report
    assert "a-wrong-password" not in capsys.readouterr().err
