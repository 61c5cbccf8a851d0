"""Benchmarks against what a user would otherwise run: `python -m ci.bench {surgery,index,build,stable,pipeline,env,compile-cache} [ARGS]`.

Each benchmark lives in `bench/<name>.py` (a `-` in its name is `_` there) with a `run(**typed options) -> int`;
their options are declared by the command line (wheelci.commands.bench), which calls it.
"""

BENCHMARKS = ("surgery", "index", "build", "stable", "pipeline", "env", "compile-cache")
