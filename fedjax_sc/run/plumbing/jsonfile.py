"""Reading a JSON file that a run wrote (config.json, metrics, reports), with an error that
names the file and line when it is damaged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json(path: Path) -> Any:
    """A JSON file's content.

    Raises:
      ValueError: not valid JSON (names the file and the position).
    """
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); the file is damaged "
                         f"or was cut short") from None
