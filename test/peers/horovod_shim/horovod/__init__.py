"""An import shim that runs Horovod 0.28.1's own test files against chorus: `horovod.torch` is
`chorus.torch` (test/peers/run_horovod.py puts this folder first on PYTHONPATH). Ours, not
Horovod's: no Horovod code is here."""
