"""docs/testing.md's tests run as printed, and pass."""

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "testing.md"


def test_the_guides_tests_run_as_printed():
    code = re.search(r"```python\n(.*?)```", GUIDE.read_text(), re.S).group(1)
    namespace = {"__name__": "guide"}
    exec(compile(code, str(GUIDE), "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        test()
