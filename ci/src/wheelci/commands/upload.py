"""`wheelci upload`: its options and what it prints; the work is wheelci.upload's."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from wheelci import cli
from wheelci.errors import CiError
from wheelci.publish.endpoint import env_secrets, redactor, url_secrets
from wheelci.upload import upload


def main(args: argparse.Namespace) -> int:
    redact = redactor([*env_secrets(), *url_secrets(args.repository_url, args.simple_url)])
    try:
        result = upload(args.files, args.repository_url, repository=args.repository,
                        skip_existing=args.skip_existing, simple_url=args.simple_url,
                        config_file=args.config_file, retries=args.retries, backoff=args.backoff,
                        timeout=args.timeout, check=not args.no_check)
    except CiError as e:  # errors raised before upload() knew every secret (twine's settings) too
        raise type(e)(redact(str(e))) from None
    if args.json:
        cli.emit_json({**asdict(result), "uploaded": result.uploaded, "skipped": result.skipped})
    else:
        for f in result.files:
            print(f"{f.status} {f.filename} sha256={f.sha256}")
        print(f"verified on {result.simple_url}: {len(result.uploaded)} uploaded, "
              f"{len(result.skipped)} skipped")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = cli.parser("upload", "Upload wheels/sdists to a private index with twine (check, retry, "
                         "skip identical files, verify sha256 on the simple page).")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--repository-url", metavar="URL",
                       help="upload endpoint (default: $TWINE_REPOSITORY_URL)")
    where.add_argument("--repository", metavar="NAME",
                       help="a section of .pypirc (default: $TWINE_REPOSITORY)")
    p.add_argument("--simple-url", metavar="URL",
                   help="the index's simple URL for checks (default: UPLOAD_URL/simple/, or "
                        ".../simple/ for a .../legacy/ endpoint)")
    p.add_argument("--skip-existing", action="store_true",
                   help="skip files the index already has with the same sha256 (a different file fails)")
    p.add_argument("--config-file", metavar="PATH", help="a .pypirc (default: $TWINE_CONFIG_FILE or ~/.pypirc)")
    p.add_argument("--retries", type=int, default=4, help="retries on connection errors and 5xx (default 4)")
    p.add_argument("--backoff", type=float, default=1.0, metavar="SECONDS",
                   help="first retry delay, doubled each time (default 1)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="give up on a connection silent this long, and on a simple page not read "
                        "in full within it (default 300)")
    p.add_argument("--no-check", action="store_true", help="skip twine check")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("files", nargs="+", metavar="FILE", type=Path,
                   help="wheels, sdists and variants files ({name}-{version}-variants.json, as "
                        f"{cli.command('index')} writes them)")
    return p


if __name__ == "__main__":
    cli.run(build_parser(), main)
