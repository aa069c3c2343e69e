"""A JSON file read whole (a workload, engine arguments, a run's run.json, a recording).

Read through :func:`~.files.read_bytes` (bounded: :data:`~.limits.JSON` unless said);
UTF-8 with an optional byte-order mark.  Malformed JSON names the line and column; nesting
too deep for Python's parser and an integer of more than 4,300 digits are one line too.
"""

from __future__ import annotations

import json
import sys

from .files import InputError, read_bytes
from .limits import JSON, Bound


def loads(data: bytes, name: str):
    """The JSON value ``data`` holds (refusals: module docstring)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: not UTF-8 text (byte {data[exc.start]:#04x} at offset "
                         f"{exc.start}); save it as UTF-8") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}: malformed JSON: {exc}") from None
    except RecursionError:
        raise InputError(f"{name}: nested too deeply to read (JSON arrays or objects nested "
                         f"more than about {sys.getrecursionlimit()} levels)") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise InputError(f"{name}: unreadable JSON: {exc}") from None


def load(path: str, name: str, bound: Bound = JSON):
    """The JSON value in the file at ``path`` (``-``: standard input)."""
    return loads(read_bytes(path, bound, name), name)
