"""Nothing the tool starts outlives it (wheelci.util.proc.bound: the kernel's parent-death signal). A real
sccache server over a real Redis store, started by a build's own code in a process of its own; that process
is SIGKILLed, or its whole process group is, as a CI cancel or the OOM killer does, and the server (which
holds the store's password in its environment and serves the store on loopback) is gone too. Its log is
redacted as it is written, not at a clean exit that never comes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._servers import Redis
from tests.test_compile_cache import sccache_binary

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "pa55-of-the-lifetime-store"
SERVE = """
import sys, time
from pathlib import Path
from wheelci.compile import sccache
from wheelci.config.compilecache import parse
from wheelci.util import secret
url, binary, work = sys.argv[1:4]
secret.add_url(url)
with sccache.serving(parse(url, {}), Path(binary), Path(work), "", timeout=60) as (server, reports):
    print("serving" if server else f"not serving: {reports}", flush=True)
    time.sleep(600)
"""


def _children(pid: int, name: str) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
            comm = fields[0].split("(", 1)[1]
        except (OSError, IndexError):
            continue
        if comm == name and int(fields[1].split()[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _gone(pid: int, bound: float = 30.0) -> bool:
    """Whether pid ends within the bound (a wait for an event, not a timing: the kernel signals at once)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("kill", ["the build", "its process group"])
def test_a_killed_build_takes_its_compile_cache_server_with_it(tmp_path, kill):
    with Redis(tmp_path / "redis", password=PASSWORD) as store:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "ci" / "src")}
        build = subprocess.Popen([sys.executable, "-c", SERVE, store.url, str(sccache_binary()), str(tmp_path / "work")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                 start_new_session=True)
        try:
            assert build.stdout is not None
            line = build.stdout.readline()
            assert line.strip() == "serving", (line, build.stderr.read() if build.poll() is not None else "")
            (server,) = _children(build.pid, "sccache")
            if kill == "the build":
                build.kill()
            else:
                os.killpg(build.pid, signal.SIGKILL)
            build.wait(timeout=30)
            assert _gone(server), f"sccache's server {server} outlived the build that started it"
        finally:
            if build.poll() is None:
                os.killpg(build.pid, signal.SIGKILL)
                build.wait()
            for stream in (build.stdout, build.stderr):
                if stream is not None:
                    stream.close()
    log = tmp_path / "work" / "sccache-server.log"
    assert log.is_file() and PASSWORD not in log.read_text(errors="replace")


def test_the_servers_log_is_redacted_line_by_line_as_it_comes(tmp_path):
    """A stand-in server that prints a credential and then hangs: the log already holds the line, masked,
    while the process still runs; a line over the cap is dropped whole."""
    from wheelci.compile import sccache
    from wheelci.util import secret

    secret.add("s3cr3t-of-the-log-line")
    script = ("import sys, time; print('error: redis://u:s3cr3t-of-the-log-line@h:1 refused', flush=True); "
              "sys.stdout.write('x' * 200000 + 's3cr3t-of-the-log-line' + '\\n'); sys.stdout.flush(); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log = tmp_path / "sccache-server.log"
    log.symlink_to(tmp_path / "elsewhere")  # planted: replaced, never written through
    try:
        pump = sccache._logged(proc, log)
        deadline = time.monotonic() + 30
        while "not kept" not in (log.read_text() if log.is_file() else "") and time.monotonic() < deadline:
            time.sleep(0.05)
        text = log.read_text()
        assert proc.poll() is None and "refused" in text and "not kept" in text, text
        assert "s3cr3t" not in text and "xxxx" not in text
        assert not (tmp_path / "elsewhere").exists() and not log.is_symlink()
    finally:
        proc.kill()
        proc.wait()
    pump.join(timeout=10)


def test_inside_a_container_the_servers_log_is_masked_as_it_comes(tmp_path):
    """The container's script (standard library only, no host redaction there) runs the server behind
    `serve`: the store's credentials from its environment and any URL's userinfo are masked in the mounted
    log while the server still runs."""
    from tests import _proc

    script = ROOT / "ci" / "src" / "wheelci" / "resources" / "container" / "sccache_server.py"
    server = tmp_path / "fake-sccache"
    server.write_text('#!/bin/sh\necho "redis error at redis://default:$SCCACHE_REDIS_PASSWORD@h:1 (key $AWS_SECRET_ACCESS_KEY)"\n')
    server.chmod(0o755)
    log = tmp_path / "status" / "sccache-server.log"
    log.parent.mkdir()
    env = {"PATH": os.environ["PATH"], "SCCACHE_REDIS_PASSWORD": "hunter2-of-redis", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI"}
    r = _proc.run([sys.executable, "-E", "-s", str(script), "serve", str(log), str(server)], env=env,
                  capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    text = log.read_text()
    assert "redis error at redis://h:1 (key ***)" in text, text


def test_a_streamed_tools_own_children_end_with_a_killed_build(tmp_path):
    """A tool a build streams (a compile: the build frontend, its ninja, its compilers) runs in a session of
    its own; a SIGKILLed build takes the whole session with it (the group's watcher), not only the tool."""
    marker = tmp_path / "grandchild.pid"
    tool = f"import subprocess, time; p = subprocess.Popen(['sleep', '300']); open({str(marker)!r}, 'w').write(str(p.pid)); time.sleep(300)"
    build = ("import sys\nfrom wheelci.util import proc\n"
             f"proc.stream([sys.executable, '-c', {tool!r}], what='a compile', show=False)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "ci" / "src")}
    runner = subprocess.Popen([sys.executable, "-c", build], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (marker.is_file() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        grandchild = int(marker.read_text())
        runner.kill()
        runner.wait(timeout=30)
        assert _gone(grandchild), f"the tool's child {grandchild} outlived the build"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
