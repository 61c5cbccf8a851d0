"""Everything the tool fetches goes through one client (wheelci.util.http): credentials reach every
request to their own origin (the page, `.metadata`, each range read) and no other, a request has one
deadline in all, and every refusal is one line without the credential. Real servers on loopback: a
private index that wants Basic auth on every path, one that redirects to another port, one that drips."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest

from tests import _proc
from tests._servers import GuardedServer
from tests._wheels import build_wheel, without_metadata
from wheelci.config.releases import TorchIndex
from wheelci.errors import CiError
from wheelci.util import http

ROOT = Path(__file__).resolve().parent.parent
CANARY = "canary-Tok3n-x9q"
TOOLKIT = "cuda-toolkit[cublas,cudart]==13.3.1; platform_system == \"Linux\""


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    """A static index (this tool's `index` stage) of torch 2.99.0, with its PEP 658 metadata."""
    dist = tmp_path_factory.mktemp("dist")
    build_wheel(dist, "torch", "2.99.0", {"torch/__init__.py": ""}, tag="cp312-cp312-manylinux_2_28_x86_64",
                requires=(TOOLKIT,), headers="Requires-Python: >=3.11")
    r = _proc.run([sys.executable, "-m", "ci.index", str(dist)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return dist


def with_userinfo(url: str, user: str, password: str) -> str:
    from urllib.parse import quote

    return url.replace("http://", f"http://{quote(user, safe='')}:{quote(password, safe='')}@")


@pytest.mark.parametrize("metadata", [True, False], ids=["pep658", "ranges"])
def test_a_private_index_gets_its_credentials_on_every_request(index_dir, tmp_path, metadata):
    """The page, the `.metadata` file and each range read all carry the credentials; a password holding
    `/`, `#` and `@` works percent-encoded."""
    root = index_dir if metadata else without_metadata(index_dir, tmp_path / "served")
    password = f"p/a#s@s-{CANARY}"
    with GuardedServer(root, "ci-user", password) as server:
        release = TorchIndex(with_userinfo(server.url, "ci-user", password) + "simple", tmp_path / "c").release("2.99.0")
    assert release.cuda == "13.3"
    paths = [p for _, p, _ in server.seen]
    assert any(p.endswith(".whl.metadata") if metadata else p.endswith(".whl") for p in paths), paths
    assert all(h.get("Authorization") for _, _, h in server.seen)  # not one 401 on the way
    assert CANARY not in release.source
    assert not any(CANARY in f.read_text() for f in (tmp_path / "c").rglob("*") if f.is_file())


def test_a_redirect_to_another_origin_never_carries_the_credentials(index_dir, tmp_path):
    """Server A (private) redirects everything to server B on another port: B never sees the token,
    in clear, URL-quoted or inside a Basic header."""
    basic = base64.b64encode(f"ci-user:{CANARY}".encode()).decode()
    with GuardedServer(index_dir) as other, GuardedServer(index_dir, "ci-user", CANARY, redirect=other.url) as mirror:
        release = TorchIndex(with_userinfo(mirror.url, "ci-user", CANARY) + "simple", tmp_path / "c").release("2.99.0")
    assert release.cuda == "13.3" and other.seen and mirror.seen
    assert all(h.get("Authorization") for _, _, h in mirror.seen)  # A got them on every request
    seen = other.headers_seen()
    assert CANARY not in seen and basic not in seen and "Authorization" not in seen, seen


def test_a_dripping_server_fails_within_the_deadline_in_one_line(index_dir, tmp_path):
    """One byte a second never trips a per-read timeout; the request's own deadline does."""
    with GuardedServer(index_dir, drip=1.0) as server:
        with pytest.raises(CiError) as e:
            TorchIndex(server.url + "simple", tmp_path / "c", deadline=2).release("2.99.0")
    assert "too slow" in str(e.value) and "\n" not in str(e.value), e.value


def test_a_password_the_url_cannot_hold_raw_is_one_line_that_shows_none_of_it(index_dir, tmp_path):
    for url in (f"http://u:pa/{CANARY}@127.0.0.1:1/simple", f"http://u:pa#{CANARY}@127.0.0.1:1/simple",
                f"http://u:{CANARY}/x@127.0.0.1:1/simple"):
        with pytest.raises(CiError) as e:
            TorchIndex(url, tmp_path / "c").release("2.99.0")
        message = str(e.value)
        assert "percent-encode" in message and "\n" not in message, message
        assert CANARY not in message and "pa" not in message.split("percent")[0], message


def test_every_refusal_is_one_line_without_the_credential(index_dir, tmp_path):
    """401 (with and without credentials), 404, a redirect loop, a body over its cap, a refused
    connection, a scheme the client does not speak."""
    lines = []
    with GuardedServer(index_dir, "ci-user", CANARY) as private, GuardedServer(index_dir) as public:
        with GuardedServer(index_dir) as looping:
            looping.redirect = looping.url  # every path redirects to itself
            cases = [
                (http.Client(private.url), private.url + "simple/torch/", "HTTP 401", {}),
                (http.Client(with_userinfo(private.url, "ci-user", "wrong-" + CANARY)), private.url + "simple/",
                 "credentials were refused", {}),
                (http.Client(public.url), public.url + "nothing/here", "HTTP 404 Not Found", {}),
                (http.Client(looping.url), looping.url + "simple/", "redirect loop", {}),
                (http.Client(with_userinfo(public.url, "u", CANARY)), public.url + "simple/torch/", "larger than",
                 {"cap": 10}),
                (http.Client(f"http://u:{CANARY}@127.0.0.1:1/", retries=0), "http://127.0.0.1:1/simple/",
                 "cannot read it", {}),
            ]
            for client, url, expected, kw in cases:
                with pytest.raises(CiError) as e:
                    client.get(url, **kw)
                lines.append(str(e.value))
                assert expected in str(e.value), (expected, str(e.value))
    with pytest.raises(CiError, match="not an http"):
        http.Client(f"ftp://u:{CANARY}@host/simple")
    assert all("\n" not in line and CANARY not in line for line in lines), lines


def test_netrc_credentials_go_to_their_origin_only(index_dir, tmp_path, monkeypatch):
    """No userinfo in the URL: netrc's entry for the host is used, and only for that origin."""
    with GuardedServer(index_dir) as other, GuardedServer(index_dir, "ci-user", CANARY, redirect=other.url) as mirror:
        netrc = tmp_path / "netrc"
        netrc.write_text(f"machine 127.0.0.1 login ci-user password {CANARY}\n")
        netrc.chmod(0o600)
        monkeypatch.setenv("NETRC", str(netrc))
        # the redirect goes to the same host on another port: netrc is per host, the origin check per port
        release = TorchIndex(mirror.url + "simple", tmp_path / "c").release("2.99.0")
    assert release.cuda == "13.3" and other.seen
    assert all(h.get("Authorization") for _, _, h in mirror.seen)
    assert "Authorization" not in other.headers_seen()


def test_a_passing_outage_is_retried_and_a_redirect_off_http_is_refused(index_dir, tmp_path):
    """Two 503s, then the page: read (GET is idempotent). A redirect to this machine's files: one line."""
    with GuardedServer(index_dir) as server:
        server.unavailable = 2
        answer = http.Client(server.url, backoff=0.01).get(server.url + "simple/torch/")
        assert answer.status == 200 and b"torch-2.99.0" in answer.body
        assert answer.headers["content-type"] == answer.headers["Content-Type"] == "text/html"  # HTTP/2 writes lower case
        server.redirect = "file:///etc/"
        with pytest.raises(CiError, match="redirected to a file URL, not followed"):
            http.Client(server.url).get(server.url + "passwd")


@pytest.mark.parametrize("location", ["http://127.0.0.1:notaport/", "http://127.0.0.1:99999/", "http://[::1/"])
def test_a_hostile_redirect_location_is_the_clients_own_one_line_refusal(index_dir, location):
    """A Location with a port that is no port, or an unclosed IPv6 host, reached the last-resort handler
    as an unexpected ValueError."""
    with GuardedServer(index_dir, redirect=location) as hostile:
        with pytest.raises(http.HttpError, match="malformed URL") as e:
            http.Client(hostile.url, retries=0).get(hostile.url + "simple/")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("url", ["https://u:p@[::1/", "http://127.0.0.1:notaport/", "http://h:99999/"])
def test_a_url_no_host_and_port_can_be_read_from_is_one_line(url):
    with pytest.raises(CiError) as e:
        http.Client(url).get(url + "simple/")
    assert "\n" not in str(e.value) and "p@" not in str(e.value)
