"""What torch's testing helpers (torch/testing/_internal/common_utils.py) import from the
`expecttest` package, which Debian's python3-torch needs but Debian does not ship: a TestCase
whose inline expectations compare exactly (none is ever rewritten here: ACCEPT stays off). Ours,
for run_torch_distributed.py."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, actual, expect, skip=0):
        self.assertEqual(actual, expect)

    def assertExpectedRaisesInline(self, exc_type, callable, expect, *args, **kwargs):
        with self.assertRaises(exc_type) as raised:
            callable(*args, **kwargs)
        self.assertEqual(str(raised.exception), expect)
