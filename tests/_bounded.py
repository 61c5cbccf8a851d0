"""Run a stage as tests._wheels.run_stage does, under an address-space limit: a reader that
materialises what crafted input asks for (a 1 GB sparse file, N copies of one long string) fails the
test with a MemoryError instead of taking the machine's memory, and a runaway meets the timeout."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
MEMORY = 1 << 30  # address space a stage may use: a few times what one needs


def bounded_stage(module: str, *args: str | Path, env: dict[str, str] | None = None,
                  memory: int = MEMORY, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python -m <module> ARGS` from the repository root under RLIMIT_AS `memory`."""
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "ci" / "src")])

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return _proc.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                     env=full_env, cwd=ROOT, preexec_fn=limit, timeout=timeout)
