"""The two ways a stage fails, mapped to the exit codes of the CLI contract."""


class CiError(Exception):
    """Bad usage or bad input: printed as one line, exit status 2."""

    exit_code = 2


class Finding(CiError):
    """The input is well formed but fails a check (over a limit, a failed verify): exit status 1."""

    exit_code = 1
