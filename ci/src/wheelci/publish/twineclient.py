"""The upload itself, through twine: its settings and credentials (TWINE_USERNAME/TWINE_PASSWORD,
keyring or .pypirc, resolved by twine and never printed), `twine check`, and the Uploader, which sends
one file at a time through twine's Repository, retries connection errors, timeouts and 5xx with
exponential backoff, and judges every other answer (an "already exists" counts as uploaded only when
the simple page lists our sha256).

Its own module because it is the one place that speaks twine's and requests' API: twine's output and
log records are captured here and reported through us, and twine and requests load only when an
upload runs.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urljoin

from wheelci.errors import CiError, Finding
from wheelci.publish.endpoint import answer_text, short_reason, strip_userinfo, tls_error
from wheelci.publish.listing import Conflict, Listed, MalformedPage, SimpleIndex
from wheelci.publish.targets import Target
from wheelci.util.invocation import command

if TYPE_CHECKING:  # loaded only when an upload runs (the module docstring)
    import requests
    from twine.package import PackageFile
    from twine.repository import Repository
    from twine.settings import Settings


@dataclass(frozen=True)
class FileResult:
    filename: str
    project: str
    sha256: str
    status: str  # "uploaded" | "skipped" (the index already had the same sha256)
    attempts: int


def twine_settings(repository_url: str | None, repository: str | None, config_file: str | None) -> Settings:
    from twine import exceptions, settings, utils
    make = functools.partial(
        settings.Settings, username=os.environ.get("TWINE_USERNAME"), password=os.environ.get("TWINE_PASSWORD"),
        non_interactive=True, disable_progress_bar=True,
        config_file=config_file or os.environ.get("TWINE_CONFIG_FILE") or utils.DEFAULT_CONFIG_FILE,
        cacert=os.environ.get("TWINE_CERT"))
    try:
        if repository_url:
            return make(repository_url=repository_url)
        assert repository is not None, "upload() asks for a repository URL or name before this"
        return make(repository_name=repository)
    except exceptions.TwineException as e:
        raise CiError(str(e).splitlines()[0]) from None


def twine_credentials(s: Settings) -> tuple[str | None, str | None]:
    """Username and password from twine's resolver; none found means an anonymous upload. twine logs a
    keyring it cannot ask with its traceback: a handler on its logger keeps that off stderr."""
    from twine import exceptions

    logging.getLogger("twine").addHandler(logging.NullHandler())
    try:
        username = s.username
    except exceptions.TwineException:
        username = None
    try:
        password = s.password
    except exceptions.TwineException:
        password = None
    return username, password


def twine_check(targets: list[Target], warn: Callable[[str], None]) -> None:
    """twine check (metadata parses, long description renders); its console output is captured."""
    from twine import exceptions
    from twine.commands import check

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[assignment]  # this one handler's emit: keep each record
    log = logging.getLogger("twine")
    log.addHandler(handler)
    try:
        for t in [t for t in targets if not t.variants_file]:  # twine reads distributions only
            records.clear()
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    failed = check.check([str(t.path)])
            except exceptions.TwineException as e:
                raise Finding(f"twine check failed for {t.path.name}: {str(e).splitlines()[0]}") from None
            msgs = [" ".join(r.getMessage().split()) for r in records]
            if failed:
                raise Finding(f"twine check failed for {t.path.name}: {msgs[0] if msgs else 'see twine check'}")
            for m in msgs:
                warn(f"twine check: {t.path.name}: {m}")
    finally:
        log.removeHandler(handler)


def default_timeout(session: requests.Session, seconds: float) -> None:
    """twine's session has no timeout: a server that accepts and never answers would hang us forever.
    The read timeout bounds each wait for bytes (not the whole transfer), so big uploads still work."""
    request = session.request

    def with_timeout(method: str, url: str | bytes, **kw: Any) -> requests.Response:
        kw.setdefault("timeout", (min(30.0, seconds), seconds))
        return request(method, url, **kw)
    # this one session's request, for every request twine makes through it; requests' own get and post pass
    # everything after the URL by keyword, as with_timeout takes it
    session.request = with_timeout  # type: ignore[assignment]


class Uploader:
    """One run's uploads, file by file: what landed so far (a later failure names it, so the user
    knows what the index now holds), the simple pages read so far, and the retry policy. Connection
    errors, timeouts and 5xx are retried with backoff; every other answer is final."""

    def __init__(self, repo: Repository, url: str, shown: str, index: SimpleIndex, redact: Callable[[str], str],
                 say: Callable[[str], None], *, skip_existing: bool, retries: int, backoff: float) -> None:
        self.repo, self.url, self.shown, self.index = repo, url, shown, index
        self.redact, self.say = redact, say
        self.skip_existing, self.retries, self.backoff = skip_existing, retries, backoff
        self.results: list[FileResult] = []
        self.listings: dict[str, dict[str, Listed]] = {}

    def fail(self, cls: type[CiError], msg: str) -> CiError:
        """The error to raise, redacted, naming the files uploaded before it."""
        done = [r.filename for r in self.results if r.status == "uploaded"]
        tail = f" (uploaded before this: {', '.join(done)})" if done else ""
        return cls(self.redact(msg + tail))

    def same_on_index(self, t: Target, fresh: bool = False) -> bool | None:
        """True: listed with our sha256; False: listed with another; None: not listed."""
        if fresh or t.project not in self.listings:
            try:
                self.listings[t.project] = self.index.listing(t.project)
            except MalformedPage as e:
                raise self.fail(CiError, str(e)) from None
        if t.path.name not in self.listings[t.project]:
            return None
        theirs = self.listings[t.project][t.path.name]
        if isinstance(theirs, Conflict):
            raise self.fail(Finding, f"the index lists {t.path.name} more than once with different sha256 "
                                     f"({theirs}): an installer may fetch either")
        if theirs is None:
            raise self.fail(Finding, f"the index lists {t.path.name} without a sha256: cannot compare it")
        return theirs == t.sha256

    def send(self, t: Target) -> None:
        """Upload one file, or skip it when the index has the same bytes (--skip-existing)."""
        from twine import exceptions
        from twine.package import PackageFile

        if self.skip_existing:
            same = self.same_on_index(t)
            if same:
                self.say(f"skipping {t.path.name}: the index has it with the same sha256")
                self.results.append(FileResult(t.path.name, t.project, t.sha256, "skipped", 0))
                return
            if same is False:
                raise self.fail(Finding, f"the index already has a different {t.path.name} (sha256 differs)")
        try:
            package = None if t.variants_file else PackageFile.from_filename(str(t.path), None)
        except exceptions.TwineException as e:
            raise self.fail(CiError, f"{t.path.name}: {str(e).splitlines()[0]}") from None
        attempt = 0
        while True:
            attempt += 1
            self.say(f"uploading {t.path.name} to {self.shown}" + (f" (attempt {attempt})" if attempt > 1 else ""))
            problem = self._attempt(t, package, attempt)
            if problem is None:
                return
            if attempt > self.retries:
                raise self.fail(Finding, f"uploading {t.path.name} failed after {attempt} attempt"
                                         f"{'s' if attempt > 1 else ''}: {problem}")
            delay = self.backoff * 2 ** (attempt - 1)
            self.say(self.redact(f"{t.path.name}: {problem}; retrying in {delay:g}s"))
            time.sleep(delay)

    def _attempt(self, t: Target, package: PackageFile | None, attempt: int) -> str | None:
        """One POST. None: the file is on the index; else the passing problem to retry. A TLS error is
        configuration, never retried."""
        import requests
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                resp = (self.repo.upload(package, max_redirects=1) if package  # one try; we retry with backoff
                        else _post_file(self.repo, self.url, t))
        except requests.exceptions.SSLError as e:
            raise self.fail(CiError, str(tls_error(self.url, e))) from None
        except requests.ConnectionError as e:
            return f"connection error: {short_reason(e)}"
        except requests.Timeout as e:
            return f"timeout: {short_reason(e)}"
        except requests.RequestException as e:
            raise self.fail(Finding, f"uploading {t.path.name} failed: {short_reason(e)}") from None
        return self._answer(t, resp, attempt)

    def _answer(self, t: Target, resp: requests.Response, attempt: int) -> str | None:
        """What the index's answer means: None uploaded; a 5xx is a problem to retry; rejected
        credentials and a redirect are configuration (exit 2); any other refusal is a finding."""
        code = resp.status_code
        if code in (200, 201):
            self.results.append(FileResult(t.path.name, t.project, t.sha256, "uploaded", attempt))
            return None
        if code in (401, 403):
            raise self.fail(CiError, f"{self.shown} rejected the credentials (HTTP {code} {resp.reason}); "
                                     "check TWINE_USERNAME/TWINE_PASSWORD, keyring or .pypirc")
        if code == 409 or (code == 400 and "exist" in f"{resp.reason} {resp.text}".lower()):
            self._exists(t, code, attempt)
            return None
        if 300 <= code < 400:
            where = strip_userinfo(urljoin(self.url, resp.headers.get("Location", "")))
            raise self.fail(CiError, f"{self.shown} redirects the upload (HTTP {code}) to {where}: "
                                     "give the final URL as --repository-url")
        if 500 <= code < 600:
            return f"HTTP {code} {resp.reason}"
        text = answer_text(resp.text, resp.headers.get("Content-Type", ""))
        raise self.fail(Finding, f"{self.shown} refused {t.path.name}: HTTP {code} {resp.reason}"
                                 + (f": {text}" if text else "") + (_no_variants() if t.variants_file else ""))

    def _exists(self, t: Target, code: int, attempt: int) -> None:
        """An "already exists" answer: a retried POST whose first try landed counts as uploaded (or
        skipped, with --skip-existing) only when the simple page lists our sha256; anything else fails."""
        same = self.same_on_index(t, fresh=True)
        if same and (attempt > 1 or self.skip_existing):  # our earlier attempt landed
            self.results.append(FileResult(t.path.name, t.project, t.sha256,
                                           "uploaded" if attempt > 1 else "skipped", attempt))
            return
        if same:
            raise self.fail(Finding, f"the index already has {t.path.name} (same sha256); "
                                     "pass --skip-existing to skip it")
        raise self.fail(Finding, f"the index already has a different {t.path.name} "
                                 f"(HTTP {code}{'' if same is False else ', not listed'})")


def _no_variants() -> str:
    """What a refused variants file is told: the index that would serve it is the index stage's."""
    return ("; this index does not take a release's variants file, so installers cannot choose among variant "
            "wheels there: upload the plain and local-labelled wheels only, or serve the directory with "
            f"{command('index')}")


def _post_file(repo: Repository, url: str, t: Target) -> requests.Response:
    """A variants file through the upload form twine uses for distributions (which its PackageFile
    cannot describe): the index decides whether it takes the name."""
    fields = {":action": "file_upload", "protocol_version": "1", "name": t.project, "version": t.version,
              "sha256_digest": t.sha256}
    with open(t.path, "rb") as f:
        return repo.session.post(url, data=fields, files={"content": (t.path.name, f, "application/json")},
                                 allow_redirects=False)
