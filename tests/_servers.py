"""Real servers on 127.0.0.1 for the publish tests, and the tiny real wheels they serve.

- PypiServer: pypiserver (pinned) with htpasswd auth, as a subprocess; can be killed and restarted.
- KillingProxy: a TCP proxy in front of it that, on the first upload, lets part of the body through,
  then runs a hook (kill the server, maybe restart it) and drops the client: "the server died mid-upload"
  at a known point, so the test is deterministic.
- StaticServer: `python -m http.server` over a directory, with its access log kept for assertions.
- Redis, DavStore: the remote compile cache's stores (Debian's redis-server; nginx with its WebDAV modules).
- build_wheel: a tiny pure-python project built by setuptools through `python -m build`.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import json
import re
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, BinaryIO, Callable
from tests import _proc, _shared

PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]  # (host, port) for AF_INET
        return port


def wait_http(url: str, proc: subprocess.Popen[bytes] | None = None, timeout: float = 30.0) -> None:
    """Until url answers any HTTP status (a liveness wait, not a timed assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before answering {url}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no answer from {url} in {timeout}s") from None
            time.sleep(0.05)


class Daemon:
    """A server this suite starts as a child process: stopped (terminated, then reaped) when its block ends."""

    proc: subprocess.Popen[bytes] | None = None

    def __exit__(self, *exc: object) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def write_htpasswd(path: Path, user: str, password: str) -> Path:
    import warnings
    with warnings.catch_warnings():  # passlib imports the deprecated crypt module
        warnings.simplefilter("ignore", DeprecationWarning)
        from passlib.apache import HtpasswdFile
    ht = HtpasswdFile(str(path), new=True)
    ht.set_password(user, password)
    ht.save()
    return path


class PypiServer:
    """pypiserver serving `packages`, uploads protected by htpasswd; no fallback to PyPI."""

    def __init__(self, root: Path, user: str, password: str, port: int | None = None) -> None:
        self.root = root
        self.packages = root / "packages"
        self.packages.mkdir(parents=True, exist_ok=True)
        self.htpasswd = write_htpasswd(root / "htpasswd", user, password)
        self.port = port or free_port()
        self.log = root / "pypiserver.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> "PypiServer":
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [PY, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(self.port),
                 "-a", "update", "-P", str(self.htpasswd), "--disable-fallback",
                 "--backend", "simple-dir", str(self.packages)],
                stdout=log, stderr=subprocess.STDOUT)
        wait_http(self.url + "health", self.proc)
        return self

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> "PypiServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


class KillingProxy:
    """TCP proxy 127.0.0.1:port -> 127.0.0.1:target. The first POST, once more than `after` bytes of
    its body have arrived, triggers `on_upload()` (e.g. kill the server) and then the client connection is dropped."""

    def __init__(self, target_port: int, on_upload: Callable[[], None], after: int = 256) -> None:
        self.target_port = target_port
        self.on_upload = on_upload
        self.after = after
        self.fired = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def _serve(self) -> None:
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
        except OSError:
            client.close()
            return
        watch = not self.fired.is_set()
        cut = threading.Event()  # set once we cut this connection: the client hears nothing more

        def back() -> None:
            with contextlib.suppress(OSError):
                while (data := upstream.recv(65536)) and not cut.is_set():
                    client.sendall(data)
            if not cut.is_set():
                with contextlib.suppress(OSError):
                    client.shutdown(socket.SHUT_WR)

        threading.Thread(target=back, daemon=True).start()
        seen = b""
        try:
            while data := client.recv(65536):
                if watch and not self.fired.is_set():
                    seen += data
                    head_end = seen.find(b"\r\n\r\n")
                    if seen.startswith(b"POST") and head_end >= 0 and len(seen) - head_end - 4 > self.after:
                        cut.set()
                        upstream.sendall(data[: len(data) // 2])
                        self.fired.set()
                        self.on_upload()  # runs to completion before the client sees the drop
                        # Drop the client hard (RST), as a dead server would.
                        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        break
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                upstream.close()
            with contextlib.suppress(OSError):
                client.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()


class StaticServer(Daemon):
    """`python -m http.server` over root; `requests()` returns the paths it served (its access log)."""

    def __init__(self, root: Path, log: Path) -> None:
        self.root = root
        self.log = log
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def __enter__(self) -> "StaticServer":
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [PY, "-u", "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(self.root),
                 str(self.port)], stdout=log, stderr=subprocess.STDOUT)
        wait_http(self.url, self.proc)
        return self


    def requests(self) -> list[str]:
        """Paths of GET requests answered 200, from the access log."""
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if '"GET ' in line and '" 200 ' in line:
                out.append(line.split('"GET ', 1)[1].split(" ", 1)[0])
        return out


def build_wheel(tmp: Path, name: str = "tiny_pkg", version: str = "1.0", module: str = "tinypkg",
                value: int = 42, requires_python: str = ">=3.8", build_tag: str | None = None,
                readme: str = "README.md", readme_text: str | None = None) -> Path:
    """A real pure-python wheel: setuptools via `python -m build --no-isolation` (offline, pinned)."""
    proj = tmp / f"proj-{name}-{version}-{value}"
    (proj / module).mkdir(parents=True)
    (proj / module / "__init__.py").write_text(f"VALUE = {value}\n")
    (proj / readme).write_text(readme_text or f"# {name}\n\nA tiny package for publish tests.\n")
    (proj / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{name}"
        version = "{version}"
        description = "tiny test package"
        readme = "{readme}"
        requires-python = "{requires_python}"
        [tool.setuptools]
        packages = ["{module}"]
        """))
    dist = tmp / f"dist-{name}-{version}-{value}"
    _proc.run([PY, "-m", "build", "--wheel", "--no-isolation", "-o", str(dist), str(proj)],
              check=True, capture_output=True)
    (wheel,) = dist.glob("*.whl")
    if build_tag:
        _proc.run([PY, "-m", "wheel", "tags", "--remove", "--build", build_tag, str(wheel)],
                  check=True, capture_output=True)
        (wheel,) = dist.glob("*.whl")
    return wheel


def pip_install(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return _proc.run([PY, "-m", "pip", "--python", str(python), "install", "--isolated",
                      "--no-cache-dir", "--disable-pip-version-check", "-v", *args],
                     capture_output=True, text=True, env=env)


class NegotiatingServer:
    """A static server that does what docs/publishing.md asks of nginx: for a directory URL, serve index.json
    when the client prefers PEP 691 JSON (pip and uv ask for it first), else index.html.
    `served` records (path, file sent) for assertions."""

    JSON = "application/vnd.pypi.simple.v1+json"

    def __init__(self, root: Path) -> None:
        import http.server

        served: list[tuple[str, str]] = []
        self.served = served
        json_type = self.JSON

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a: Any, **kw: Any) -> None:
                super().__init__(*a, directory=str(root), **kw)

            def send_head(self) -> io.BytesIO | BinaryIO | None:
                path = self.translate_path(self.path)
                if os.path.isdir(path) and self.path.endswith("/") and json_type in self.headers.get("Accept", "") \
                        and os.path.exists(os.path.join(path, "index.json")):
                    f = open(os.path.join(path, "index.json"), "rb")
                    self.send_response(200)
                    self.send_header("Content-Type", json_type)
                    self.send_header("Content-Length", str(os.fstat(f.fileno()).st_size))
                    self.end_headers()
                    served.append((self.path, "index.json"))
                    return f
                served.append((self.path, "index.html" if os.path.isdir(path) else os.path.basename(path)))
                return super().send_head()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def __enter__(self) -> "NegotiatingServer":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class GuardedServer:
    """A static server over `root` on loopback that a hostile or private index would be: Basic auth on
    every path (`user`, `password`), byte ranges, and optionally every answer redirected to `redirect`
    (a URL prefix: another origin, or itself for a loop) or its body dripped one byte every `drip`
    seconds. `seen` records (method, path, headers) of every request, for canary checks."""

    def __init__(self, root: Path, user: str | None = None, password: str | None = None,
                 redirect: str | None = None, drip: float | None = None) -> None:
        import base64
        import http.server

        seen: list[tuple[str, str, dict[str, str]]] = []
        self.seen = seen
        expected = None if user is None else "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                seen.append((self.command, self.path, dict(self.headers.items())))
                if expected is not None and self.headers.get("Authorization") != expected:
                    self._send(401, b"no", {"WWW-Authenticate": 'Basic realm="index"'}, body)
                    return
                if server.unavailable > 0:  # a passing outage: 503 for the next `unavailable` requests
                    server.unavailable -= 1
                    self._send(503, b"busy", {}, body)
                    return
                if server.redirect is not None:
                    self._send(302, b"", {"Location": server.redirect + self.path.lstrip("/")}, body)
                    return
                path = root / self.path.split("?")[0].lstrip("/")
                if path.is_dir():
                    path = path / "index.html"
                if not path.is_file():
                    self._send(404, b"not here", {}, body)
                    return
                data = path.read_bytes()
                kind = "text/html" if path.suffix == ".html" else "application/octet-stream"
                ranged = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
                if ranged:
                    a, b = int(ranged[1]), min(int(ranged[2]), len(data) - 1)
                    self._send(206, data[a:b + 1], {"Content-Type": kind,
                                                   "Content-Range": f"bytes {a}-{b}/{len(data)}"}, body)
                else:
                    self._send(200, data, {"Content-Type": kind, "Accept-Ranges": "bytes"}, body)

            def _send(self, code: int, data: bytes, headers: dict[str, str], body: bool) -> None:
                self.send_response(code)
                for k, v in {**headers, "Content-Length": str(len(data))}.items():
                    self.send_header(k, v)
                self.end_headers()
                if not body:
                    return
                if drip is None or code != 200:
                    self.wfile.write(data)
                    return
                for i in range(len(data)):
                    if server.closed.wait(drip):
                        return
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()

            def log_message(self, *args: object) -> None:
                pass

        self.redirect = redirect
        self.unavailable = 0
        self.closed = threading.Event()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def headers_seen(self) -> str:
        """Every header of every request, as one text to grep for a canary."""
        return "\n".join(f"{m} {p} {h}" for m, p, h in self.seen)

    def __enter__(self) -> "GuardedServer":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def ensure_debian_package(command: str, package: str) -> str:
    """The path of `command`. Missing, it is installed the one way the project installs system tools,
    `scripts/bootstrap --system` (it must be listed in scripts/system-packages); pytest skips, saying
    why, only where this user cannot install packages (not root, no apt-get)."""
    import pytest

    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    if found := shutil.which(command, path=path):
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(f"{command} is not installed and this user cannot apt-get install {package}")
    bootstrap = Path(__file__).resolve().parents[1] / "scripts" / "bootstrap"
    r = _proc.run([str(bootstrap), "--system"], capture_output=True, text=True)
    found = shutil.which(command, path=path)
    assert found, f"scripts/bootstrap --system did not install {command} ({package}): {r.stderr.strip()[-500:]}"
    return found


def doc_blocks(lang: str, page: str) -> list[str]:
    """The fenced ```lang blocks of a documentation page (relative to the repository root), in order:
    tests run the configuration the documentation shows."""
    import re
    text = (Path(__file__).resolve().parents[1] / page).read_text()
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def doc_block(lang: str, page: str) -> str:
    """The one fenced ```lang block of a documentation page."""
    blocks = doc_blocks(lang, page)
    assert len(blocks) == 1, f"expected one ```{lang} block in {page}, found {len(blocks)}"
    return blocks[0]


class Nginx(Daemon):
    """Debian's nginx on 127.0.0.1 serving `root` with docs/publishing.md's server configuration, which is
    used as written except for its `root` (ours) and a `listen` on a free loopback port."""

    def __init__(self, root: Path, work: Path) -> None:
        self.binary = ensure_debian_package("nginx", "nginx-light")
        self.root, self.work = root, work
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def config(self) -> str:
        server = doc_block("nginx", "docs/publishing.md")
        assert "root /srv/dist;" in server, "docs/publishing.md's nginx block must serve root /srv/dist"
        server = server.replace("root /srv/dist;", f"listen 127.0.0.1:{self.port};\n    root {self.root};")
        w = self.work
        return textwrap.dedent(f"""\
            daemon off;
            user root;
            pid {w}/nginx.pid;
            error_log {w}/error.log;
            events {{ worker_connections 64; }}
            http {{
                include /etc/nginx/mime.types;
                default_type application/octet-stream;
                access_log {w}/access.log;
                client_body_temp_path {w}/body;
                proxy_temp_path {w}/proxy;
                fastcgi_temp_path {w}/fastcgi;
                uwsgi_temp_path {w}/uwsgi;
                scgi_temp_path {w}/scgi;
            """) + textwrap.indent(server, "    ") + "}\n"

    def __enter__(self) -> "Nginx":
        self.work.mkdir(parents=True, exist_ok=True)
        conf = self.work / "nginx.conf"
        conf.write_text(self.config())
        test = _proc.run([self.binary, "-t", "-c", str(conf)], capture_output=True, text=True)
        assert test.returncode == 0, test.stderr
        self.proc = subprocess.Popen([self.binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        wait_http(self.url, self.proc)
        return self



DEVPI = ("devpi-server==6.20.3", "devpi-client==7.3.0")


def devpi_tools() -> Path:
    """A venv with the pinned devpi server and client, cached between runs. Its own venv: devpi's
    dependencies (pyramid & co.) must not move the pipeline's pinned tools."""
    from wheelci.util.cache import cache_dir
    import hashlib
    venv = cache_dir() / f"devpi-{hashlib.sha256(' '.join(DEVPI).encode()).hexdigest()[:12]}"
    with _shared.held(venv.name):
        if not (venv / ".ok").exists():
            shutil.rmtree(venv, ignore_errors=True)
            _proc.run([PY, "-m", "venv", str(venv)], check=True, capture_output=True)
            r = _proc.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", *DEVPI], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[-2000:]
            (venv / ".ok").touch()
    return venv / "bin"


class DevpiServer(Daemon):
    """devpi-server on 127.0.0.1 with a user and a non-volatile index without bases (no PyPI mirror),
    set up through devpi's own client: a second kind of private index beside pypiserver."""

    def __init__(self, root: Path, user: str, password: str) -> None:
        self.bin = devpi_tools()
        self.root, self.user, self.password = root, user, password
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def upload_url(self) -> str:
        return f"{self.url}{self.user}/dev/"

    @property
    def simple_url(self) -> str:
        return f"{self.url}{self.user}/dev/+simple/"

    def _devpi(self, *args: str) -> None:
        env = {**os.environ, "DEVPI_CLIENTDIR": str(self.root / "client")}
        r = _proc.run([str(self.bin / "devpi"), *args], capture_output=True, text=True, env=env)
        assert r.returncode == 0, f"devpi {args[0]}: {r.stdout[-1000:]}{r.stderr[-1000:]}"

    def __enter__(self) -> "DevpiServer":
        srv = self.root / "server"
        root_pw = "root-" + self.password[::-1]
        _proc.run([str(self.bin / "devpi-init"), "--serverdir", str(srv), "--root-passwd", root_pw],
                  check=True, capture_output=True)
        self.log = open(self.root / "devpi.log", "wb")
        self.proc = subprocess.Popen([str(self.bin / "devpi-server"), "--serverdir", str(srv), "--host",
                                      "127.0.0.1", "--port", str(self.port)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        wait_http(self.url, self.proc, timeout=120)
        self._devpi("use", self.url)
        self._devpi("login", "root", "--password", root_pw)
        self._devpi("user", "-c", self.user, f"password={self.password}")
        self._devpi("login", self.user, "--password", self.password)
        self._devpi("index", "-c", "dev", "bases=", "volatile=False")
        return self

        self.log.close()


class Registry(Daemon):
    """Debian's docker-registry (CNCF distribution) on 127.0.0.1, storing into `work`: the registry
    `ci.image --push` talks to, over plain http on loopback (which Docker allows for 127.0.0.0/8, and
    Podman when registries.conf marks it insecure: `registries_conf` writes that file)."""

    def __init__(self, work: Path) -> None:
        self.binary = ensure_debian_package("docker-registry", "docker-registry")
        self.work = work
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def tags(self, repository: str) -> list[str]:
        try:
            with urllib.request.urlopen(f"http://{self.host}/v2/{repository}/tags/list", timeout=10) as r:
                return json.load(r).get("tags") or []
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return []
            raise

    def registries_conf(self) -> Path:
        path = self.work / "registries.conf"
        path.write_text(f'[[registry]]\nlocation = "{self.host}"\ninsecure = true\n')
        return path

    def __enter__(self) -> "Registry":
        self.work.mkdir(parents=True, exist_ok=True)
        conf = self.work / "config.yml"
        conf.write_text(textwrap.dedent(f"""\
            version: 0.1
            log:
              level: warn
            storage:
              filesystem:
                rootdirectory: {self.work / 'storage'}
            http:
              addr: {self.host}
            """))
        self.proc = subprocess.Popen([self.binary, "serve", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_http(f"http://{self.host}/v2/", self.proc)
        return self



class Redis(Daemon):
    """Debian's redis-server on a free loopback port, nothing saved to disk; `password` sets the default
    user's password (redis://default:PASSWORD@...)."""

    def __init__(self, work: Path, password: str | None = None) -> None:
        self.binary = ensure_debian_package("redis-server", "redis-server")
        self.work, self.password, self.port = work, password, free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f"default:{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}"

    def __enter__(self) -> "Redis":
        self.work.mkdir(parents=True, exist_ok=True)
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.work)] + (["--requirepass", self.password] if self.password else [])
        self.proc = subprocess.Popen([self.binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            assert self.proc.poll() is None, "redis-server exited at start"
            time.sleep(0.1)
        raise AssertionError("redis-server did not listen within 30 s")



DAV_EXT = Path("/usr/lib/nginx/modules/ngx_http_dav_ext_module.so")


class DavStore(Daemon):
    """Debian's nginx as a WebDAV store on a free loopback port: PUT, MKCOL (its dav module) and PROPFIND
    (libnginx-mod-http-dav-ext, which sccache's client asks before it writes) under /cache/."""

    def __init__(self, work: Path) -> None:
        self.binary = ensure_debian_package("nginx", "nginx-light")
        if not DAV_EXT.exists():
            import pytest

            if os.geteuid() != 0 or not shutil.which("apt-get"):
                pytest.skip("libnginx-mod-http-dav-ext is not installed and this user cannot apt-get install it")
            r = _proc.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "libnginx-mod-http-dav-ext"],
                          capture_output=True, text=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
            assert DAV_EXT.exists(), r.stderr[-500:]
        self.work, self.port = work, free_port()
        self.root = work / "root"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/cache/"

    def __enter__(self) -> "DavStore":
        w = self.work
        (self.root / "cache").mkdir(parents=True, exist_ok=True)
        conf = w / "nginx.conf"
        conf.write_text(textwrap.dedent(f"""\
            load_module {DAV_EXT};
            daemon off;
            user root;
            pid {w}/nginx.pid;
            error_log {w}/error.log;
            events {{ worker_connections 64; }}
            http {{
                access_log {w}/access.log;
                client_body_temp_path {w}/body;
                client_max_body_size 0;
                server {{
                    listen 127.0.0.1:{self.port};
                    root {self.root};
                    location /cache/ {{
                        dav_methods PUT DELETE MKCOL COPY MOVE;
                        dav_ext_methods PROPFIND OPTIONS;
                        create_full_put_path on;
                    }}
                }}
            }}
            """))
        self.proc = subprocess.Popen([self.binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_http(f"http://127.0.0.1:{self.port}/", self.proc)
        return self

