"""A manylinux CUDA wheel pipeline: plan, compile, repair, check, split, verify, report, publish.

Every stage is a module runnable alone (`python -m ci.<stage> --help`); `ci.build` chains them.
Imports stay light: a stage imports only what it uses, so `ci.repair` runs inside manylinux images
with nothing but their Python and auditwheel.
"""
