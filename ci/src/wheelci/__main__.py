"""The one command: `wheelci STAGE ARGS...` runs the stage's command (wheelci.commands.STAGE) in this process."""

from __future__ import annotations

import importlib
import sys

from wheelci import __version__

# subcommand -> its module in wheelci.commands: the stages a user runs, in pipeline order, then the tools around them
STAGES = {name: name for name in ("build", "plan", "repair", "check", "split", "patch", "preload", "index",
                                  "upload", "verify", "abi", "image", "engine", "cache", "bench")}


def usage() -> str:
    return (f"usage: wheelci {{{','.join(STAGES)}}} ...  (wheelci {__version__})\n"
            "  each stage has --help; `wheelci build PROJECT --cpu --dry-run` shows a build's plan")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        raise SystemExit(0 if argv else 2)
    if argv[0] == "--version":
        print(f"wheelci {__version__}")
        raise SystemExit(0)
    if argv[0] not in STAGES:
        from wheelci.cli import emit_json, shown

        error = f"unknown command {shown(argv[0])!r} (choose from {', '.join(STAGES)})"
        print(f"wheelci: error: {error}", file=sys.stderr)
        if "--json" in argv[:argv.index("--") if "--" in argv else len(argv)]:
            emit_json({"ok": False, "error": error, "exit_code": 2, "stage": None})
        raise SystemExit(2)
    from wheelci import cli
    from wheelci.util import invocation

    invocation.COMMAND = f"wheelci {argv[0]}"
    module = importlib.import_module(f"wheelci.commands.{STAGES[argv[0]]}")
    if hasattr(module, "build_parser"):
        cli.run(module.build_parser(), module.main, argv[1:])
    raise SystemExit(module.main(argv[1:]))


if __name__ == "__main__":
    main()
