"""A trace with arrival times read as a stream: row by row, in its file's order, never held.

``simulate --traffic FILE`` replays a trace larger than :data:`STREAM_BYTES` (or any trace given
``--from``/``--to``) this way: the engine loop pulls each row when its clock reaches the
row's arrival (``answers/stream_replay.py``), so a crash at the first row is answered after
reading that row, whatever the file's size, and what is held is the requests in flight.  The
formats, the row checks and their one-line refusals are ``traces.py``'s; the file is read
through the input boundary under ``TRACE_STREAM`` (several GiB, gzip or zstd inflated as it
streams, bytes read and inflated both counted).  What a stream cannot do is sort: its rows
must come in arrival order (the public traces do), and a row earlier than the one before is
refused naming both lines.  Times are made relative to the first row read (the first of the
window with ``--from``), so a window replays as the same rows cut into their own file would.

A trace of at most :data:`STREAM_BYTES` is read whole as before (``traffic_file.load_traffic``:
any row order, its summary counting every row); ``HISPARSE_TRACE_WHOLE=1`` reads every trace
whole (the bench's baseline).
"""

from __future__ import annotations

import functools
import math
import os
import stat

from ..boundary.files import InputError
from ..boundary.limits import MIB, TRACE_STREAM
from .trace_seek import seekable, window_start
from .traces import (TraceError, _azure, _cells, _lines, _mooncake_row, _timed_row, text_lines,
                     trace_format)

STREAM_BYTES = MIB  # a regular file larger than this, holding a trace, is replayed as a stream
MAX_TRACE_S = 366 * 86400  # --from / --to: a year of trace time


def streams(path: str, window: bool = False) -> bool:
    """Whether ``simulate --traffic path`` replays it as a stream (module docstring): a window
    is always streamed, else a regular file over :data:`STREAM_BYTES`."""
    if os.environ.get("HISPARSE_TRACE_WHOLE") == "1":
        return False
    if window:
        return True
    try:
        st = os.stat(path)
    except OSError:
        return False  # the whole read names the error
    return stat.S_ISREG(st.st_mode) and st.st_size > STREAM_BYTES


class TraceStream:
    """The rows of the trace at ``path`` as ``(seconds, prompt_len, output_len, hash_ids)``,
    seconds after the first row read divided by ``speed``; with ``start_s``/``end_s`` (trace
    seconds after its first row, before ``speed``) only the rows in ``[start_s, end_s)``, those
    before read and dropped, reading stopped at the first past.  Iterate it once.  It counts as
    it goes: :attr:`rows` read (dropped ones included, :attr:`skipped` of them before the
    window), :attr:`trace_s` (the last row's trace time), :attr:`handed` (the rows in the
    window handed on), and of the rows the replay served (:meth:`served`) their number and
    lengths' range."""

    def __init__(self, path: str, speed: float = 1.0, start_s: float | None = None,
                 end_s: float | None = None):
        self.source, self.speed, self.start_s, self.end_s = path, speed, start_s, end_s
        self.rows, self.line, self.trace_s, self.ended = 0, 0, 0.0, False
        self.past_window = False  # it stopped at a row past --to, not at the file's end
        self.skipped = 0  # rows read before the window (--from), dropped
        self.count, self.prompt, self.output, self.last_s = 0, None, None, 0.0
        self.handed = 0  # rows in the window handed on (count: those the replay served)
        try:
            self._numbered = self._counted(text_lines(path, f"traffic {path}", TRACE_STREAM))
            first = next((line for _, line in self._numbered if line.strip()), None)
        except InputError as exc:
            raise TraceError(str(exc)) from None
        self.format = None if first is None else trace_format(first)
        self._first = first
        self._t0 = None  # the first row's time, where a seek (--from) skipped the rows after it
        self.seeked_bytes = 0  # bytes before the window not read (inputs/trace_seek.py)

    def _counted(self, numbered):
        for number, line in numbered:
            self.line = number
            yield number, line

    def _raw(self):
        """(time in the row's unit, prompt, output, ids, scale to seconds) in file order."""
        scale = 1e-9 if self.format == "azure" else 1.0
        for r in self._rows(self._numbered, self._first):
            yield r, scale

    def _parse(self, number: int, text: str):
        """The row of line ``number`` (not blank), refused as the stream refuses it."""
        return next(self._rows([(number, text)]))

    def _rows(self, numbered, first: str = ""):
        """The rows of ``numbered`` lines in this trace's format; ``first``: a JSON format's
        first line, read before them (an Azure trace's first line is its header)."""
        if self.format == "azure":
            yield from _azure(self.source, self._header, numbered)
            return
        row = _mooncake_row if self.format == "mooncake" else _timed_row
        yield from _lines(self.source, first, numbered, row)

    @functools.cached_property
    def _header(self) -> list[str]:
        """An Azure trace's column names (its first line), read once."""
        return [c.strip() for c in _cells(self._first, f"trace {self.source} row 1")]

    def _seek(self) -> None:
        """Start reading where the window begins (``inputs/trace_seek.py``), where it can."""
        if not self.start_s or self.start_s <= 0 or not seekable(self.source):
            return
        scale = 1e-9 if self.format == "azure" else 1.0
        rows = text_lines(self.source, f"traffic {self.source}", TRACE_STREAM)
        try:  # the first row's time: a reader of its own (the stream's has read line 1)
            data = (item for item in rows if item[1].strip())
            if self.format == "azure":
                next(data)  # the header
            first = next(data, None)
        finally:
            rows.close()
        if first is None:
            return
        t0 = self._parse(*first).arrival_s
        offset, before = window_start(
            self.source, 0, lambda n, text: (self._parse(n, text).arrival_s - t0) * scale
            < self.start_s)
        if offset == 0:
            return
        self._numbered.close()
        self._numbered = self._counted(text_lines(self.source, f"traffic {self.source}",
                                                  TRACE_STREAM, (offset, before)))
        self._t0, self.seeked_bytes = t0, offset

    def __iter__(self):
        if self.format is None:
            return
        try:
            self._seek()
        except InputError as exc:
            raise TraceError(str(exc)) from None
        t0, base, prev = self._t0, None, None
        prev_line = 0
        start = -math.inf if self.start_s is None else self.start_s
        end = math.inf if self.end_s is None else self.end_s
        try:
            for r, scale in self._raw():
                self.rows += 1
                a = r.arrival_s
                if prev is not None and a < prev:
                    where = "row" if self.format == "azure" else "line"
                    raise TraceError(
                        f"trace {self.source} {where} {self.line}: arrives before {where} "
                        f"{prev_line}; a trace over {STREAM_BYTES // MIB} MiB is replayed as a "
                        "stream, in its file's order: sort it by time first")
                prev, prev_line = a, self.line
                if t0 is None:
                    t0 = a
                self.trace_s = (a - t0) * scale
                if self.trace_s < start:
                    self.skipped += 1
                    continue
                if self.trace_s >= end:
                    self.ended = self.past_window = True
                    return
                if base is None:
                    base = a
                t = (a - base) * scale / self.speed
                self.handed += 1
                yield t, r.prompt_len, r.output_len, r.hash_ids
        except InputError as exc:
            raise TraceError(str(exc)) from None
        self.ended = True

    def served(self, t: float, n: int, m: int) -> None:
        """The replay served (or its door refused) a row handed on: counted in :attr:`count`,
        the lengths' ranges and :attr:`last_s` (a row read ahead and never served is not)."""
        self.count += 1
        self.last_s = t
        self.prompt = (n, n) if self.prompt is None else (min(self.prompt[0], n),
                                                          max(self.prompt[1], n))
        self.output = (m, m) if self.output is None else (min(self.output[0], m),
                                                          max(self.output[1], m))
