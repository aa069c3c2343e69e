"""Real request traces with their own arrival times, read for ``simulate --traffic``.

Three documented formats, each detected from the file's first line (a ``.gz`` file is read
through gzip):

* **Azure LLM inference traces** (2023, 2024): CSV with the header
  ``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` is a wall-clock time
  ``YYYY-MM-DD HH:MM:SS[.fraction]`` (the 2023 files carry 7 decimals), the other two are
  the prompt's and the output's tokens.
* **Mooncake traces**: JSON Lines with ``timestamp`` (milliseconds since the trace's
  start), ``input_length``, ``output_length`` and optionally ``hash_ids`` (one id per
  512-token block of the prompt; equal ids are equal content, which prefix caching
  reuses: kept here, see :attr:`TraceRequest.hash_ids`).
* **JSON Lines with an arrival time**: ``arrival_s`` (seconds), ``prompt_len`` and
  ``max_tokens`` (or ``output_len``; 8 when absent, as in workloads).

Arrival times are made relative to the earliest request and the requests sorted by them (a
stable sort: requests of one instant keep the file's order).  A malformed row is refused in
one line naming the file, the row (1-based, the header counted as row 1 in a CSV) and the
column.  A file in none of these formats is not a trace (:func:`read_trace` returns None):
``traffic_risk.load_traffic`` then reads it as a description or as untimed JSON Lines.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from dataclasses import dataclass

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
TIMED_KEYS = ("arrival_s", "prompt_len")
OUTPUT_KEYS = ("max_tokens", "output_len")
MOONCAKE_BLOCK = 512  # tokens per hash_ids block in Mooncake's traces
DEFAULT_OUTPUT = 8  # output tokens when a timed JSON line gives none (as in workloads)
_WALL_CLOCK = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d+))?$")


class TraceError(ValueError):
    """A trace row the replay cannot use (one line naming the file, the row and the column)."""


@dataclass(frozen=True)
class TraceRequest:
    arrival_s: float  # seconds after the trace's earliest request
    prompt_len: int
    output_len: int
    hash_ids: tuple[int, ...] | None = None  # Mooncake's prompt blocks (MOONCAKE_BLOCK tokens)


@dataclass(frozen=True)
class Trace:
    source: str
    format: str  # "azure", "mooncake" or "timed-jsonl"
    requests: tuple[TraceRequest, ...]

    @property
    def seconds(self) -> float:
        """From the first arrival to the last."""
        return self.requests[-1].arrival_s if self.requests else 0.0


def _text(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8-sig")


def read_trace(path: str) -> Trace | None:
    """The trace in ``path``, or None when the file is in none of the trace formats.

    OSError and UnicodeDecodeError (and gzip's errors) are the caller's to word."""
    text = _text(path)
    first = next((line for line in text.splitlines() if line.strip()), "")
    if [c.strip() for c in first.split(",")][:3] == list(AZURE_COLUMNS):
        return Trace(path, "azure", _sorted(_azure(path, text), 1e-9))
    try:
        head = json.loads(first)
    except ValueError:
        return None
    if not isinstance(head, dict):
        return None
    if all(k in head for k in MOONCAKE_KEYS):
        return Trace(path, "mooncake", _sorted(_lines(path, text, _mooncake_row)))
    if all(k in head for k in TIMED_KEYS):
        return Trace(path, "timed-jsonl", _sorted(_lines(path, text, _timed_row)))
    return None


def _sorted(rows: list[TraceRequest], scale: float = 1.0) -> tuple[TraceRequest, ...]:
    """Sorted by arrival (stable), times from the earliest, in seconds (``scale``: the rows'
    unit; Azure's are integer nanoseconds, subtracted before any rounding)."""
    rows = sorted(rows, key=lambda r: r.arrival_s)
    t0 = rows[0].arrival_s if rows else 0
    return tuple(TraceRequest((r.arrival_s - t0) * scale, r.prompt_len, r.output_len,
                              r.hash_ids) for r in rows)


def _count(value, where: str, least: int = 1) -> int:
    """A token count: an integer >= ``least`` (a CSV cell or a JSON number)."""
    if isinstance(value, str):
        value = value.strip()
        if not re.fullmatch(r"[+-]?\d+", value):
            raise TraceError(f"{where}: {value!r} is not a whole number of tokens")
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{where}: {value!r} is not a whole number of tokens")
    if value < least:
        raise TraceError(f"{where}: {value} tokens; must be >= {least}")
    return value


def _seconds(value, where: str, scale: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or value in (float("inf"), float("-inf")):
        raise TraceError(f"{where}: {value!r} is not a time (a finite number)")
    if value < 0:
        raise TraceError(f"{where}: {value!r}; a time is >= 0")
    return value * scale


def _wall_clock(value: str, where: str) -> int:
    """``YYYY-MM-DD HH:MM:SS[.fraction]`` as integer nanoseconds on one continuous scale (days
    counted from a proleptic calendar, so a trace may cross midnight or a month's end)."""
    import datetime as dt

    m = _WALL_CLOCK.match(value.strip())
    try:
        if m is None:
            raise ValueError
        y, mo, d, h, mi, s, frac = m.groups()
        day = dt.date(int(y), int(mo), int(d)).toordinal()
        if int(h) > 23 or int(mi) > 59 or int(s) > 59:
            raise ValueError
    except ValueError:
        raise TraceError(f"{where}: {value!r} is not a time (YYYY-MM-DD HH:MM:SS[.fraction])"
                         ) from None
    whole = day * 86400 + int(h) * 3600 + int(mi) * 60 + int(s)
    return whole * 10**9 + int((frac or "").ljust(9, "0")[:9])


def _azure(path: str, text: str) -> list[TraceRequest]:
    rows = csv.reader(io.StringIO(text))
    header = [c.strip() for c in next(rows)]
    at = {name: header.index(name) for name in AZURE_COLUMNS}
    out = []
    for i, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row):
            continue
        where = f"trace {path} row {i}"
        if len(row) < len(header):
            raise TraceError(f"{where}: {len(row)} columns, the header has {len(header)}")
        out.append(TraceRequest(
            _wall_clock(row[at["TIMESTAMP"]], f"{where} column TIMESTAMP"),
            _count(row[at["ContextTokens"]], f"{where} column ContextTokens"),
            _count(row[at["GeneratedTokens"]], f"{where} column GeneratedTokens")))
    return out


def _lines(path: str, text: str, row) -> list[TraceRequest]:
    out = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"trace {path} line {i}"
        try:
            obj = json.loads(line)
        except ValueError:
            raise TraceError(f"{where}: not a JSON object") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: not a JSON object")
        out.append(row(obj, where))
    return out


def _need(obj: dict, key: str, where: str):
    if key not in obj:
        raise TraceError(f"{where}: no {key!r}")
    return obj[key]


def _mooncake_row(obj: dict, where: str) -> TraceRequest:
    n = _count(_need(obj, "input_length", where), f"{where} input_length")
    ids = obj.get("hash_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(
                isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids):
            raise TraceError(f"{where} hash_ids: a list of block ids (integers >= 0)")
        blocks = -(-n // MOONCAKE_BLOCK)
        if len(ids) != blocks:
            raise TraceError(f"{where} hash_ids: {len(ids)} blocks, but input_length {n} "
                             f"fills {blocks} blocks of {MOONCAKE_BLOCK} tokens")
        ids = tuple(ids)
    return TraceRequest(
        _seconds(_need(obj, "timestamp", where), f"{where} timestamp", 1e-3), n,
        _count(_need(obj, "output_length", where), f"{where} output_length"), ids)


def _timed_row(obj: dict, where: str) -> TraceRequest:
    given = [k for k in OUTPUT_KEYS if k in obj]
    out = (_count(obj[given[0]], f"{where} {given[0]}") if given else DEFAULT_OUTPUT)
    return TraceRequest(_seconds(_need(obj, "arrival_s", where), f"{where} arrival_s"),
                        _count(_need(obj, "prompt_len", where), f"{where} prompt_len"), out)
