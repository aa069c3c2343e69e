"""Real request traces with their own arrival times, read for ``simulate --traffic``.

Three documented formats, each detected from the file's first line, read once and row by row
through the input boundary (``boundary/``: a gzip file inflated as it streams; at most
``TRACE.bytes`` and :data:`TRACE_ROWS` requests, refused where the bound is passed):

* **Azure LLM inference traces** (2023, 2024): CSV with the header
  ``TIMESTAMP,ContextTokens,GeneratedTokens`` (in any order and case, other columns
  ignored); ``TIMESTAMP`` is a wall-clock time
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
column; so is a length past its bound (an output longer than the model's context, a
``hash_ids`` id past what a workload's ``prompt_blocks`` can name).  A file in none of these formats is not a trace (:func:`read_trace` returns None):
``traffic_risk.load_traffic`` then reads it as a description or as untimed JSON Lines.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import re
from dataclasses import dataclass

from ..boundary.files import InputError, lines
from ..boundary.limits import TRACE, TRACE_ROWS
from ..model.knobs import MODEL_MAX_LEN
from ..schedule.shared_prompts import BLOCK_IDS
from ..schedule.workload import short_repr

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
TIMED_KEYS = ("arrival_s", "prompt_len")
OUTPUT_KEYS = ("max_tokens", "output_len")
MOONCAKE_BLOCK = 512  # tokens per hash_ids block in Mooncake's traces
DEFAULT_OUTPUT = 8  # output tokens when a timed JSON line gives none (as in workloads)
# ASCII digits only (re's \d takes a full-width or Arabic-Indic digit, which no trace writes)
_WALL_CLOCK = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[ T]([0-9]{2}):([0-9]{2}):([0-9]{2})"
                         r"(?:\.([0-9]+))?$")


MAX_OUTPUT_LEN = MODEL_MAX_LEN  # no request generates more tokens than the model's context


class TraceError(InputError):
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


def text_lines(path: str, name: str, bound=TRACE, start: tuple[int, int] = (0, 0)):
    """``(number, text)`` of each line of the file at ``path``, read once through the input
    boundary (at most ``bound.bytes``, ``TRACE``'s unless given: a streamed trace's is
    ``TRACE_STREAM``; gzip or zstd inflated as it streams, each line bounded), as
    UTF-8 (a byte-order mark on the first line read past); other bytes: one line naming the
    line.  ``start``: ``(offset, lines before it)`` of a plain file (``inputs/trace_seek.py``)."""
    for number, raw in lines(path, bound, name, start):
        try:
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise TraceError(f"{name} line {number}: not UTF-8 text (byte "
                             f"{raw[exc.start]:#04x} at column {exc.start + 1})") from None
        yield number, text


def trace_format(first: str) -> str | None:
    """The trace format whose first line ``first`` is (module docstring), or None."""
    if {c.strip().lower() for c in first.split(",")} >= {c.lower() for c in AZURE_COLUMNS}:
        return "azure"  # the columns in any order and any case, other columns ignored
    try:
        head = json.loads(first)
    except (ValueError, RecursionError):
        return None
    if not isinstance(head, dict):
        return None
    if all(k in head for k in MOONCAKE_KEYS):
        return "mooncake"
    if all(k in head for k in TIMED_KEYS):
        return "timed-jsonl"
    return None


def read_trace(path: str) -> Trace | None:
    """The trace in ``path``, or None when the file is in none of the trace formats."""
    numbered = text_lines(path, f"trace {path}")
    for number, first in numbered:
        if first.strip():
            fmt = trace_format(first)
            return None if fmt is None else read_rows(path, fmt, first, numbered)
    return None


def read_rows(path: str, fmt: str, first: str, rest) -> Trace:
    """The trace whose first line ``first`` says it is in format ``fmt``, its other lines
    ``rest`` (``(number, text)``, as :func:`text_lines` gives them) read row by row, at most
    :data:`TRACE_ROWS` requests."""
    if fmt == "azure":
        header = [c.strip() for c in _cells(first, f"trace {path} row 1")]
        return Trace(path, "azure", _sorted(_bounded(path, _azure(path, header, rest)), 1e-9))
    row = _mooncake_row if fmt == "mooncake" else _timed_row
    return Trace(path, fmt, _sorted(_bounded(path, _lines(path, first, rest, row))))


def _bounded(path: str, rows) -> list[TraceRequest]:
    """The rows, counted as they come: more than :data:`TRACE_ROWS` is refused there."""
    out = []
    for r in rows:
        if len(out) == TRACE_ROWS:
            raise TraceError(f"trace {path}: more than {TRACE_ROWS:,} requests, the bound on a "
                             "trace (the public traces hold 8,819 and 12,031; replay a part: "
                             f"head -n {TRACE_ROWS:,})")
        out.append(r)
    return out


def _sorted(rows: list[TraceRequest], scale: float = 1.0) -> tuple[TraceRequest, ...]:
    """Sorted by arrival (stable), times from the earliest, in seconds (``scale``: the rows'
    unit; Azure's are integer nanoseconds, subtracted before any rounding)."""
    rows = sorted(rows, key=lambda r: r.arrival_s)
    t0 = rows[0].arrival_s if rows else 0
    return tuple(TraceRequest((r.arrival_s - t0) * scale, r.prompt_len, r.output_len,
                              r.hash_ids) for r in rows)


def _count(value, where: str, least: int = 1, most: int = MODEL_MAX_LEN * 64) -> int:
    """A token count: an integer from ``least`` to ``most`` (a CSV cell or a JSON number);
    ``most``: an output no longer than the model's context, a prompt no longer than 64
    contexts (vLLM refuses any prompt past max_model_len at the door; the bound keeps a
    50-digit length from being carried)."""
    if isinstance(value, str):
        value = value.strip()
        if not re.fullmatch(r"[+-]?[0-9]{1,20}", value):
            raise TraceError(f"{where}: {value!r} is not a whole number of tokens")
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{where}: {value!r} is not a whole number of tokens")
    if value < least:
        raise TraceError(f"{where}: {short_repr(value)} tokens; must be >= {least}")
    if value > most:
        shown = f"{value:,}" if value < 10**30 else short_repr(value)  # 400 digits: cut
        raise TraceError(f"{where}: {shown} tokens; must be <= {most:,}" + (
            f" (the model's context: no request generates more)" if most == MAX_OUTPUT_LEN
            else " (64 times the model's context)"))
    return value


def _seconds(value, where: str, scale: float = 1.0) -> float:
    try:  # an integer past a float's range (10^400) is no time: float() says so
        finite = not isinstance(value, bool) and isinstance(value, (int, float)) and \
            math.isfinite(float(value))
    except OverflowError:
        finite = False
    if not finite:
        raise TraceError(f"{where}: {short_repr(value)} is not a time (a finite number)")
    if value < 0:
        raise TraceError(f"{where}: {short_repr(value)}; a time is >= 0")
    return float(value) * scale


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


def _cells(line: str, where: str) -> list[str]:
    """A CSV line's cells; a cell past the csv module's limit (131,072 characters) or a
    malformed line is one TraceError naming the row."""
    try:
        return next(csv.reader([line]), [])
    except csv.Error as exc:
        raise TraceError(f"{where}: not a CSV row ({exc})") from None


def _azure(path: str, header: list[str], rows):
    lower = [c.lower() for c in header]
    at = {name: lower.index(name.lower()) for name in AZURE_COLUMNS}  # any order, any case
    for i, line in rows:
        if not line.strip():
            continue
        where = f"trace {path} row {i}"
        row = _cells(line, where)
        if len(row) < len(header):
            raise TraceError(f"{where}: {len(row)} columns, the header has {len(header)}")
        yield TraceRequest(
            _wall_clock(row[at["TIMESTAMP"]], f"{where} column TIMESTAMP"),
            _count(row[at["ContextTokens"]], f"{where} column ContextTokens"),
            _count(row[at["GeneratedTokens"]], f"{where} column GeneratedTokens",
                   most=MAX_OUTPUT_LEN))


def _lines(path: str, first: str, rest, row):
    for i, line in itertools.chain([(1, first)], rest):
        if not line.strip():
            continue
        where = f"trace {path} line {i}"
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            raise TraceError(f"{where}: not a JSON object") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: not a JSON object")
        yield row(obj, where)


def _need(obj: dict, key: str, where: str):
    if key not in obj:
        raise TraceError(f"{where}: no {key!r}")
    return obj[key]


def _mooncake_row(obj: dict, where: str) -> TraceRequest:
    n = _count(_need(obj, "input_length", where), f"{where} input_length")
    ids = obj.get("hash_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(
                isinstance(h, int) and not isinstance(h, bool) and 0 <= h < BLOCK_IDS
                for h in ids):
            raise TraceError(f"{where} hash_ids: a list of block ids, integers 0 .. "
                             f"{BLOCK_IDS - 1:,} (the ids a workload's prompt_blocks name)")
        blocks = -(-n // MOONCAKE_BLOCK)
        if len(ids) != blocks:
            raise TraceError(f"{where} hash_ids: {len(ids)} blocks, but input_length {n} "
                             f"fills {blocks} blocks of {MOONCAKE_BLOCK} tokens")
        ids = tuple(ids)
    return TraceRequest(
        _seconds(_need(obj, "timestamp", where), f"{where} timestamp", 1e-3), n,
        _count(_need(obj, "output_length", where), f"{where} output_length",
               most=MAX_OUTPUT_LEN), ids)


def _timed_row(obj: dict, where: str) -> TraceRequest:
    given = [k for k in OUTPUT_KEYS if k in obj]
    out = (_count(obj[given[0]], f"{where} {given[0]}", most=MAX_OUTPUT_LEN) if given
           else DEFAULT_OUTPUT)
    return TraceRequest(_seconds(_need(obj, "arrival_s", where), f"{where} arrival_s"),
                        _count(_need(obj, "prompt_len", where), f"{where} prompt_len"), out)
