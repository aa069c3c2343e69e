"""--from on a plain trace file (``inputs/trace_seek.py``): what can be sought, a probe's line,
and the window's start found by bisection.

Invariant: bisection returns a line start whose row, and every row before it, is before the
window, with the lines before it counted; anything it cannot read answers "read from here".
"""

import gzip
import os

import pytest

from hisparse_model.boundary.limits import LINE_BYTES
from hisparse_model.inputs import trace_seek
from hisparse_model.inputs.trace_seek import _line_after, _newlines, seekable, window_start


def test_what_can_be_sought(tmp_path):
    """A plain regular file yes; gzip, zstd, a FIFO (not opened: that would wait for its
    writer), a folder and a missing path no."""
    (tmp_path / "plain").write_bytes(b'{"arrival_s": 0}\n')
    (tmp_path / "gz").write_bytes(gzip.compress(b"x\n"))
    (tmp_path / "zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(8))
    os.mkfifo(tmp_path / "fifo")
    want = {"plain": True, "gz": False, "zst": False, "fifo": False, ".": False,
            "missing": False}
    assert {name: seekable(str(tmp_path / name)) for name in want} == want


# (file bytes, probe position, end) -> (offset, line) of the first whole line after it, or None
LINES = [
    (b"aa\nbb\ncc", 0, 8, (3, b"bb")),
    (b"aa\nbb\ncc", 4, 8, (6, b"cc")),  # the last line, no final newline
    (b"aa\r\nbb\r\n", 0, 8, (4, b"bb")),  # a CR before the newline is not the line's
    (b"aa\nbb\n", 4, 6, None),  # the next line starts at the end: none
    (b"aa\nbb\n", 3, 3, None),  # nothing to read before the end
    (b"a" * 10, 0, 10, None),  # no newline at all
    (b"a" * 10, 0, 100, None),  # nor before the file ends (short of the end asked for)
    (b"a\n" + b"b" * 100_000 + b"\nc\n", 0, 200_000, (2, b"b" * 100_000)),  # > one 64 KiB read
]


@pytest.mark.parametrize("data, pos, end, want", LINES)
def test_a_probe_reads_the_line_after_its_byte(tmp_path, data, pos, end, want):
    path = tmp_path / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _line_after(fd, pos, end) == want
    finally:
        os.close(fd)


def test_a_line_past_the_line_bound_is_no_probe(tmp_path):
    """Past LINE_BYTES without a newline, before or after the probe's byte: no line (the stream
    then reads it, and refuses it naming it)."""
    path = tmp_path / "long"
    path.write_bytes(b"a" * (LINE_BYTES + 70_000) + b"\nb\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _line_after(fd, 0, os.path.getsize(path)) is None
        path.write_bytes(b"a\n" + b"b" * (LINE_BYTES + 70_000) + b"\n")
        assert _line_after(fd, 0, os.path.getsize(path)) is None
        assert _newlines(fd, 0, 10 * os.path.getsize(path)) == 2  # past the end: what is there
    finally:
        os.close(fd)


def _times(path, n):
    path.write_bytes(b"".join(b"%d\n" % i for i in range(n)))
    return str(path)


def test_bisection_lands_before_the_window(tmp_path, monkeypatch):
    """Rows 0..9999 (one a line, its number its time): the offset returned is a line start
    before row 5000 and within SPAN of it, with its lines counted; rows no probe can read
    (bad UTF-8) are no answer, and a row a probe refuses names its line."""
    monkeypatch.setattr(trace_seek, "SPAN", 64)
    path = _times(tmp_path / "t", 10_000)
    before = lambda n, text: int(text) < 5000  # noqa: E731
    offset, lines = window_start(path, 0, before)
    data = open(path, "rb").read()
    assert data[:offset].count(b"\n") == lines and int(data[offset:].split(b"\n")[0]) < 5000
    assert 5000 - int(data[offset:].split(b"\n")[0]) < 64  # the span: some rows, not the file
    rows = data.split(b"\n")  # every other row bad UTF-8: about half the probes land on one
    raw = b"\n".join(b"\xff" + r[1:] if i % 2 and r else r for i, r in enumerate(rows))
    open(path, "wb").write(bytes(raw))
    ok = lambda n, text: text.isdigit() and int(text) < 5000  # noqa: E731
    offset, lines = window_start(path, 0, ok)
    assert bytes(raw[:offset]).count(b"\n") == lines
    assert all(not text.isdigit() or int(text) < 5000  # every row before it is before too
               for text in bytes(raw[:offset]).decode("utf-8", "replace").splitlines())

    def refuse(number, text):
        if int(text) > 2000:
            raise ValueError(f"line {number}: refused")
        return True

    path = _times(tmp_path / "u", 10_000)
    with pytest.raises(ValueError, match=r"line (\d+): refused") as got:
        window_start(path, 0, refuse)
    number = int(got.value.args[0].split()[1].rstrip(":"))
    assert open(path).read().splitlines()[number - 1] == str(number - 1)  # line N holds row N-1
