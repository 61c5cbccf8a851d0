"""The subcommands, one module each: a stage's parser (build_parser) and its main, which turns the parsed
arguments into the library's typed values, calls the stage's functions and prints what they return.

With wheelci.cli (the plumbing every command shares) and wheelci.__main__ (the console script), this is the
command line, a layer of its own: the library never imports it and never sees an argparse.Namespace.
`python -m wheelci.STAGE` runs wheelci.STAGE as the script, which hands over to the command here.
"""
