"""Leaf helpers: atomic outputs, digests, the cache directory. Nothing here imports the rest of ci."""
