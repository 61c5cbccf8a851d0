"""Upload distributions to a private index with twine, then prove the index serves what we sent.

`python -m ci.upload --repository-url URL FILES...` runs twine's checks, uploads each file through
twine's Repository (credentials from TWINE_USERNAME/TWINE_PASSWORD, keyring or .pypirc, resolved by
twine and never printed), retries connection errors and 5xx with exponential backoff, and finally
reads the index's simple page for each project and checks every file's sha256. Each simple page is
read within --timeout in all and up to 64 MiB (a server that trickles or never ends fails in one line).

Why not `twine upload --skip-existing`: twine 6.2 dropped it for indexes other than PyPI, and a
name-only skip would hide a different file under the same name. Here `--skip-existing` skips a file
only when the simple page lists it with the same sha256; a different file under that name fails.

A retried POST may have landed before the connection died: a later "already exists" answer is then
checked against the simple page, and counts as uploaded only when the sha256 matches. A page that
links one file name twice with different hashes verifies nothing (installers pick either link).

Wheel variants (PEP 825): variant wheels upload like any wheel. A release's variants file
(`{name}-{version}-variants.json`, as ci.index writes it) given among FILES is checked against the
variant wheels given with it, and sent first, through the same upload form: an index that refuses the
name (pypiserver answers "400 Bad filename") cannot serve variants, and the upload stops there, before
any wheel lands, saying so. Variant wheels given without their variants file upload with a warning:
installers ignore them until the index serves that file.

Exit status: 0 all uploaded (or skipped as identical) and verified; 1 a finding (the index has a
different file, twine check failed, the upload failed after retries, the simple page disagrees);
2 bad usage or input (missing file, no repository, credentials rejected).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Callable, Iterable
from urllib.parse import urlsplit

from wheelci.errors import CiError
from wheelci.util import secret
from wheelci.util import log as progress
from wheelci.publish.endpoint import (env_secrets, is_loopback, redactor, simple_url_for, strip_userinfo, url_secrets,
                                      url_users)
from wheelci.publish.listing import SimpleIndex, verify
from wheelci.publish.targets import check_variants, upload_targets
from wheelci.publish.twineclient import (FileResult, Uploader, default_timeout, twine_check, twine_credentials,
                                         twine_settings)


@dataclass(frozen=True)
class UploadResult:
    repository_url: str
    simple_url: str
    files: tuple[FileResult, ...]

    @property
    def uploaded(self) -> list[str]:
        return [f.filename for f in self.files if f.status == "uploaded"]

    @property
    def skipped(self) -> list[str]:
        return [f.filename for f in self.files if f.status == "skipped"]


# ---------------------------------------------------------------- the upload


def upload(files: Iterable[str | os.PathLike[str]], repository_url: str | None = None, *,
           repository: str | None = None, skip_existing: bool = False, simple_url: str | None = None,
           config_file: str | None = None, retries: int = 4, backoff: float = 1.0,
           timeout: float = 300.0, check: bool = True,
           log: Callable[[str], None] | None = None) -> UploadResult:
    """Check, upload, verify. Raises CiError (bad input, rejected credentials) or Finding."""
    from twine.repository import Repository

    say = log or progress.info
    if retries < 0:
        raise CiError("--retries must be >= 0")
    if timeout <= 0:
        raise CiError("--timeout must be > 0")
    targets = upload_targets(files)
    repository_url = repository_url or os.environ.get("TWINE_REPOSITORY_URL")
    repository = repository or os.environ.get("TWINE_REPOSITORY")
    if not repository_url and not repository:
        raise CiError("no index given: pass --repository-url URL or --repository NAME (a .pypirc section)")
    s = twine_settings(repository_url, repository, config_file)
    url = s.repository_config["repository"]  # a .pypirc `repository =` may keep its user:pass@
    assert url is not None, "twine's settings always hold the repository's URL (or refuse the section)"
    username, password = twine_credentials(s)
    secret.add(password, user=username)  # .pypirc and keyring: every channel redacts them from here on
    secret.add_url(url)
    redact = redactor([password, *env_secrets(), *url_secrets(repository_url, simple_url, url)],
                      users=[username, os.environ.get("TWINE_USERNAME"), *url_users(simple_url, url)])
    shown = redact(strip_userinfo(url))
    raw_say = say
    say = lambda m: raw_say(redact(m))  # noqa: E731
    if urlsplit(url).scheme == "http" and not is_loopback(url):
        say(f"warning: {shown} is plain http: credentials and files cross the network unencrypted")
    simple = simple_url or simple_url_for(url)

    check_variants(targets, say)
    if check:
        twine_check(targets, say)

    logging.getLogger("twine").addHandler(logging.NullHandler())  # we report; twine stays quiet
    repo = Repository(url, username, password, disable_progress_bar=True)
    repo.set_certificate_authority(s.cacert)
    repo.set_client_certificate(s.client_cert)
    default_timeout(repo.session, timeout)
    up = Uploader(repo, url, shown, SimpleIndex(repo.session, simple, timeout), redact, say,
                  skip_existing=skip_existing, retries=retries, backoff=backoff)
    try:
        for t in targets:
            up.send(t)
        verify(up.index, targets, say, up.fail)
    finally:
        repo.close()
    return UploadResult(shown, redact(strip_userinfo(simple)), tuple(up.results))


# ---------------------------------------------------------------- CLI


if __name__ == "__main__":  # `python -m wheelci.upload` (`python -m ci.upload` here): the command line runs it
    import runpy

    runpy.run_module("wheelci.commands.upload", run_name="__main__")
