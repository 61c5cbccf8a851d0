"""wheelci: a manylinux CUDA wheel pipeline for PyTorch extensions.

plan, compile, repair, check, split, verify, report, publish. One command, `wheelci STAGE ...`
(`wheelci build .`), whose stages are also modules runnable alone (`python -m wheelci.repair`).
The package is not called `ci` so that it never shadows a repository's own `ci/` package.
Imports stay light: a stage imports only what it uses, so `wheelci.repair` runs inside manylinux
images with nothing but their Python and auditwheel.
"""

__version__ = "0.5.0"
