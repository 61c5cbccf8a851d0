"""Run in other interpreters or pasted into other artefacts: imports nothing of ci."""
