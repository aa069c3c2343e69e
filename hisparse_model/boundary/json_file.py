"""A JSON file read whole (a workload, engine arguments, a run's run.json, a recording).

Read through :func:`~.files.read_bytes` (bounded: :data:`~.limits.JSON` unless said);
UTF-8 with an optional byte-order mark.  Malformed JSON names the line and column; nesting
too deep for Python's parser and an integer of more than 4,300 digits are one line too (the
latter naming its line and column).
"""

from __future__ import annotations

import json
import re
import sys

from .files import InputError, read_bytes
from .limits import JSON, Bound


_DIGITS = re.compile(r"[0-9]+")  # a run taken whole, so a search is one pass


def too_many_digits(text: str) -> str | None:
    """Where ``text`` holds an integer of more digits than Python reads (4,300:
    ``sys.get_int_max_str_digits``): "line L column C: an integer of N digits ...", else
    None.  What a refusal names in place of Python's words, which name no place."""
    limit = sys.get_int_max_str_digits() or None
    m = next((m for m in _DIGITS.finditer(text) if limit and m.end() - m.start() > limit),
             None)
    if m is None:
        return None
    line = text.count("\n", 0, m.start()) + 1
    column = m.start() - text.rfind("\n", 0, m.start())
    return (f"line {line} column {column}: an integer of {m.end() - m.start():,} digits (at "
            f"most {limit:,} are read)")


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
        where = too_many_digits(text)
        raise InputError(f"{name}: {where}" if where else f"{name}: unreadable JSON: {exc}"
                         ) from None


def load(path: str, name: str, bound: Bound = JSON):
    """The JSON value in the file at ``path`` (``-``: standard input)."""
    return loads(read_bytes(path, bound, name), name)
