"""The static index behind a real web server: Debian's nginx on loopback, configured by the nginx block
of docs/publishing.md (read from the page, so the documentation cannot drift from what is tested)."""

from __future__ import annotations

import json
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from wheelci.index import build_index
from wheelci.verifyenv import fresh_venv
from tests._servers import Nginx, build_wheel, pip_install
from tests.test_publish_example import RUN_OP, cpu_torch_site  # noqa: F401 (a fixture)
from tests import _proc

JSON = "application/vnd.pypi.simple.v1+json"


def get(url: str, accept: str | None = None) -> tuple[int, str, bytes]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), b""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A static index of two tiny wheels, served by nginx."""
    tmp = tmp_path_factory.mktemp("nginx")
    dist = tmp / "dist"
    dist.mkdir()
    for name, module, value in (("tiny_pkg", "tinypkg", 5), ("other_pkg", "otherpkg", 9)):
        shutil.copy(build_wheel(tmp / "build", name=name, module=module, value=value), dist)
    build_index(dist)
    with Nginx(dist, tmp / "nginx") as srv:
        yield srv, dist


def test_json_for_clients_that_ask_html_for_the_rest(served):
    srv, dist = served
    status, ctype, body = get(srv.url + "simple/tiny-pkg/", JSON)
    assert status == 200 and ctype == JSON
    page = json.loads(body)
    assert page["name"] == "tiny-pkg" and page["files"][0]["hashes"]["sha256"]
    status, ctype, body = get(srv.url + "simple/tiny-pkg/")
    assert status == 200 and ctype.startswith("text/html")
    assert b"#sha256=" in body and b"data-core-metadata" in body
    status, ctype, body = get(srv.url + "simple/", JSON)
    assert status == 200 and ctype == JSON and {p["name"] for p in json.loads(body)["projects"]} == \
        {"tiny-pkg", "other-pkg"}


def test_the_cache_file_is_not_served(served):
    srv, dist = served
    assert (dist / "simple" / ".ci-index-cache.json").is_file()
    status, _, body = get(srv.url + "simple/.ci-index-cache.json")
    assert status in (403, 404) and b"sha256" not in body


def test_pip_and_uv_install_over_http(served, tmp_path):
    from tests.test_index import _uv
    srv, _ = served
    py = fresh_venv(tmp_path / "pip")
    r = pip_install(py, "--index-url", srv.url + "simple/", "tiny-pkg")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "tiny_pkg-1.0-py3-none-any.whl.metadata" in r.stdout  # PEP 658 through nginx
    py2 = fresh_venv(tmp_path / "uv")
    r = _proc.run([_uv(), "pip", "install", "--python", str(py2), "--no-cache", "--no-config",
                   "--index-url", srv.url + "simple/", "other-pkg"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for python, module, value in ((py, "tinypkg", "5"), (py2, "otherpkg", "9")):
        out = _proc.run([str(python), "-c", f"import {module}; print({module}.VALUE)"],
                        capture_output=True, text=True, check=True).stdout
        assert out.strip() == value


def test_the_example_wheel_installs_from_nginx_with_pip_and_uv(cpu_build, cpu_torch_site, tmp_path):  # noqa: F811
    """The example op wheel, indexed and served by nginx: pip resolves it (torch is in the venv through
    the cached torch site), uv installs it without deps into the same kind of venv; the op runs."""
    from tests.test_index import _uv
    dist = tmp_path / "dist"
    dist.mkdir()
    shutil.copy(cpu_build.wheel, dist)
    build_index(dist)
    pkg = cpu_build.wheel.name.split("-")[0]
    with Nginx(dist, tmp_path / "nginx") as srv:
        py = fresh_venv(tmp_path / "pip", cpu_torch_site)
        r = pip_install(py, "--index-url", srv.url + "simple/", pkg.replace("_", "-"))
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        py2 = fresh_venv(tmp_path / "uv", cpu_torch_site)
        r2 = _proc.run([_uv(), "pip", "install", "--python", str(py2), "--no-cache", "--no-config",
                        "--no-deps", "--index-url", srv.url + "simple/", pkg.replace("_", "-")],
                       capture_output=True, text=True)
        assert r2.returncode == 0, r2.stderr
    for python in (py, py2):
        run = _proc.run([str(python), "-c", RUN_OP.format(pkg=pkg)], capture_output=True, text=True,
                        cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-2000:]
        assert float(run.stdout.strip().splitlines()[-1]) < 1e-12
