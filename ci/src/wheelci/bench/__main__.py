"""`python -m wheelci.bench` (and `python -m ci.bench` in this repository): the command line runs it."""

import runpy

runpy.run_module("wheelci.commands.bench", run_name="__main__")
