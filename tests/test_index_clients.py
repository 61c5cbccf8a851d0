"""The installers users have, against a `ci.index` index of real wheels from the public index.

pip 22.3.1 (what rules_python 0.16-0.25 bundle) and 23.0.1 (Debian bookworm's) read PEP 658's legacy
key `data-dist-info-metadata`, and then refuse a requirement spelled in normalized form whose
metadata spells the name otherwise ("has inconsistent Name: expected 'jinja2', but metadata has
'Jinja2'"). PEP 714 says to announce metadata with `data-core-metadata` / `core-metadata` only, which
`ci.index` does by default; `--legacy-metadata-keys` brings the old keys back, and the test shows it
breaks exactly those pips. Current pip and uv read the PEP 714 keys and fetch `.metadata` files.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wheelci.util.cache import cache_dir
from tests._servers import StaticServer
from tests.test_index import _uv, cli
from tests import _proc, _shared

pytestmark = pytest.mark.network  # real wheels and old pips from the package index

# Real wheels whose metadata spells the name otherwise than its normalized form.
REAL = ("jinja2==3.1.4", "markupsafe==2.1.5", "typing-extensions==4.12.2")
WANT = ["jinja2", "typing-extensions"]  # as a lock or a requirements file spells them
OLD_PIPS = ("22.3.1", "23.0.1")


@pytest.fixture(scope="module")
def real_wheels() -> list[Path]:
    house = cache_dir("index-clients")
    with _shared.held("index-clients"):  # the edit loop's workers share the cache
        if len(list(house.glob("*.whl"))) < len(REAL):
            r = _proc.run([sys.executable, "-m", "pip", "download", "--isolated", "--quiet", "--no-deps",
                           "--only-binary=:all:", "-d", str(house), *REAL], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[-1000:]
        return sorted(house.glob("*.whl"))


def pip_of(version: str) -> Path:
    """A venv whose pip is `version` (cached between runs)."""
    venv = cache_dir("pips") / version
    python = venv / "bin" / "python"
    with _shared.held(f"pip-{version}"):
        if not (venv / ".complete").exists():
            _proc.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, capture_output=True)
            r = _proc.run([str(python), "-m", "pip", "install", "--isolated", "--quiet",
                           "--disable-pip-version-check", f"pip=={version}"], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[-1000:]
            (venv / ".complete").touch()
    return python


def index(tmp: Path, wheels: list[Path], *args: str) -> Path:
    dist = tmp / "dist"
    dist.mkdir()
    for w in wheels:
        (dist / w.name).symlink_to(w)
    r = cli(str(dist), *args)
    assert r.returncode == 0, r.stderr
    return dist


def pip_install(python: Path | str, url: str, target: Path) -> subprocess.CompletedProcess:
    return _proc.run([str(python), "-m", "pip", "install", "--isolated", "--disable-pip-version-check",
                      "--no-cache-dir", "--index-url", url, "--target", str(target), *WANT],
                     capture_output=True, text=True)


def installed(target: Path) -> set[str]:
    return {p.name.split("-")[0].lower() for p in target.glob("*.dist-info")}


@pytest.mark.parametrize("version", OLD_PIPS)
def test_old_pips_install_from_the_index(tmp_path, real_wheels, version):
    dist = index(tmp_path, real_wheels)
    with StaticServer(dist, tmp_path / "access.log") as srv:
        r = pip_install(pip_of(version), srv.url + "simple/", tmp_path / "site")
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    assert installed(tmp_path / "site") == {"jinja2", "markupsafe", "typing_extensions"}


@pytest.mark.parametrize("version", OLD_PIPS)
def test_the_legacy_keys_break_those_pips(tmp_path, real_wheels, version):
    """Why the legacy keys are off: the same install fails once they are announced."""
    dist = index(tmp_path, real_wheels, "--legacy-metadata-keys")
    assert "data-dist-info-metadata=" in (dist / "simple" / "jinja2" / "index.html").read_text()
    r = pip_install(pip_of(version), f"file://{dist}/simple/", tmp_path / "site")
    assert r.returncode != 0 and "inconsistent Name" in r.stdout + r.stderr, r.stdout[-1500:]


def test_current_pip_reads_pep714_metadata(tmp_path, real_wheels):
    dist = index(tmp_path, real_wheels)
    with StaticServer(dist, tmp_path / "access.log") as srv:
        r = pip_install(sys.executable, srv.url + "simple/", tmp_path / "site")
        served = srv.requests()
    assert r.returncode == 0, r.stderr[-1500:]
    assert installed(tmp_path / "site") == {"jinja2", "markupsafe", "typing_extensions"}
    assert any(p.endswith(".whl.metadata") for p in served), served  # PEP 658 metadata in use


def test_uv_reads_pep714_metadata(tmp_path, real_wheels):
    dist = index(tmp_path, real_wheels)
    with StaticServer(dist, tmp_path / "access.log") as srv:
        r = _proc.run([_uv(), "pip", "install", "--no-cache", "--no-config", "--index-url",
                       srv.url + "simple/", "--target", str(tmp_path / "site"), *WANT],
                      capture_output=True, text=True)
        served = srv.requests()
    assert r.returncode == 0, r.stderr[-1500:]
    assert installed(tmp_path / "site") == {"jinja2", "markupsafe", "typing_extensions"}
    assert any(p.endswith(".whl.metadata") for p in served), served
