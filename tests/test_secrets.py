"""The canary sweep: a distinct canary in every input that can carry a credential, every stage run on its
success and failure paths, with and without --verbose; no canary may appear on stdout, stderr, in any file
under -w or --work-dir, or in $GITHUB_STEP_SUMMARY.

The inputs: URL userinfo in --torch-index-url, --upload and the PIP_* index URLs; --env and [tool.wheelci] env
values; TWINE_PASSWORD, a .pypirc password, and a CI token in the environment; a --compile-cache URL's
password and the S3 keys its store takes from the environment. The build's own compile
prints every variable it was given (a chatty build backend), so the compile log must be redacted too.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

from tests._servers import PypiServer, StaticServer
from tests._wheels import run_stage

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"

CANARIES = {name: f"cnry{name.replace('_', '')}{i}Q7z" for i, name in enumerate(
    ["torch_url", "upload_url", "pip_extra", "cli_env", "toolci_env", "twine_password",
     "pypirc_password", "ci_token", "upload_password", "cache_password", "aws_key_id", "aws_secret"])}
USER = "ci-user"


def leaks(text: str) -> list[str]:
    """The canaries found in text, raw or in a Basic auth header."""
    found = [name for name, value in CANARIES.items() if value in text]
    found += [f"{name} (basic)" for name, value in CANARIES.items()
              if base64.b64encode(f"{USER}:{value}".encode()).decode() in text]
    return found


def files_leaks(*roots: Path) -> dict[str, list[str]]:
    """Canaries in the files under roots, less the work directory's copy of the project's own sources
    (a [tool.wheelci] env value is in the project's pyproject.toml: the user wrote it there)."""
    out = {}
    for root in roots:
        for path in (p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            if path.suffix in (".whl", ".so", ".o", ".pyc") or path.relative_to(root).parts[0] == "src":
                continue  # built artefacts: their bytes are checked through the logs that describe them
            if found := leaks(path.read_text(errors="replace")):
                out[str(path.relative_to(root))] = found
    return out


def cache_leaks() -> dict[str, list[str]]:
    """Canaries in the tool cache's own files: every stamp, record and marker in its top three levels (an
    environment's `.complete.json`, a build tree's record), not the packages installed below them."""
    from wheelci.util.cache import cache_dir

    top, out = cache_dir(), {}
    for where, dirs, files in os.walk(top):
        if len(Path(where).relative_to(top).parts) >= 2:
            dirs.clear()  # envs/NAME/...: the installed packages, pip's own files
        for name in files:
            path = Path(where) / name
            if not path.is_symlink() and path.stat().st_size < 1 << 20 and (found := leaks(path.read_text(errors="replace"))):
                out[str(path.relative_to(top))] = found
    return out


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """An empty loopback index (pip asks it and finds nothing), the canary environment, a .pypirc, and a
    copy of tiny_ext whose [tool.wheelci] env and setup.py carry canaries."""
    tmp = tmp_path_factory.mktemp("secrets")
    (tmp / "empty").mkdir()
    project = tmp / "tiny_ext"
    shutil.copytree(TINY, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    text = (project / "pyproject.toml").read_text()
    (project / "pyproject.toml").write_text(text.replace(
        "[tool.wheelci]\n", f'[tool.wheelci]\nenv = {{ SERVICE_KEY = "{CANARIES["toolci_env"]}" }}\n'))
    with StaticServer(tmp / "empty", tmp / "static.log") as index:
        host = index.url.split("//", 1)[1].rstrip("/")
        env = {
            "PIP_EXTRA_INDEX_URL": f"http://{USER}:{CANARIES['pip_extra']}@{host}/",
            "TWINE_PASSWORD": CANARIES["twine_password"],
            "CI_JOB_TOKEN": CANARIES["ci_token"],
            "GITHUB_STEP_SUMMARY": str(tmp / "summary.md"),
            "TWINE_CONFIG_FILE": str(tmp / "pypirc"),
        }
        # pip keeps the indexes it is configured with: the canary one is asked on top, and has nothing
        (tmp / "pypirc").write_text(
            f"[distutils]\nindex-servers = private\n\n[private]\nrepository = http://127.0.0.1:{closed_port()}/\n"
            f"username = {USER}\npassword = {CANARIES['pypirc_password']}\n")
        yield tmp, project, env, index


def assert_clean(r, *roots: Path, summary: Path | None = None) -> None:
    assert not leaks(r.stdout), (leaks(r.stdout), r.stdout[-3000:])
    assert not leaks(r.stderr), (leaks(r.stderr), r.stderr[-3000:])
    assert not files_leaks(*[p for p in roots if p.exists()]), files_leaks(*roots)
    if summary is not None and summary.exists():
        assert not leaks(summary.read_text()), summary.read_text()[-3000:]


def torch_url(index) -> str:
    return f"http://{USER}:{CANARIES['torch_url']}@{index.url.split('//', 1)[1]}"


@pytest.mark.parametrize("verbose", [[], ["--verbose"]], ids=["quiet", "verbose"])
@pytest.mark.parametrize("json_out", [[], ["--json"]], ids=["text", "json"])
def test_the_dry_run_and_the_plan_show_no_secret(world, verbose, json_out):
    tmp, project, env, index = world
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run", *json_out, *verbose,
                  "--torch-index-url", torch_url(index), "--env", f"API_KEY={CANARIES['cli_env']}",
                  "--env", "FORCE_CUDA=1", "--upload", f"http://{USER}:{CANARIES['upload_url']}@example.org/",
                  env=env)
    assert r.returncode == 0, r.stderr
    assert_clean(r)
    shown = json.loads(r.stdout)["build_env"] if json_out else r.stdout
    assert "API_KEY" in str(shown) and "SERVICE_KEY" in str(shown) and "***" in str(shown)
    r = run_stage("ci.plan", "--project-dir", project, *json_out, *verbose, env=env)
    assert r.returncode == 0, r.stderr
    assert_clean(r)


S3_KEYS = {"AWS_ACCESS_KEY_ID": CANARIES["aws_key_id"], "AWS_SECRET_ACCESS_KEY": CANARIES["aws_secret"]}


@pytest.mark.parametrize("json_out", [[], ["--json"]], ids=["text", "json"])
@pytest.mark.parametrize("url", [f"redis://{USER}:{CANARIES['cache_password']}@127.0.0.1:6379/1",
                                 f"https://{USER}:{CANARIES['cache_password']}@dav.example/cache/",
                                 "s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=r1"], ids=["redis", "webdav", "s3"])
def test_a_compile_cache_shows_its_store_never_its_credentials(world, json_out, url):
    tmp, project, env, index = world
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run", *json_out, "--compile-cache", url,
                  env={**env, **S3_KEYS})
    assert r.returncode == 0, r.stderr
    assert_clean(r)
    assert "127.0.0.1" in r.stdout or "dav.example" in r.stdout  # the store is named
    r = run_stage("ci.plan", "--project-dir", project, *json_out, env={**env, **S3_KEYS, "WHEELCI_COMPILE_CACHE": url})
    assert r.returncode == 0, r.stderr
    assert_clean(r)


@pytest.mark.slow
def test_a_compile_through_a_password_protected_store_leaks_nowhere(world, tmp_path):
    """A real Redis whose password is a canary, the S3 keys in the environment, a chatty backend that prints
    every variable and fails: its log, sccache's server log, the report and every line shown are clean."""
    from tests._servers import Redis

    tmp, project, env, index = world
    chatty = tmp_path / "chatty"
    shutil.copytree(project, chatty)
    (chatty / "setup.py").write_text("import os, sys\nfor k, v in sorted(os.environ.items()):\n    print(k, '=', v)\n"
                                     "sys.exit(1)\n")
    out, work = tmp_path / "out", tmp_path / "work"
    with Redis(tmp_path / "redis", password=CANARIES["cache_password"]) as redis:
        r = run_stage("ci.build", chatty, "--cpu", "--engine", "host", "-w", out, "--work-dir", work, "--verbose",
                      "--compile-cache", redis.url, env={**env, **S3_KEYS, "GITHUB_ACTIONS": "true"})
    assert r.returncode == 1, r.stderr[-2000:]
    assert "compile cache: redis redis://127.0.0.1:" in r.stderr  # the store answered: sccache ran the compile
    assert (work / "sccache-server.log").exists()
    assert_clean(r, out, work, summary=Path(env["GITHUB_STEP_SUMMARY"]))


def test_public_variables_are_shown_and_the_rest_masked(world):
    tmp, project, env, index = world
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run", "--json",
                  "--env", "TORCH_CUDA_ARCH_LIST=8.0;9.0", "--env", "OTHER=plain-value",
                  "--public-env", "TORCH_CUDA_ARCH_LIST", env=env)
    plan = json.loads(r.stdout)
    assert plan["build_env"]["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0"
    assert plan["build_env"]["OTHER"] == "***" and "plain-value" not in r.stdout
    assert plan["public_env"] == ["TORCH_CUDA_ARCH_LIST"]


def test_every_channel_of_a_stage_redacts_what_was_registered(monkeypatch, capsys, tmp_path):
    """In one process, as a stage runs: a progress line, a `+ cmd` echo, a tool's passed-through output,
    the --json document and the error line all pass through the one redaction."""
    from wheelci import cli
    from wheelci.errors import CiError
    from wheelci.util import log, proc

    url = f"https://{USER}:{CANARIES['torch_url']}@idx.example/simple"
    monkeypatch.setenv("CI_JOB_TOKEN", CANARIES["ci_token"])
    monkeypatch.setattr(log, "VERBOSE", True)

    def main(args):
        log.info(f"creating the build environment from {args.url} ({CANARIES['ci_token']})")
        proc.run([sys.executable, "-c", "pass", args.url], what="echo")
        log.passthrough(f"pip: {CANARIES['ci_token']}\n".encode())
        cli.emit_json({"index": args.url, "token": CANARIES["ci_token"]})
        raise CiError(f"pip failed on {args.url}: {CANARIES['ci_token']} refused")

    p = cli.parser("ci.fake", "a stage")
    p.add_argument("url")
    p.add_argument("--json", action="store_true")
    with pytest.raises(SystemExit) as e:
        cli.run(p, main, [url, "--json"])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and "pip failed on https://idx.example/simple: *** refused" in err
    assert json.loads(out)["result"] == {"index": "https://idx.example/simple", "token": "***"}
    assert "pass https://idx.example/simple" in err and "pip: ***" in err
    assert not leaks(out + err), out + err


@pytest.mark.parametrize("verbose", [[], ["--verbose"]], ids=["quiet", "verbose"])
def test_a_compile_that_prints_its_variables_and_fails_leaks_nothing(world, tmp_path, verbose):
    """A build backend that echoes every variable it was given, then fails: the compile log under
    --work-dir, the error line (the compiler's last line) and report.json hold no canary."""
    tmp, project, env, index = world
    chatty = tmp_path / "chatty"
    shutil.copytree(project, chatty)
    setup = chatty / "setup.py"
    setup.write_text("import os, sys\nfor k, v in sorted(os.environ.items()):\n    print(k, '=', v)\n"
                     "print('last words', os.environ.get('API_KEY'), os.environ.get('SERVICE_KEY'))\n"
                     "sys.exit(1)\n")
    out, work = tmp_path / "out", tmp_path / "work"
    # no --torch-index-url: an index the user names is the only source of torch (unreachable, an error
    # before any compile); the PyTorch index's CPU fallback (pip's configuration) gives this build its torch
    r = run_stage("ci.build", chatty, "--cpu", "--engine", "host", "-w", out, "--work-dir", work, *verbose,
                  "--env", f"API_KEY={CANARIES['cli_env']}", env={**env, "GITHUB_ACTIONS": "true"})
    assert r.returncode == 1, r.stderr[-2000:]  # a finding: the project's compile failed
    assert "last words *** ***" in r.stderr
    logs = list(work.rglob("*.log"))
    assert logs and any("last words" in p.read_text(errors="replace") for p in logs)  # the log was written
    assert_clean(r, out, work, summary=Path(env["GITHUB_STEP_SUMMARY"]))
    report = json.loads((out / "report.json").read_text())
    assert report["failed_step"] == "compile"


@pytest.mark.slow
def test_a_whole_build_and_upload_with_canaries_everywhere(world, tmp_path):
    """Success: a real CPU build of the project, verified and uploaded to a loopback index whose
    password is a canary, under --verbose and with a job summary; then every other stage over its wheel."""
    tmp, project, env, index = world
    out, work = tmp_path / "out", tmp_path / "work"
    with PypiServer(tmp_path / "pypiserver", USER, CANARIES["upload_password"]) as server:
        url = f"http://{USER}:{CANARIES['upload_password']}@127.0.0.1:{server.port}/"
        r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", out, "--work-dir", work, "--verbose",
                      "--env", f"API_KEY={CANARIES['cli_env']}", "--upload", url, "--json",
                      env={**{k: v for k, v in env.items() if k != "TWINE_PASSWORD"},  # it would win over the URL's
                           "GITHUB_ACTIONS": "true"})
        assert r.returncode == 0, r.stderr[-3000:]
        assert json.loads(r.stdout)["passed"] is True
        assert_clean(r, out, work, summary=Path(env["GITHUB_STEP_SUMMARY"]))
        (wheel,) = out.glob("*.whl")
        assert (server.packages / wheel.name).is_file()  # it did upload, with the canary password
    assert not cache_leaks(), cache_leaks()  # no stamp or record the build kept in the tool's cache
    stage_runs = [
        ("ci.check", [wheel, "--limit", "pypi"]), ("ci.check", [tmp_path / "missing.whl"]),
        ("ci.abi", [wheel]), ("ci.abi", [tmp_path / "missing.whl"]),
        ("ci.preload", [wheel, "--print-order"]), ("ci.preload", [tmp_path / "missing.whl", "--print-order"]),
        ("ci.split", [wheel, "--limit", "10KB", "-w", tmp_path / "split"]),
        ("ci.index", [out, "-o", tmp_path / "index"]), ("ci.index", [tmp_path / "nothing", "-o", tmp_path / "i2"]),
        ("ci.upload", ["--repository", "private", "--retries", "0", wheel]),
        ("ci.upload", ["--repository-url", f"http://{USER}:{CANARIES['upload_url']}@127.0.0.1:{closed_port()}/",
                       "--retries", "0", wheel]),
    ]
    for stage, args in stage_runs:
        for verbose in ([], ["--verbose"]):
            r = run_stage(stage, *args, *verbose, env=env)
            assert r.returncode in (0, 1, 2), (stage, r.stderr)
            assert_clean(r, tmp_path / "split", tmp_path / "index")


@pytest.mark.parametrize("url, secret_part", [
    ("http://tuser:abc@defATpw01@127.0.0.1:9/simple/", "defATpw01"),  # pip reads the password as abc@def...
    ("https://u:slashPW1/abc@h.example/legacy/", "slashPW1/abc"),  # a base64 token holds `/`
    ("https://u:spacePW1 abc@h.example/legacy/", "spacePW1 abc"),
    ("https://tokenOnlyUserinfo1@github.example/x.git", "tokenOnlyUserinfo1"),
])
def test_odd_passwords_are_redacted_whole(url, secret_part):
    """Passwords with `@`, `/` or a space, and a token as the whole userinfo: the part a lenient client
    reads as the password never shows, alone or inside the URL."""
    from wheelci.util import secret

    secret.add_text(url)
    for text in (url, f"pip failed on {url!r}: {url}"):
        assert secret_part.split()[0] not in secret.redact(text), secret.redact(text)
    assert "h.example" in secret.redact(url) or "127.0.0.1" in secret.redact(url) or "github" in secret.redact(url)


def test_a_value_of_several_lines_is_redacted_line_by_line():
    from wheelci.util import secret

    secret.add("-----BEGIN KEY-----\nmultiLineKeyA1\nmultiLineKeyB2\n-----END KEY-----")
    assert secret.redact("failed: -----BEGIN KEY----- | multiLineKeyA1 | multiLineKeyB2") == "failed: *** | *** | ***"


@pytest.mark.parametrize("item", ["1BAD=envbadvalue1", "BAD-NAME=envbadvalue1", "envbadvalue1"])
def test_a_malformed_env_item_is_refused_without_its_value(world, item):
    tmp, project, env, index = world
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run", "--json", "--env", item, env=env)
    assert r.returncode == 2 and "bad --env" in r.stderr
    assert "envbadvalue1" not in r.stdout + r.stderr, r.stderr


def test_the_dry_run_names_what_a_host_build_takes_from_the_shell(world):
    tmp, project, env, index = world
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run", "--json",
                  env={**env, "CFLAGS": "-O2 -march=x86-64-v2", "MAX_JOBS": "1"})
    inherited = json.loads(r.stdout)["inherited"]
    assert "CFLAGS" in inherited, (inherited, r.stderr)
    assert inherited["CFLAGS"] == "-O2 -march=x86-64-v2" and inherited["MAX_JOBS"] == "1"
    assert inherited["PIP_EXTRA_INDEX_URL"].startswith("http://127.0.0.1:")  # shown, without its password
    assert_clean(r)


@pytest.mark.parametrize("how", ["cli", "environ", "project"])
def test_public_env_never_unmasks_a_variable_named_as_a_secret(world, tmp_path, how):
    """A project's `public-env` (or --public-env, WHEELCI_PUBLIC_ENV) naming GH_TOKEN showed its value:
    the secret rule wins, the plan says so once, and the value is redacted wherever it appears."""
    tmp, project, env, index = world
    canary = "cnryghtokenpublicQ7z"
    proj = tmp_path / "p"
    shutil.copytree(project, proj)
    args = ["--env", f"GH_TOKEN={canary}", "--env", "TORCH_CUDA_ARCH_LIST=8.0"]
    extra_env = dict(env)
    if how == "cli":
        args += ["--public-env", "GH_TOKEN", "--public-env", "TORCH_CUDA_ARCH_LIST"]
    elif how == "environ":
        extra_env["WHEELCI_PUBLIC_ENV"] = "GH_TOKEN TORCH_CUDA_ARCH_LIST"
    else:
        text = (proj / "pyproject.toml").read_text()
        (proj / "pyproject.toml").write_text(text.replace(
            "[tool.wheelci]\n", '[tool.wheelci]\npublic-env = ["GH_TOKEN", "TORCH_CUDA_ARCH_LIST"]\n'))
    for out in ([], ["--json"]):
        r = run_stage("ci.build", proj, "--cpu", "--engine", "host", "--dry-run", *out, *args, env=extra_env)
        assert r.returncode == 0, r.stderr
        assert canary not in r.stdout + r.stderr, r.stdout
        assert (r.stdout + r.stderr).count("public-env names GH_TOKEN") == 1, r.stdout + r.stderr
        if out:
            plan = json.loads(r.stdout)
            assert plan["build_env"]["GH_TOKEN"] == "***" and plan["build_env"]["TORCH_CUDA_ARCH_LIST"] == "8.0"
            assert plan["public_env"] == ["TORCH_CUDA_ARCH_LIST"]


def test_a_secret_named_value_is_registered_whatever_public_says():
    from wheelci.util import secret

    secret.add_variables({"MY_API_KEY": "cnryregisteredQ7z", "ARCHS": "8.0;9.0"}, public=["MY_API_KEY", "ARCHS"])
    assert secret.redact("x cnryregisteredQ7z y") == "x *** y"
    assert secret.masked({"MY_API_KEY": "v", "ARCHS": "8.0"}, ["MY_API_KEY", "ARCHS"]) == {"MY_API_KEY": "***",
                                                                                         "ARCHS": "8.0"}


@pytest.mark.parametrize("name", ["SSH_KEY", "AWS_ACCESS_KEY_ID", "SSH_AUTH_SOCK_PASS", "DEPLOY_KEY", "GH_TOKEN",
                                  "MY_SECRET_VALUE", "DB_PASSWD", "NPM_AUTH", "GOOGLE_CREDENTIALS", "SSH_PRIVATE"])
def test_a_variable_named_as_a_secret_is_never_shown(name):
    """docs/guarantees.md promised `*_KEY` variables are never shown; SSH_KEY and AWS_ACCESS_KEY_ID were:
    the value, echoed back in the one error line of a bad --cuda, prints as ***."""
    canary = f"cnry{name.lower().replace('_', '')}Q7zX"
    r = run_stage("ci.plan", "--cuda", canary, env={name: canary})
    assert r.returncode == 2 and canary not in r.stdout + r.stderr and "***" in r.stderr, r.stderr


def test_ordinary_names_are_not_secrets():
    from wheelci.util.secret import is_secret_name

    for name in ("PATH", "HOME", "CUDA_HOME", "TORCH_CUDA_ARCH_LIST", "KEYBOARD", "MONKEY", "SSHD", "CC"):
        assert not is_secret_name(name), name
    assert is_secret_name("ssh_key") and is_secret_name("Aws_Secret_Access_Key")


def test_the_docs_show_the_secret_name_rule_the_code_applies():
    """docs/guarantees.md's secret-names section is what wheelci.util.secret generates from its one rule."""
    import re

    from wheelci.util.secret import names_doc

    text = (ROOT / "docs" / "guarantees.md").read_text()
    m = re.search(r"<!-- secret-names:[^>]*-->\n(.*?)\n\s*<!-- /secret-names -->", text, re.S)
    assert m is not None, "docs/guarantees.md lost its secret-names section"
    assert " ".join(m.group(1).split()) == names_doc()


@pytest.mark.parametrize("query", ["access_token=QSECRETvalue1", "a=1&api_key=QSECRETvalue1", "X-Amz-Signature=QSECRETvalue1",
                                   "sig=QSECRETvalue1&x=y", "key=QSECRETvalue1", "auth=QSECRETvalue1"])
def test_a_secret_in_an_index_urls_query_is_masked_in_the_plan(world, query):
    """PIP_EXTRA_INDEX_URL='https://h/simple?access_token=...' was shown whole in the plan's
    "from shell" row."""
    tmp, project, env, index = world
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run",
                  env={**env, "PIP_EXTRA_INDEX_URL": f"https://h.example/simple?{query}"})
    assert r.returncode == 0, r.stderr
    assert "QSECRET" not in r.stdout + r.stderr and "h.example" in r.stdout, r.stdout
