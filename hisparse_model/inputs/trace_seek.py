"""``--from`` on a plain trace file: the rows before the window found by bisection, not read.

A window late in a long trace (the last hour of a week) would otherwise be reached by reading
and checking every row before it.  A stream's rows come in arrival order (``trace_stream.py``
refuses a row earlier than the one before), so on a regular file that is not compressed the
window's first row is found as in a sorted array: probe the row that starts after the middle
byte of the span left, keep the half that holds the window's start, until the span is at most
:data:`SPAN` bytes; then the stream reads on from a line start whose row is before the window
(so are all rows before it), dropping the few rows of the span before the window as it always
did.  Lines are numbered as if read from the top (the ``\\n`` before the offset counted), so a
refusal names the same line.  What is given up: the rows before the window that no probe read
are not checked (a malformed or out-of-order row there is not refused; the rows of the window
are checked as ever).  A compressed file, a pipe or a file whose lines a probe cannot find
(CR-only endings, a line past the line bound) is read from the top, as before.
"""

from __future__ import annotations

import os
import stat

from ..boundary.files import GZIP_MAGIC, ZSTD_MAGIC
from ..boundary.limits import CHUNK, LINE_BYTES, MIB

SPAN = MIB  # bisection stops here: the stream reads and drops at most this many bytes of rows
PROBE = 64 * 1024  # bytes read at a time looking for a probe's line


def seekable(path: str) -> bool:
    """Whether ``path`` is a regular file whose bytes are the trace's text (not compressed)."""
    try:  # stat first: opening a FIFO would wait for its writer
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return not head.startswith(GZIP_MAGIC) and head != ZSTD_MAGIC


def window_start(path: str, data_from: int, is_before) -> tuple[int, int]:
    """``(offset, lines before it)``: a line start at or after byte ``data_from`` (where the
    trace's rows begin) whose row and every row before it ``is_before(number, text)`` the
    window (module docstring).  ``is_before(number, text)`` answers for one line that is not
    blank, refusing a malformed row as the stream would (a ValueError naming line
    ``number``, counted only for a refusal: 0 until then)."""
    with open(path, "rb") as f:
        fd = f.fileno()
        lo, hi = data_from, os.fstat(fd).st_size
        while hi - lo > SPAN:
            mid = (lo + hi) // 2
            found = _line_after(fd, mid, hi)
            if found is None:
                hi = mid
                continue
            at, raw = found
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = ""  # no answer here: the stream refuses it if it reads it
            try:
                answer = is_before(0, text) if text.strip() else None
            except ValueError:  # refused: again, naming its line (counted only now)
                is_before(1 + _newlines(fd, 0, at), text)
                raise  # pragma: no cover  (the call above raises; this keeps it a refusal)
            if answer:
                lo = at
            else:
                hi = mid  # in the window, or no answer: the lower half (still correct)
        return lo, _newlines(fd, 0, lo)


def _line_after(fd: int, pos: int, end: int) -> tuple[int, bytes] | None:
    """The first whole line starting after byte ``pos`` and before ``end``: its offset and
    bytes (no ``\\n`` nor ``\\r`` at its end); None if none is found within the line bound."""
    data, at = b"", pos
    while b"\n" not in data:
        if len(data) > LINE_BYTES or at >= end:
            return None
        piece = os.pread(fd, PROBE, at)
        if not piece:
            return None
        data, at = data + piece, at + len(piece)
    start = pos + data.index(b"\n") + 1
    if start >= end:
        return None
    rest = data[data.index(b"\n") + 1:]
    while b"\n" not in rest:
        if len(rest) > LINE_BYTES:
            return None
        piece = os.pread(fd, PROBE, start + len(rest))
        if not piece:
            break  # the last line, without a final newline
        rest += piece
    line = rest.split(b"\n", 1)[0]
    return start, line[:-1] if line.endswith(b"\r") else line


def _newlines(fd: int, start: int, end: int) -> int:
    """The ``\\n`` bytes in ``[start, end)``."""
    count, at = 0, start
    while at < end:
        piece = os.pread(fd, min(CHUNK, end - at), at)
        if not piece:
            break
        count += piece.count(b"\n")
        at += len(piece)
    return count
