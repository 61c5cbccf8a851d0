"""One redaction for every URL the tool shows or stores, whatever gave it: a credential-named query value
(`?access_token=`, `X-Amz-Signature=`) and userinfo are masked although nobody registered them, in an
index page's links, a redirect's Location, a store's error text or a JSON document quoting any of them."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import _proc
from tests._servers import NegotiatingServer
from tests.test_releases import index_dir  # noqa: F401 (a fixture: a static index of torch 2.99.0 and 2.98.0)
from wheelci.util import http, secret

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("access_token", "token", "api_key", "apikey", "X-Amz-Signature", "sig", "signature", "password", "auth",
        "private_token", "X-Goog-Credential", "client_secret", "key", "pwd", "pass", "jwt", "session", "accesskey")
tokens = st.text("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789_-", min_size=6, max_size=40).map(lambda s: "zQ" + s)  # "zQ": in no text around it


def _urls(token: str, key: str, host: str) -> list[str]:
    """The token in every position a URL carries one."""
    return [
        f"https://{host}/simple/torch/torch-2.99.0-cp311-cp311-manylinux_2_28_x86_64.whl?{key}={token}",
        f"https://{host}/files/t.whl?expires=1700000000&{key}={token}&v=2#sha256=00ff",
        f"https://{host}/files/t.whl?a=1;{key}={token}",
        f"https://__token__:{token}@{host}/simple/",
        f"https://{token}@{host}/simple/",
        f"http://user:{token}@{host}:8080/p?x=1",
    ]


def _containers(url: str) -> list[str]:
    """Texts that quote a URL: a PEP 503 page, a PEP 691 page, an error line, a redirect, a log line."""
    escaped = url.replace("&", "&amp;")
    return [
        f'<html><body><a href="{escaped}" data-requires-python="&gt;=3.11">torch.whl</a><br/></body></html>',
        json.dumps({"meta": {"api-version": "1.1"}, "files": [{"filename": "t.whl", "url": url}]}),
        json.dumps({"url": url}, ensure_ascii=True).replace("&", "\\u0026"),
        f"error: GET {url} failed with 403 Forbidden",
        f"HTTP/1.1 302 Found\r\nLocation: {url}\r\n",
        f"sccache: error: Server startup failed: cache storage failed to read: {url}: connection refused",
        f"'{url}'",
        f"GET {url.split('://', 1)[1].partition('/')[1]}{url.split('://', 1)[1].partition('/')[2]} HTTP/1.1",  # a path, as a server logs it
    ]


@settings(max_examples=150, deadline=None)
@given(token=tokens, key=st.sampled_from(KEYS), host=st.sampled_from(["index.example", "10.0.0.1", "[::1]"]))
def test_a_token_in_any_url_position_is_masked_whoever_gave_the_url(token, key, host):
    for url in _urls(token, key, host):
        assert token not in http.shown(url), url
        for text in _containers(url):
            assert token not in secret.redact(text), text
            assert token.encode() not in secret.redact_bytes(text.encode()), text


def test_what_is_not_a_credential_stays_readable():
    text = "https://h.example/simple/torch/?page=2&size=30&format=json and https://h/x.whl#sha256=00ff"
    assert secret.redact(text) == text
    assert secret.redact("https://h/x?access_token=T0k3n-abcdef&page=2") == "https://h/x?access_token=***&page=2"


@pytest.fixture
def tokened_index(index_dir, tmp_path):  # noqa: F811
    """The static index, its torch page linking every file with `?access_token=` as a private index signs them."""
    root = tmp_path / "index"
    shutil.copytree(index_dir, root)
    page = root / "simple" / "torch" / "index.html"
    page.write_text(page.read_text().replace('.whl"', '.whl?access_token=TOKEN-from-the-page-4321"')
                    .replace('.whl#', '.whl?access_token=TOKEN-from-the-page-4321#'))
    (root / "simple" / "torch" / "index.json").unlink()
    assert "TOKEN-from-the-page-4321" in page.read_text()
    return root


def test_a_token_an_index_page_links_with_is_in_no_plan_output_or_cache_record(tokened_index, tmp_path):
    """The index answers with signed links: plan --json, the text plan and the torch-release record show
    none of the token; the release was read through those links (the plan took it)."""
    cache = tmp_path / "cache"
    with NegotiatingServer(tokened_index) as server:
        outputs = []
        for extra in (["--json"], []):
            r = _proc.run([sys.executable, "-m", "wheelci", "plan", str(ROOT / "tests" / "fixtures" / "tiny_ext"),
                           "--cuda", "13.3", "--torch", "2.99.0", "--engine", "host",
                           "--torch-index-url", server.url + "simple", *extra],
                          capture_output=True, text=True, env={"WHEELCI_CACHE_DIR": str(cache)})
            assert r.returncode == 0, r.stderr
            outputs.append(r.stdout + r.stderr)
        # the signed links were requested as the page gave them (a masked `***` would be refused by a real index)
        asked = [path for path, _ in server.served if "access_token" in path]
        assert asked and all("access_token=TOKEN-from-the-page-4321" in p for p in asked), server.served
    assert "2.99.0" in outputs[0] and "access_token=***" in outputs[0], outputs[0]
    records = [p.read_text() for p in cache.rglob("*.json")]
    assert records and any("2.99.0" in t for t in records)
    for text in (*outputs, *records):
        assert "TOKEN-from-the-page" not in text, text


@pytest.mark.parametrize("name,value", [
    (b"MY_TOKEN", b"\xff\xfe-token-not-utf8"),
    (b"PIP_INDEX_URL", b"https://u:p\xffassword-of-pip@h/"),
    (b"WHEELCI_TORCH", b"2.\xff"),
    (b"WHEELCI_CACHE_MAX_SIZE", b"\xc3\x28"),
    (b"CXXFLAGS", b"-O2 \x01\x1b[31m\xff"),
    (b"\xffODD_NAME", b"x"),
])
def test_any_byte_in_any_variable_is_one_line_or_fine_never_a_traceback(name, value):
    """The fifth review: a credential-named variable whose value is not UTF-8 crashed every command with a
    traceback, before its arguments were read. Whatever bytes the environment holds, a command ends 0 or 2
    in one line, and no credential's readable part is shown (a character printed as a space once cut a URL's
    userinfo off its `@`)."""
    import os

    env = {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items() if not k.startswith("WHEELCI_")}
    env[name] = value
    r = _proc.run([sys.executable, "-m", "wheelci", "plan", str(ROOT / "tests" / "fixtures" / "tiny_ext"), "--cpu"],
                  capture_output=True, env=env)
    out = (r.stdout + r.stderr).decode("utf-8", "replace")
    assert r.returncode in (0, 2) and "Traceback" not in out, out
    if r.returncode == 2:
        assert len(r.stderr.decode(errors="replace").strip().splitlines()) == 1, out
    assert "token-not-utf8" not in out and "assword-of-pip" not in out
