"""Horovod's runner package, as far as its test helpers import it (threads.py)."""
