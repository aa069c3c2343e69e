"""Every bound the input boundary holds, declared once with the reason it is where it is.

The README's "Bounds" table is these values; ``tests/test_boundary.py`` checks each against
a file, stream or server just past it.
"""

from __future__ import annotations

from typing import NamedTuple

MIB = 2**20
CHUNK = MIB  # bytes read (and decompressed) at a time: what a reader holds beyond its input


class Bound(NamedTuple):
    """A size an input of one kind may have, and why."""

    kind: str  # the input, as the refusal names it
    bytes: int  # the most it may hold (decompressed, for a gzip file)
    why: str
    lines: int = 0  # the most lines it may hold, read line by line (0: read whole)


# Per kind of file, its whole size (a gzip file's decompressed size).
LOG = Bound("log", 128 * MIB, "a day of a busy vllm serve's INFO log is tens of MiB; give a "
            "larger log's start-up (head -n 5000) or its tail (tail -n 100000)", 2_000_000)
TRACE = Bound("trace", 64 * MIB, "200,000 requests in the largest format (Mooncake's JSON "
              "Lines with hash_ids) take about 50 MiB; the public traces are 3 MiB and less",
              400_000)
# A trace replayed as a stream (inputs/trace_stream.py) holds the requests in flight, not the
# file: bounded by what it reads (and inflates), a week of a busy service's requests.
TRACE_STREAM = Bound("streamed trace", 8 * 1024 * MIB, "a week of the public Azure 2024 "
                     "traces is some GiB uncompressed; a replay holds the requests in flight, "
                     "not the file; replay a window with --from/--to")
JSON = Bound("JSON file", 16 * MIB, "a workload of 100,000 requests or any engine-args file "
             "fits in a few MiB")
METRICS = Bound("/metrics body", 16 * MIB, "a vLLM server's /metrics is some 100 KiB")
RECORDING = Bound("recording", 64 * MIB, "the largest committed recording is some MiB")
STEPS = Bound("calibration file", 256 * MIB, "a served engine's timer writes some 170 bytes a "
              "batch: an hour at 300 batches a second is about 180 MiB", 1_500_000)

LINE_BYTES = 4 * MIB  # one line of a log or a trace: a start-up's config line is ~10 KiB
TRACE_ROWS = 200_000  # requests in one trace: the public traces have 8,819 and 12,031
HTTP_SECONDS = 15.0  # one whole /metrics request: connect, headers and body
