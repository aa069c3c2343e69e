"""One reader for every file and stream the package is given: bounded, streamed, one-line refusals.

A path is a regular file, ``-`` (standard input), a FIFO or a character device
(``<(zcat serve.log.gz)``, ``/dev/stdin``): each is read in :data:`~.limits.CHUNK` pieces and
counted as it comes, so no input holds more memory than its :class:`~.limits.Bound`.  A
regular file over its bound (and not compressed) is refused from its size before a byte
is read.  A gzip file (its magic bytes, whatever its name) is decompressed as it streams, its
decompressed size counted against the bound (a small file that inflates without end is
refused at the bound, not after), and so are its compressed bytes and its members (a stream
of members that inflate to nothing is refused, not read forever); a corrupt or cut one is one
line saying so.  A zstd file (its magic bytes) is read the same way where the ``zstandard``
module is installed, and refused in one line saying how to read it where it is not.  Lines are
split at ``\\n``; one line longer than :data:`~.limits.LINE_BYTES` is refused (``/dev/zero``
in a second).  Every refusal is an :class:`InputError` naming the input and the bound.
"""

from __future__ import annotations

import os
import select
import stat
import sys
import zlib
from collections.abc import Iterator

from .limits import CHUNK, LINE_BYTES, MIB, Bound

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # a zstd frame (read with the zstandard module, if installed)
ZSTD_WINDOW = 2**27  # the most memory a zstd frame may ask for its window (zstd's own default)


class InputError(ValueError):
    """An input the package cannot read: one line naming it (exit status 2)."""


def _size(n: int) -> str:
    return f"{n / MIB:g} MiB" if n >= MIB else f"{n:,} bytes"


def over(bound: Bound, name: str) -> InputError:
    """The refusal of an input past its bound."""
    return InputError(f"{name}: more than {_size(bound.bytes)}, the bound on a {bound.kind} "
                      f"({bound.why})")


def _raw(path: str, name: str, bound: Bound, offset: int = 0) -> Iterator[bytes]:
    """The bytes at ``path`` as they come, ``CHUNK`` at a time (refusals: module docstring),
    from byte ``offset`` of a regular file (:func:`lines`' ``start``)."""
    if path == "-":
        stream = sys.stdin.buffer if sys.stdin is not None else None
        while stream is not None and (piece := stream.read(CHUNK)):
            yield piece
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer: no wait
    except OSError as exc:
        raise InputError(f"{name}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"{name}: a directory, not a file")
        os.set_blocking(fd, True)
        if offset:
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{name}: a start past byte 0 of a file that is not regular")
            os.lseek(fd, offset, os.SEEK_SET)
        if stat.S_ISREG(st.st_mode) and st.st_size > bound.bytes:
            if os.pread(fd, 4, 0)[:2] != GZIP_MAGIC and os.pread(fd, 4, 0) != ZSTD_MAGIC:
                # a compressed file is judged as it inflates
                raise over(bound, name)
        fifo, read = stat.S_ISFIFO(st.st_mode), 0
        if fifo:
            _await_writer(fd, name)
        while True:
            try:
                piece = os.read(fd, CHUNK)
            except OSError as exc:
                raise InputError(f"{name}: {exc.strerror or exc}") from None
            if not piece:
                if fifo and not read:  # its writer closed it without a byte
                    raise InputError(f"{name}: a FIFO that nothing was written to (its writer "
                                     "closed it): check the command writing it, or pipe the "
                                     "data to standard input (-)")
                return
            read += len(piece)
            yield piece
    finally:
        os.close(fd)


FIFO_WAIT_S = 10  # a FIFO opened before its writer: how long the reader waits for it


def _await_writer(fd: int, name: str) -> None:
    """Wait up to :data:`FIFO_WAIT_S` for a FIFO's writer to write or close (it is opened
    without waiting, so one that no process ever opens does not hang the command); as ``cat``
    would, a reader started first reads what a writer started a moment later writes."""
    waiting = select.poll()
    waiting.register(fd, select.POLLIN | select.POLLHUP)  # data, or a writer come and gone
    if not waiting.poll(FIFO_WAIT_S * 1000):
        raise InputError(f"{name}: a FIFO that no writer opened within {FIFO_WAIT_S} s: start "
                         "its writer, or pipe the data to standard input (-)")


def chunks(path: str, bound: Bound, name: str, offset: int = 0) -> Iterator[bytes]:
    """The content at ``path`` (decompressed when gzip), at most ``bound.bytes`` in all; from
    byte ``offset`` of a regular file not compressed (:func:`lines`' ``start``), as is."""
    raw = _raw(path, name, bound, offset)
    if offset:
        yield from raw  # the caller checked it is not compressed (inputs/trace_seek.py)
        return
    first = next(raw, b"")
    while len(first) < 4 and first:  # a pipe may deliver a byte at a time
        more = next(raw, b"")
        if not more:
            break
        first += more
    pieces = _inflate(first, raw, name, bound) if first.startswith(GZIP_MAGIC) else \
        _unzstd(first, raw, name, bound) if first.startswith(ZSTD_MAGIC) else _chain(first, raw)
    total = 0
    for piece in pieces:
        total += len(piece)
        if total > bound.bytes:
            raise over(bound, name)
        yield piece


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


# Compressed bytes handed to zlib at a time: zlib copies what is left of its input when a
# member ends, so a chunk of many tiny members costs a copy of at most this per member.
FEED = 64 * 1024
# The most gzip members in a stream of one bound: bgzip (the largest-member-count writer in
# use) makes one member per 64 KiB inflated, so a bound's worth is bound / 64 KiB members;
# one per 4 KiB inflated is 16 times that, and a stream of empty members is refused here.
MEMBER_BYTES = 4 * 1024


def _inflate(first: bytes, rest: Iterator[bytes], name: str, bound: Bound) -> Iterator[bytes]:
    """gzip members (one after another, as ``cat a.gz b.gz`` makes) inflated ``CHUNK`` at a
    time: what is held is one chunk in and one out, however far the data inflates.  What is
    read is bounded as well as what it inflates to: more compressed bytes than the bound, or
    more members than one per :data:`MEMBER_BYTES` of it (members that inflate to nothing
    read without end otherwise), is refused."""
    d = zlib.decompressobj(wbits=31)  # 31: a gzip header and trailer
    read, members, most = 0, 1, max(1, bound.bytes // MEMBER_BYTES)
    tail = False  # past the last member: only zero bytes (padding) may follow
    for whole in _chain(first, rest):
        read += len(whole)
        if read > bound.bytes:
            raise InputError(f"{name}: more than {_size(bound.bytes)} of gzip data read, the "
                             f"bound on a {bound.kind} ({bound.why})")
        if tail:
            _padding(whole, name)
            continue
        for at in range(0, len(whole), FEED):
            data = whole[at:at + FEED]
            while data:
                try:
                    out = d.decompress(data, CHUNK)
                except zlib.error as exc:
                    raise InputError(f"{name}: a gzip file that cannot be decompressed ({exc})"
                                     ) from None
                if out:
                    yield out
                if d.eof:
                    data = d.unused_data
                    if data and not data.startswith(GZIP_MAGIC[:len(data)]):
                        _padding(data + whole[at + FEED:], name)  # after the last member
                        tail = True
                        break
                    if data:
                        members += 1
                        if members > most:
                            raise InputError(
                                f"{name}: a gzip stream of more than {most:,} members (one per "
                                f"{_size(MEMBER_BYTES)} of the {_size(bound.bytes)} bound on a "
                                f"{bound.kind}; gzip and bgzip write far fewer)")
                        d = zlib.decompressobj(wbits=31)
                else:
                    data = d.unconsumed_tail
            if tail:
                break
    if not d.eof:
        raise InputError(f"{name}: a gzip file cut short (it ends inside its compressed "
                         "data)")


# Compressed bytes handed to zstd at a time: a zstd block of one repeated byte takes 4 bytes
# for 128 KiB, so 512 bytes inflate to at most 16 MiB in one call, counted before the next.
ZSTD_FEED = 512


def _padding(data: bytes, name: str) -> None:
    """Bytes after a gzip stream's last member: zero bytes (a tape's or a block device's
    padding) are read past, anything else is refused, where ``gzip -d`` only warns and the
    rows after it would be lost without a word (plain text, or a zstd frame, appended)."""
    if data.strip(b"\0"):
        raise InputError(f"{name}: bytes after the last gzip member that are not gzip (text or "
                         "another format appended?): give the file decompressed, or each part "
                         "on its own")


def _unzstd(first: bytes, rest: Iterator[bytes], name: str, bound: Bound) -> Iterator[bytes]:
    """zstd frames, one after another, inflated :data:`ZSTD_FEED` compressed bytes at a time
    (each frame's window at most :data:`ZSTD_WINDOW`), compressed bytes and frames bounded as
    gzip's bytes and members (frames that inflate to nothing read without end otherwise);
    a corrupt or cut one is one line saying so; without the zstandard module, one line saying
    how to read it."""
    try:
        import zstandard
    except ImportError:
        raise InputError(f"{name}: zstd-compressed, and the zstandard module is not installed "
                         "(pip install zstandard, or give it decompressed: zstd -dc FILE | "
                         "... --traffic -)") from None
    new = zstandard.ZstdDecompressor(max_window_size=ZSTD_WINDOW).decompressobj
    d, read, frames, most = new(), 0, 1, max(1, bound.bytes // MEMBER_BYTES)
    for whole in _chain(first, rest):
        read += len(whole)
        if read > bound.bytes:
            raise InputError(f"{name}: more than {_size(bound.bytes)} of zstd data read, the "
                             f"bound on a {bound.kind} ({bound.why})")
        at = 0
        while at < len(whole):
            data, at = whole[at:at + ZSTD_FEED], at + ZSTD_FEED
            while data:
                if d.eof:  # the next frame, counted as gzip's members are
                    frames += 1
                    if frames > most:
                        raise InputError(
                            f"{name}: a zstd stream of more than {most:,} frames (one per "
                            f"{_size(MEMBER_BYTES)} of the {_size(bound.bytes)} bound on a "
                            f"{bound.kind}; zstd writes far fewer)")
                    d = new()
                try:
                    out = d.decompress(data)
                except zstandard.ZstdError as exc:
                    raise InputError(f"{name}: a zstd file that cannot be decompressed ({exc})"
                                     ) from None
                if out:
                    yield out
                data = d.unused_data if d.eof else b""
    if not d.eof:
        raise InputError(f"{name}: a zstd file cut short (it ends inside a frame)")


def read_bytes(path: str, bound: Bound, name: str) -> bytes:
    """The whole content at ``path``, bounded (for a format read whole: JSON)."""
    return b"".join(chunks(path, bound, name))


def within(bound: Bound, name: str, count: int) -> None:
    """Refuses ``count`` lines of ``name`` past ``bound.lines`` (the one sentence for it)."""
    if bound.lines and count > bound.lines:
        raise InputError(f"{name}: more than {bound.lines:,} lines, the bound on a "
                         f"{bound.kind} ({bound.why})")


def lines(path: str, bound: Bound, name: str, start: tuple[int, int] = (0, 0)
          ) -> Iterator[tuple[int, bytes]]:
    """``(number, line)`` from 1, each without its ``\\n`` (nor a ``\\r`` before it), as they
    come; with ``start`` ``(offset, lines before it)``, from byte ``offset`` of a regular file
    that is not compressed, where a line starts, numbered on from the lines before it.  A
    content with no ``\\n`` at all but ``\\r`` has CR-only line endings and is split at
    ``\\r``.  A content ending in ``\\n`` ends with an empty line (as ``str.split``
    gives it, so that joined again the text is the content).  A line over
    :data:`LINE_BYTES` is refused, and more lines than ``bound.lines`` (counted before
    they are handed on: a file of newlines costs no more than its bound)."""
    pending, number, seen_newline, split_at_cr = b"", start[1], False, False
    for piece in chunks(path, bound, name, start[0]):
        pending += piece
        if b"\n" in pending:
            seen_newline = True
            *done, pending = pending.split(b"\n")
            within(bound, name, number + len(done))
            for line in done:
                number += 1
                _short(line, number, name)
                yield number, line[:-1] if line.endswith(b"\r") else line
        if len(pending) > LINE_BYTES:
            if not seen_newline and b"\r" in pending:  # CR-only: split it there
                split_at_cr = True
                *done, pending = pending.split(b"\r")
                within(bound, name, number + len(done))
                for line in done:
                    number += 1
                    _short(line, number, name)
                    yield number, line
            _short(pending, number + 1, name)
    if not seen_newline and (split_at_cr or b"\r" in pending):
        within(bound, name, number + pending.count(b"\r") + 1)
        for line in pending.split(b"\r"):
            number += 1
            _short(line, number, name)
            yield number, line
    elif pending or seen_newline:  # after a last "\n": the empty line str.split gives
        _short(pending, number + 1, name)
        yield number + 1, pending[:-1] if pending.endswith(b"\r") else pending


def _short(line: bytes, number: int, name: str) -> None:
    """Refuse line ``number`` when it is longer than :data:`LINE_BYTES` (a CR ending it not
    counted), wherever it ends: inside a chunk, at its end or at the content's end."""
    if len(line) - line.endswith(b"\r") > LINE_BYTES:
        raise InputError(f"{name}: line {number} is longer than {_size(LINE_BYTES)} (no line "
                         "of a log or a trace is)")
