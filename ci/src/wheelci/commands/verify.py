"""`wheelci verify`: its options and what it prints; the work is wheelci.verify's."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from wheelci import cli
from wheelci.config import project
from wheelci.errors import CiError, Finding
from wheelci.verify import verify_generic
from wheelci.wheel.names import WheelName


def build_parser() -> cli.Parser:
    p = cli.parser("verify", "install a wheel into a fresh venv over a torch install and test it")
    p.add_argument("wheel", type=Path)
    p.add_argument("--torch-site", type=Path, required=True, help="site-packages holding torch (and its CUDA wheels)")
    p.add_argument("--project", type=Path, help="the wheel's project: its [tool.wheelci] test command runs "
                                                "(placeholder {project})")
    p.add_argument("--test-command", help="run after the checks (default: the project's [tool.wheelci] test-command)")
    p.add_argument("--test-requires", action="append", metavar="REQ", help="installed before the test command")
    p.add_argument("--build-dir", type=Path, help="the build tree, passed to the tests as CI_BUILD_DIR")
    p.add_argument("--require-gpu", action="store_true", help="fail unless a GPU ran the wheel's CUDA kernels: torch "
                   "sees a device and the test command ran at least one test that was not skipped (pytest reports each)")
    p.add_argument("--json", action="store_true")
    return p


def main(args: argparse.Namespace) -> int:
    if not args.wheel.is_file():
        raise CiError(f"{args.wheel}: no such file")
    WheelName.parse(args.wheel.name)
    if not (args.torch_site / "torch").is_dir():
        raise CiError(f"{args.torch_site}: no torch installed there")
    settings = project.Settings()
    if args.project is not None:
        if not args.project.is_dir():
            raise CiError(f"{args.project}: not a project directory")
        settings = project.read_project(args.project).settings  # refuses a directory that is no project
    result = verify_generic(args.wheel, args.torch_site, project_dir=(args.project or Path.cwd()).resolve(),
                            test_command=args.test_command or settings.test_command,
                            test_requires=settings.test_requires + (args.test_requires or []),
                            build_dir=args.build_dir, require_gpu=args.require_gpu)
    if args.json:
        cli.emit_json({**asdict(result), "passed": result.passed, "failures": result.failures})
    else:
        for k, v in result.checks.items():
            print(f"{k}: {v}")
    if not result.passed:
        raise Finding(f"verify failed for {args.wheel.name}: {'; '.join(result.failures)}")
    return 0


if __name__ == "__main__":
    cli.run(build_parser(), main)
