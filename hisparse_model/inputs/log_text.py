"""A log's text as the readers of logs take it (``check --from-log``, ``explain --file``).

One reader for both, so that a log reads the same wherever it is given:

* from a file or (``-``) standard input; an unreadable file is one line naming it;
* gzip-compressed (``serve.log.gz``, as log rotation leaves it) is read decompressed; a
  truncated or corrupt one is one line saying so;
* lines split at ``\\n`` only (as ``grep -n`` numbers them: a progress bar's ``\\r`` starts no
  line), except in a log that has no ``\\n`` at all, whose ``\\r`` end its lines (CR-only
  line endings);
* terminal colour codes (ANSI escape sequences, as a terminal's captured output holds) are
  removed, so a coloured value reads as the value;
* bytes that are not UTF-8 are replaced (a log is read, not judged).
"""

from __future__ import annotations

import re
import sys
import zlib

GZIP_MAGIC = b"\x1f\x8b"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # CSI sequences: colours, cursor moves


def read_log(path: str) -> str:
    """The text of the log at ``path`` (``-``: standard input), as the module docstring says."""
    if path == "-":
        data = sys.stdin.buffer.read() if sys.stdin else b""
        where = "standard input"
    else:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ValueError(f"log {path}: {exc.strerror or exc}") from None
        where = path
    if data.startswith(GZIP_MAGIC):
        try:
            data = zlib.decompress(data, wbits=31)  # 31: a gzip header and trailer
        except zlib.error as exc:
            raise ValueError(f"log {where}: a gzip file that cannot be decompressed ({exc})"
                             ) from None
    text = data.decode("utf-8", "replace")
    if "\n" not in text and "\r" in text:  # CR-only line endings
        text = text.replace("\r", "\n")
    return ANSI.sub("", text)
