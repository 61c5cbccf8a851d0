"""ci.upload against a real pypiserver on loopback: upload, pip install, skip-existing, failures."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

import pytest

from wheelci.publish.endpoint import is_loopback, redactor, simple_url_for, strip_userinfo
from wheelci.publish.listing import Conflict, parse_listing
from wheelci.upload import upload
from wheelci.verifyenv import fresh_venv
from tests._servers import KillingProxy, PypiServer, build_wheel, pip_install
from tests import _proc

ROOT = Path(__file__).resolve().parents[1]
USER = "ci-bot"
TOKEN = "pypi-Zx9qTOKENdo-not-print-7731"  # must never appear in any output


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("upload-wheels")
    return {
        "pkg": build_wheel(tmp, name="pub_pkg", version="1.0", module="pubpkg", value=42),
        # Same file name, different bytes: a rebuild someone forgot to version-bump.
        "pkg_rebuilt": build_wheel(tmp, name="pub_pkg", version="1.0", module="pubpkg", value=43),
        "second": build_wheel(tmp, name="second_pkg", version="0.1", module="secondpkg", value=2),
        "bad_rst": build_wheel(tmp, name="rst_pkg", version="1.0", module="rstpkg", readme="README.rst",
                               readme_text="Title\n=====\n\n.. nosuchdirective:: x\n"),
    }


@pytest.fixture
def server(tmp_path):
    with PypiServer(tmp_path / "pypiserver", USER, TOKEN) as srv:
        yield srv


def env(password: str | None = TOKEN, **extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("TWINE_")}
    e.update(PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring", TWINE_USERNAME=USER)
    if password is not None:
        e["TWINE_PASSWORD"] = password
    e.update(extra)
    return e


def cli(*args: str, environ: dict[str, str] | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    return _proc.run([sys.executable, "-m", "ci.upload", *args], cwd=ROOT, capture_output=True,
                     text=True, env=environ if environ is not None else env(), timeout=timeout)


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def no_secret(r: subprocess.CompletedProcess, secret: str = TOKEN) -> None:
    assert secret not in r.stdout and secret not in r.stderr


def error_lines(r: subprocess.CompletedProcess) -> list[str]:
    return [l for l in r.stderr.splitlines() if l.startswith("python -m ci.upload: error:")]


# ---------------------------------------------------------------- the happy path, end to end


def test_upload_then_pip_install_from_the_private_index(tmp_path, server, wheels):
    whl = wheels["pkg"]
    r = cli("--repository-url", server.url, "--json", str(whl))
    assert r.returncode == 0, r.stderr
    no_secret(r)
    result = json.loads(r.stdout)
    assert result["uploaded"] == [whl.name] and result["skipped"] == []
    assert result["files"][0]["sha256"] == sha256(whl)
    assert "verified 1 file(s)" in r.stderr
    assert sha256(server.packages / whl.name) == sha256(whl)

    py = fresh_venv(tmp_path / "venv")
    p = pip_install(py, "--index-url", server.url + "simple/", "pub-pkg")
    assert p.returncode == 0, p.stdout + p.stderr
    out = _proc.run([str(py), "-c", "import pubpkg; print(pubpkg.VALUE)"], capture_output=True,
                    text=True, check=True).stdout
    assert out.strip() == "42"


def test_credentials_from_pypirc_and_from_the_url_are_not_printed(tmp_path, server, wheels):
    rc = tmp_path / "pypirc"
    rc.write_text(f"[distutils]\nindex-servers = internal\n\n[internal]\nrepository = {server.url}\n"
                  f"username = {USER}\npassword = {TOKEN}\n")
    r = cli("--repository", "internal", "--config-file", str(rc), str(wheels["pkg"]), environ=env(None))
    assert r.returncode == 0, r.stderr
    no_secret(r)
    url_with_token = server.url.replace("http://", f"http://{USER}:{TOKEN}@")
    r = cli("--repository-url", url_with_token, "--skip-existing", str(wheels["second"]),
            str(wheels["pkg"]), environ=env(None))
    assert r.returncode == 0, r.stderr
    no_secret(r)
    assert "uploaded second_pkg-0.1" in r.stdout and "skipped pub_pkg-1.0" in r.stdout


KEYRING_BACKEND = """
import json, os
from keyring.backend import KeyringBackend

class FileKeyring(KeyringBackend):
    \"\"\"A real keyring backend (read-only, from a JSON file), loaded by keyring via its env var.\"\"\"
    priority = 1

    def get_password(self, service, username):
        with open(os.environ["TEST_KEYRING_FILE"]) as f:
            return json.load(f).get(f"{service}|{username}")

    def set_password(self, service, username, password):
        raise NotImplementedError

    def delete_password(self, service, username):
        raise NotImplementedError
"""


def test_password_from_keyring(tmp_path, server, wheels):
    (tmp_path / "kr").mkdir()
    (tmp_path / "kr" / "test_file_keyring.py").write_text(KEYRING_BACKEND)
    store = tmp_path / "keyring.json"
    store.write_text(json.dumps({f"{server.url}|{USER}": TOKEN}))
    e = env(None, PYTHON_KEYRING_BACKEND="test_file_keyring.FileKeyring", TEST_KEYRING_FILE=str(store),
            PYTHONPATH=str(tmp_path / "kr"))
    r = cli("--repository-url", server.url, str(wheels["second"]), environ=e)
    assert r.returncode == 0, r.stderr
    no_secret(r)
    assert (server.packages / wheels["second"].name).exists()


def test_plain_http_to_a_non_loopback_host_warns(wheels):
    # 0.0.0.0 is not loopback to the check, yet connecting to it fails at once (nothing listens on 9).
    r = cli("--repository-url", "http://0.0.0.0:9/", "--retries", "0", str(wheels["second"]))
    assert r.returncode == 1
    assert "warning: http://0.0.0.0:9/ is plain http" in r.stderr
    (line,) = error_lines(r)
    assert "failed after 1 attempt:" in line and "refused" in line.lower()
    no_secret(r)


def test_library_api_returns_the_result(server, wheels):
    os.environ.setdefault("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    rc_env = {"TWINE_USERNAME": USER, "TWINE_PASSWORD": TOKEN}
    old = {k: os.environ.get(k) for k in rc_env}
    os.environ.update(rc_env)
    try:
        result = upload([wheels["second"]], repository_url=server.url, log=lambda m: None)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert result.uploaded == [wheels["second"].name]
    assert result.simple_url == server.url + "simple/"


# ---------------------------------------------------------------- existing files


def test_skip_existing_only_skips_the_same_bytes(server, wheels):
    assert cli("--repository-url", server.url, str(wheels["pkg"])).returncode == 0

    same = cli("--repository-url", server.url, "--skip-existing", "--json", str(wheels["pkg"]))
    assert same.returncode == 0, same.stderr
    assert json.loads(same.stdout)["skipped"] == [wheels["pkg"].name]

    other = cli("--repository-url", server.url, "--skip-existing", str(wheels["pkg_rebuilt"]))
    assert other.returncode == 1
    assert error_lines(other) and "different" in error_lines(other)[0]
    assert "uploaded" not in other.stdout
    assert sha256(server.packages / wheels["pkg"].name) == sha256(wheels["pkg"])  # untouched

    again = cli("--repository-url", server.url, str(wheels["pkg"]))
    assert again.returncode == 1 and "--skip-existing" in error_lines(again)[0]


# ---------------------------------------------------------------- failures are clear, never success


def test_wrong_password_fails_in_one_line_and_uploads_nothing(server, wheels):
    wrong = "wrong-Secret-55190"
    r = cli("--repository-url", server.url, "--json", str(wheels["pkg"]), environ=env(wrong))
    assert r.returncode == 2
    assert len(error_lines(r)) == 1 and "rejected the credentials" in error_lines(r)[0]
    failure = json.loads(r.stdout)  # the --json failure document: the error line's text, no result
    assert failure["ok"] is False and failure["exit_code"] == 2 and "result" not in failure
    assert error_lines(r)[0].endswith(failure["error"])
    no_secret(r, wrong)
    assert not list(server.packages.iterdir())


def test_server_killed_mid_upload_fails_clearly(tmp_path, server, wheels):
    proxy = KillingProxy(server.port, on_upload=server.kill)
    try:
        r = cli("--repository-url", proxy.url, "--retries", "2", "--backoff", "0.05", "--json",
                str(wheels["pkg"]))
    finally:
        proxy.close()
    assert proxy.fired.is_set()
    assert r.returncode == 1, r.stderr
    failure = json.loads(r.stdout)
    assert failure["exit_code"] == 1 and "result" not in failure
    (line,) = error_lines(r)
    assert "failed after 3 attempts" in line and "connection" in line
    no_secret(r)


def test_server_killed_mid_upload_and_restarted_is_retried(tmp_path, server, wheels):
    def kill_and_restart() -> None:
        server.kill()
        server.start()  # same port, same package directory

    proxy = KillingProxy(server.port, on_upload=kill_and_restart)
    try:
        r = cli("--repository-url", proxy.url, "--backoff", "0.05", "--json", str(wheels["pkg"]))
    finally:
        proxy.close()
    assert proxy.fired.is_set()
    assert r.returncode == 0, r.stderr
    (f,) = json.loads(r.stdout)["files"]
    assert f["status"] == "uploaded" and f["attempts"] == 2
    assert "retrying" in r.stderr
    assert sha256(server.packages / wheels["pkg"].name) == sha256(wheels["pkg"])


class _Always503(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_POST(self) -> None:  # noqa: N802
        type(self).hits += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(503, "Service Unavailable")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_5xx_is_retried_then_reported(wheels):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Always503)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        r = cli("--repository-url", f"http://127.0.0.1:{srv.server_address[1]}/", "--retries", "2",
                "--backoff", "0.01", str(wheels["second"]))
    finally:
        srv.shutdown()
    assert r.returncode == 1
    (line,) = error_lines(r)
    assert "after 3 attempts" in line and "503" in line
    assert _Always503.hits == 3
    assert "uploaded" not in r.stdout


def test_a_server_that_never_answers_times_out_clearly(wheels):
    import socket
    conns = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)

    def accept_and_hold() -> None:  # reads the request, never replies
        while True:
            try:
                c, _ = sock.accept()
            except OSError:
                return
            conns.append(c)
            threading.Thread(target=lambda: [None for _ in iter(lambda: c.recv(65536), b"")],
                             daemon=True).start()

    threading.Thread(target=accept_and_hold, daemon=True).start()
    try:
        r = cli("--repository-url", f"http://127.0.0.1:{sock.getsockname()[1]}/", "--timeout", "0.5",
                "--retries", "1", "--backoff", "0.01", str(wheels["second"]))
    finally:
        sock.close()
        for c in conns:
            c.close()
    assert r.returncode == 1
    (line,) = error_lines(r)
    assert "failed after 2 attempts: timeout" in line
    assert len(conns) == 2 and "uploaded" not in r.stdout


def test_twine_check_failure_stops_before_uploading(server, wheels):
    r = cli("--repository-url", server.url, str(wheels["bad_rst"]))
    assert r.returncode == 1
    (line,) = error_lines(r)
    assert "twine check failed" in line and "rst_pkg" in line
    assert not list(server.packages.iterdir())


@pytest.mark.parametrize("args, words", [
    (["--repository-url", "http://127.0.0.1:9/", "nope-1.0-py3-none-any.whl"], "no such file"),
    (["--repository-url", "http://127.0.0.1:9/", "pyproject.toml"], "not a wheel, sdist or variants file"),
    (["PKG"], "no index given"),
    (["--repository", "nosuchsection", "--config-file", "PYPIRC", "PKG"], "nosuchsection"),
    (["--repository", "internal", "--config-file", "BADRC", "PKG"], "Malformed configuration"),
    (["--repository-url", "http://127.0.0.1:9/", "--retries", "-1", "PKG"], "--retries"),
    (["--repository-url", "http://127.0.0.1:9/", "--timeout", "0", "PKG"], "--timeout"),
    (["--repository-url", "not a url", "PKG"], "Invalid repository URL"),
], ids=["missing-file", "not-a-dist", "no-index", "unknown-pypirc-section", "malformed-pypirc",
        "negative-retries",
        "zero-timeout", "bad-url"])
def test_bad_input_is_one_line_exit_2(wheels, args, words, tmp_path):
    pypirc = tmp_path / "pypirc"
    pypirc.write_text("[distutils]\nindex-servers = internal\n\n"
                      "[internal]\nrepository = http://127.0.0.1:9/\n")
    bad = tmp_path / "badrc"
    bad.write_text("[internal\nrepository = http://127.0.0.1:9/\n  ]\n")
    files = {"PKG": str(wheels["pkg"]), "PYPIRC": str(pypirc), "BADRC": str(bad)}
    args = [files.get(a, a) for a in args]
    r = cli(*args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m ci.upload: error:") and words in lines[0], r.stderr
    assert r.stdout == ""


def test_help():
    r = cli("--help")
    assert r.returncode == 0 and "--skip-existing" in r.stdout


# ---------------------------------------------------------------- pure pieces


def test_plain_http_warning_applies_to_non_loopback_only():
    assert is_loopback("http://127.0.0.1:8080/") and is_loopback("http://[::1]/")
    assert is_loopback("http://localhost/")
    assert not is_loopback("http://pypi.internal.example/") and not is_loopback("http://10.0.0.5/")


def test_simple_url_for():
    assert simple_url_for("https://upload.pypi.org/legacy/") == "https://pypi.org/simple/"
    assert simple_url_for("https://devpi.example/root/prod/legacy") == "https://devpi.example/root/prod/simple/"
    assert simple_url_for("http://127.0.0.1:8080") == "http://127.0.0.1:8080/simple/"


def test_strip_userinfo_and_redact():
    assert strip_userinfo("https://u:p%40ss@h.example:8443/x/") == "https://h.example:8443/x/"
    redact = redactor(["p@ss word"])
    assert redact("bad p@ss word and p%40ss%20word") == "bad *** and ***"


def test_parse_listing_html_and_json():
    sha = "a" * 64
    upper = json.dumps({"files": [{"filename": "x-1.0-py3-none-any.whl", "hashes": {"sha256": sha.upper()}}]})
    assert parse_listing(upper, "application/vnd.pypi.simple.v1+json") == {"x-1.0-py3-none-any.whl": sha}
    html = f'<a href="../../packages/x-1.0-py3-none-any.whl#sha256={sha}">x</a><a href="y-2.tar.gz">y</a>'
    assert parse_listing(html, "text/html") == {"x-1.0-py3-none-any.whl": sha, "y-2.tar.gz": None}
    doc = json.dumps({"files": [{"filename": "x-1.0-py3-none-any.whl", "hashes": {"sha256": sha}}]})
    assert parse_listing(doc, "application/vnd.pypi.simple.v1+json") == {"x-1.0-py3-none-any.whl": sha}


# ---------------------------------------------------------------- the review's findings


def test_credentials_in_the_simple_url_never_appear(server, wheels):
    """--simple-url with user:token@: not on success (text or --json), not on failure."""
    simple = server.url.replace("http://", f"http://{USER}:{TOKEN}@") + "simple/"
    for extra in ((), ("--json",)):
        r = cli("--repository-url", server.url, "--simple-url", simple, "--skip-existing", *extra,
                str(wheels["pkg"]))
        assert r.returncode == 0, r.stderr
        no_secret(r)
        assert f"{USER}:" not in r.stdout + r.stderr
    # A failure (a different file under the same name) names the index, never the token.
    r = cli("--repository-url", server.url, "--simple-url", simple, "--skip-existing",
            str(wheels["pkg_rebuilt"]))
    assert r.returncode == 1
    no_secret(r)


@contextlib.contextmanager
def echo_server(extra: str = ""):
    """A server on loopback that refuses every upload, echoing the request's Authorization header
    (and `extra`) in its error page: what a careless proxy does. Yields its host:port."""
    class Echo(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = f"bad request from {self.headers.get('Authorization')}{extra}".encode()
            self.send_response(400, "Bad Request")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()


def test_every_given_secret_is_redacted_from_errors(wheels):
    """A server that echoes the request's Authorization back in its error page."""
    with echo_server(f" password={TOKEN}") as address:
        r = cli("--repository-url", f"http://{address}/", str(wheels["second"]))
    assert r.returncode == 1
    no_secret(r)
    import base64
    assert base64.b64encode(f"{USER}:{TOKEN}".encode()).decode() not in r.stderr


class _Redirect(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(301, "Moved Permanently")
        self.send_header("Location", "https://packages.example.internal/upload/")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_a_redirect_is_a_configuration_error(wheels):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redirect)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        r = cli("--repository-url", f"http://127.0.0.1:{srv.server_address[1]}/", str(wheels["second"]))
    finally:
        srv.shutdown()
    assert r.returncode == 2, r.stderr
    (line,) = error_lines(r)
    assert "redirect" in line and "https://packages.example.internal/upload/" in line
    assert "Traceback" not in r.stderr


@pytest.fixture
def tls_server(tmp_path):
    """An HTTPS server with a self-signed certificate the client does not trust."""
    import ssl
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    _proc.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
               "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Always503)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()


def test_a_tls_verification_error_is_a_configuration_error_not_retried(tls_server, wheels):
    r = cli("--repository-url", tls_server, "--backoff", "5", str(wheels["second"]))
    assert r.returncode == 2, r.stderr
    (line,) = error_lines(r)
    assert "certificate" in line.lower() and "TWINE_CERT" in line
    assert "retrying" not in r.stderr


def test_two_uploads_of_the_same_wheel_at_once(server, wheels):
    """Two matrix jobs publish the same wheel: one uploads, the other skips it, neither fails."""
    cmd = [sys.executable, "-m", "ci.upload", "--repository-url", server.url, "--skip-existing", "--json",
           str(wheels["pkg"])]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    results = [json.loads(o[0]) for o in outs]
    assert sorted(len(r["uploaded"]) for r in results) == [0, 1], results
    assert sorted(len(r["skipped"]) for r in results) == [0, 1], results
    assert sha256(server.packages / wheels["pkg"].name) == sha256(wheels["pkg"])
    # A different file under that name still fails.
    r = cli("--repository-url", server.url, "--skip-existing", str(wheels["pkg_rebuilt"]))
    assert r.returncode == 1 and "different" in error_lines(r)[0]


def test_a_server_that_serves_another_file_after_accepting_is_a_finding(tmp_path, wheels):
    """Accepts every upload (200), then lists the file with another sha256."""
    whl = wheels["second"]
    body = f'<a href="/f/{whl.name}#sha256={"0" * 64}">{whl.name}</a>'.encode()
    srv = _serve_listing(lambda _: body, whl, "text/html")
    try:
        r = cli("--repository-url", f"http://127.0.0.1:{srv.server_address[1]}/", str(whl))
    finally:
        srv.shutdown()
    assert r.returncode == 1
    (line,) = error_lines(r)
    assert "serves a different" in line


def _twice(whl: Path, kind: str) -> bytes:
    """A page linking whl's name twice: first with another file's sha256, last with ours."""
    other = "0" * 64
    if kind == "html":
        return "".join(f'<a href="/f/{h[:8]}/{whl.name}#sha256={h}">{whl.name}</a>'
                       for h in (other, sha256(whl))).encode()
    return _json_page([{"filename": whl.name, "url": f"/f/{h[:8]}/{whl.name}", "hashes": {"sha256": h}}
                       for h in (other, sha256(whl))])


@pytest.mark.parametrize("kind", ["html", "json"])
@pytest.mark.parametrize("skip_existing", [False, True])
def test_a_page_listing_one_name_twice_with_different_hashes_verifies_nothing(wheels, kind, skip_existing):
    """Before, the last link won: ours, so the upload was "verified" while uv installed the other file."""
    whl = wheels["second"]
    srv = _serve_listing(lambda w: _twice(w, kind), whl,
                         "text/html" if kind == "html" else "application/vnd.pypi.simple.v1+json")
    try:
        r = cli("--repository-url", f"http://127.0.0.1:{srv.server_address[1]}/", str(whl),
                *(["--skip-existing"] if skip_existing else []))
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.returncode == 1, r.stderr
    (line,) = error_lines(r)
    assert f"lists {whl.name} more than once with different sha256" in line and "0" * 64 in line, line


def test_parse_listing_keeps_a_name_listed_twice():
    sha, other = "a" * 64, "b" * 64
    html = f'<a href="p/x-1.whl#sha256={sha}">1</a><a href="q/x-1.whl#sha256={sha}">2</a>'
    assert parse_listing(html, "text/html") == {"x-1.whl": sha}  # the same file twice is fine
    html += f'<a href="r/x-1.whl#sha256={other}">3</a><a href="s/x-1.whl">4</a>'
    assert parse_listing(html, "text/html") == {"x-1.whl": Conflict((sha, other, None))}


def _serve_listing(body_for: Callable[[Path], bytes | Iterable[bytes]], whl: Path,
                   content_type: str = "application/vnd.pypi.simple.v1+json") -> http.server.ThreadingHTTPServer:
    """Accepts every upload (200) and answers every GET with body_for(whl) (PEP 691 JSON by default);
    an iterable body is streamed chunk by chunk, without a Content-Length, until it ends or the client goes."""

    class Listing(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            body = body_for(whl)
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            if isinstance(body, bytes):
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                for chunk in [body] if isinstance(body, bytes) else body:
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except OSError:  # the client gave up: what the slow pages are for
                pass

        def log_message(self, *args) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listing)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _json_page(files: list) -> bytes:
    return json.dumps({"meta": {"api-version": "1.0"}, "name": "second-pkg", "files": files}).encode()


JSON_PAGES = {
    "uppercase-sha256": (lambda w: _json_page([{"filename": w.name, "url": w.name,
                                                "hashes": {"sha256": sha256(w).upper()}}]), 0, "verified 1 file"),
    "no-filename": (lambda w: _json_page([{"url": w.name, "hashes": {"sha256": sha256(w)}}]), 2,
                    "malformed PEP 691 JSON page"),
    "files-not-a-list": (lambda w: json.dumps({"files": {"a": 1}}).encode(), 2, "malformed PEP 691 JSON page"),
    "not-json": (lambda w: b"<html>", 2, "malformed PEP 691 JSON page"),
    "bad-sha256": (lambda w: _json_page([{"filename": w.name, "hashes": {"sha256": ["x"]}}]), 2,
                   "malformed PEP 691 JSON page"),
}


@pytest.mark.parametrize("kind", sorted(JSON_PAGES))
def test_pep691_pages_compare_hashes_case_insensitively_and_malformed_ones_are_one_line(wheels, kind):
    """Uppercase hex was a false "serves a different file"; a page without a filename an unexpected KeyError."""
    body_for, code, words = JSON_PAGES[kind]
    srv = _serve_listing(body_for, wheels["second"])
    try:
        r = cli("--repository-url", f"http://127.0.0.1:{srv.server_address[1]}/", str(wheels["second"]))
    finally:
        srv.shutdown()
    assert r.returncode == code, r.stderr
    if code:
        (line,) = r.stderr.strip().splitlines()[-1:]
        assert error_lines(r) == [line] and words in line and "unexpected" not in line, r.stderr
        assert f"uploaded before this: {wheels['second'].name}" in line  # the server accepted it first
    else:
        assert words in r.stderr


def _stream(chunk: bytes, pause: float, total: int | None = None) -> Callable[[Path], Iterable[bytes]]:
    """A page body of `chunk` again and again, `pause` seconds apart, until `total` bytes (None: forever)."""
    def body_for(_: Path) -> Iterable[bytes]:
        sent = 0
        while total is None or sent < total:
            yield chunk
            sent += len(chunk)
            time.sleep(pause)
    return body_for


# kind -> (body, content type, --timeout, words in the error line, seconds the run may take: past them the
# run is stopped and the test fails naming it, a bound ten times the page's own, so a loaded machine passes)
SLOW_PAGES = {
    # One byte every 50 ms: every socket read succeeds, so a per-read timeout never fires.
    "trickle-json": (_stream(b" ", 0.05), "application/vnd.pypi.simple.v1+json", "2",
                     "did not arrive within 2 s", 20),
    "trickle-html": (_stream(b"<a>", 0.05), "text/html", "2", "did not arrive within 2 s", 20),
    # 80 MiB as fast as loopback goes (bounded, so the code before the fix could not eat the machine).
    "huge-html": (_stream(b"x" * (1 << 16), 0, 80 << 20), "text/html", "60", "is over 64.0 MiB", 50),
}


@pytest.mark.parametrize("kind", sorted(SLOW_PAGES))
def test_a_slow_or_huge_simple_page_is_one_line_exit_2_within_the_timeout(wheels, kind):
    """requests' timeout bounds each read, not the page: a trickling server held ci.upload forever and a
    huge one went into memory. The whole GET is bounded by --timeout and the body by a size cap."""
    body_for, content_type, timeout, words, limit = SLOW_PAGES[kind]
    srv = _serve_listing(body_for, wheels["second"], content_type)
    url = f"http://{USER}:{TOKEN}@127.0.0.1:{srv.server_address[1]}/"  # the password must never show
    try:
        r = cli("--repository-url", url, "--timeout", timeout, "--retries", "0", "--skip-existing",
                str(wheels["second"]), environ=env(None), timeout=limit)
    finally:
        srv.shutdown()
    assert r.returncode == 2, r.stderr[-2000:]
    no_secret(r)
    (line,) = error_lines(r)
    assert r.stderr.strip().splitlines()[-1] == line and "unexpected" not in line, r.stderr[-2000:]
    assert words in line and f"127.0.0.1:{srv.server_address[1]}/simple/second-pkg/" in line, line
    assert "uploaded" not in r.stdout


# ---------------------------------------------------------------- a second real private index: devpi


@pytest.mark.slow
@pytest.mark.network
def test_devpi_upload_skip_existing_verify_and_install(tmp_path, wheels):
    from tests._servers import DevpiServer
    with DevpiServer(tmp_path / "devpi", USER, TOKEN) as devpi:
        args = ("--repository-url", devpi.upload_url, "--simple-url", devpi.simple_url, "--json")
        r = cli(*args, str(wheels["pkg"]), str(wheels["second"]))
        assert r.returncode == 0, r.stderr
        no_secret(r)
        assert sorted(json.loads(r.stdout)["uploaded"]) == sorted([wheels["pkg"].name, wheels["second"].name])
        assert f"verified 2 file(s) on {devpi.simple_url}" in r.stderr

        again = cli(*args, "--skip-existing", str(wheels["pkg"]))
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["skipped"] == [wheels["pkg"].name]

        other = cli(*args, "--skip-existing", str(wheels["pkg_rebuilt"]))
        assert other.returncode == 1 and "different" in error_lines(other)[0]
        no_secret(other)

        wrong = cli(*args, str(wheels["second"]), environ=env("not-the-password"))
        assert wrong.returncode == 2 and "rejected the credentials" in error_lines(wrong)[0]

        py = fresh_venv(tmp_path / "venv")
        p = pip_install(py, "--index-url", devpi.simple_url, "pub-pkg")
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    out = _proc.run([str(py), "-c", "import pubpkg; print(pubpkg.VALUE)"], capture_output=True,
                    text=True, check=True).stdout
    assert out.strip() == "42"  # the first upload, not the rebuilt one


def test_a_password_in_a_pypirc_repository_url_is_never_printed(tmp_path, server, wheels):
    """twine leaves user:password@ in a .pypirc `repository =` URL: the password (and the Basic
    header made of it) must be redacted like any other, in errors and in --json alike."""
    import base64
    rc = tmp_path / "pypirc"
    rc.write_text("[distutils]\nindex-servers = internal\n\n[internal]\n"
                  f"repository = {server.url.replace('http://', f'http://{USER}:{TOKEN}@')}\n")
    anonymous = {k: v for k, v in env(None).items() if k != "TWINE_USERNAME"}  # the URL's user:password
    r = cli("--repository", "internal", "--config-file", str(rc), "--json", str(wheels["second"]),
            environ=anonymous)
    assert r.returncode == 0, r.stderr
    no_secret(r)
    assert json.loads(r.stdout)["repository_url"] == server.url

    with echo_server() as address:
        rc.write_text("[distutils]\nindex-servers = internal\n\n[internal]\n"
                      f"repository = http://{USER}:{TOKEN}@{address}/\n")
        r = cli("--repository", "internal", "--config-file", str(rc), str(wheels["second"]),
                environ=anonymous)
    assert r.returncode == 1, r.stderr
    assert "bad request from" in r.stderr
    no_secret(r)
    assert base64.b64encode(f"{USER}:{TOKEN}".encode()).decode() not in r.stdout + r.stderr


def test_an_anonymous_upload_prints_no_keyring_traceback(tmp_path, wheels):
    """No user name and a keyring that cannot answer: twine logs the keyring's traceback, which never
    reaches stderr; the upload's own error is the one line."""
    environ = {k: v for k, v in env(password=None).items() if k != "TWINE_USERNAME"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = cli("--repository-url", f"http://127.0.0.1:{port}/", "--retries", "0", str(wheels["pkg"]), environ=environ)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and "keyring" not in r.stderr.lower(), r.stderr
    assert len([ln for ln in r.stderr.splitlines() if "error:" in ln]) == 1, r.stderr
