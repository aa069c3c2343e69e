"""A log's text as the readers of logs take it (``check --from-log``, ``explain --file``).

One reader for both, so that a log reads the same wherever it is given:

* from a file, a FIFO or (``-``) standard input, at most the input boundary's bound on a
  log (``boundary/limits.py``); an unreadable or too large file is one line naming it;
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

from ..boundary.files import lines
from ..boundary.limits import LOG

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # CSI sequences: colours, cursor moves


def read_log(path: str) -> str:
    """The text of the log at ``path`` (``-``: standard input), as the module docstring says:
    read line by line through the input boundary (at most ``LOG.bytes``, each line bounded)."""
    where = "standard input" if path == "-" else path
    return "\n".join(ANSI.sub("", line.decode("utf-8", "replace"))
                     for _, line in lines(path, LOG, f"log {where}"))
