"""A trace replayed as a stream answers as the trace read whole.

Invariant: the streamed replay (rows pulled as the engine's clock reaches them, requests
forgotten once served) finds the whole replay's first crash -- the same engine step, error,
kind, tokens and requests arrived by it -- or, without one, serves and refuses the same
requests; a window is the same rows cut into their own file, a compressed trace the plain one.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import subprocess
import sys

import pytest

from hisparse_model.answers.stream_progress import progress_line
from hisparse_model.answers.stream_replay import StreamedTraffic, open_traffic
from hisparse_model.answers.traffic_risk import TrafficError, estimate, load_traffic
from hisparse_model.inputs import trace_seek
from hisparse_model.inputs.traces import TraceError
from hisparse_model.inputs.trace_stream import STREAM_BYTES
from hisparse_model.model.knobs import Knobs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AZURE = os.path.join(ROOT, "tests", "traces", "azure-code-2023-excerpt.csv")
MOONCAKE = os.path.join(ROOT, "tests", "traces", "mooncake-conversation-excerpt.jsonl")


def _timed(tmp_path, name: str, rows: int, seed: int, last: int | None = None,
           long_every: int = 0) -> str:
    """A timed JSON Lines trace: ``rows`` requests 0.2 s apart on average (prompts 10 to 60
    tokens, outputs 1 to 40), every ``long_every``-th a 9,000-token prompt asking 8,000 tokens
    (past max_model_len 16,384 with it: refused at the door), then ``last`` tokens alone 60 s
    after the rest (a lone prompt on an idle server)."""
    rng, t, lines = random.Random(seed), 0.0, []
    for i in range(rows):
        t += rng.expovariate(5.0)
        n, m = (9000, 8000) if long_every and i % long_every == long_every - 1 else (
            rng.randint(10, 60), rng.randint(1, 40))
        lines.append(json.dumps({"arrival_s": round(t, 4), "prompt_len": n, "max_tokens": m}))
    if last is not None:
        lines.append(json.dumps({"arrival_s": round(t + 60, 4), "prompt_len": last,
                                 "max_tokens": 4}))
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _burst(tmp_path) -> str:
    path = tmp_path / "burst.jsonl"
    path.write_text("".join(json.dumps({"arrival_s": 0.01 * i, "prompt_len": 6000,
                                        "max_tokens": 200}) + "\n" for i in range(200)))
    return str(path)


S33 = dict(max_num_seqs=33, max_model_len=8192)  # C = 33
S64 = dict(max_num_seqs=64, max_model_len=16384, host_pool_gib=512)  # C = 64
BIG = dict(max_num_seqs=1024, max_num_batched_tokens=8192, max_model_len=163840,
           host_pool_gib=512)  # C = 1,024: nothing in these traces passes it alone

# (trace, its knobs, --speed, --minutes): each replayed whole and streamed
CASES = [
    # the Azure excerpt's 34-token prompt reaches an idle S 33 server at step 40 (test_traces)
    (lambda tmp: AZURE, S33, None, 5),
    (lambda tmp: AZURE, S64, 4.0, 5),  # 4 times as fast: prompts arrive together
    (lambda tmp: MOONCAKE, S64, None, 5),  # hash_ids: shared blocks, prefix-cache hits
    (lambda tmp: MOONCAKE, BIG, None, 60),  # no crash: every row served and counted
    # 400 short requests served and forgotten, then a lone 65-token prompt (C + 1) 60 s later
    (lambda tmp: _timed(tmp, "late.jsonl", 400, 1, last=65), S64, None, 60),
    # every 7th refused at the door (9,000 + 8,000 > 16,384); no crash: counts compared
    (lambda tmp: _timed(tmp, "door.jsonl", 300, 2, long_every=7), S64, None, 60),
    # --minutes 0.5 stops the replay before the lone prompt at about 80 s + 60 s
    (lambda tmp: _timed(tmp, "cut.jsonl", 400, 3, last=65), S64, None, 0.5),
    # 200 prompts of 6,000 tokens 10 ms apart: 64 running hold 64 x (94 + 1) = 6,080 host
    # blocks or more, past a 2 GiB pool's 3,640: the model declines, naming the step
    (lambda tmp: _burst(tmp), dict(S64, host_pool_gib=2), None, 60),
]


def _answer(run) -> tuple:
    short = None if run.short is None else (str(run.short), run.short.step, run.short.need)
    counts = (run.served, run.refused) if run.crash_step is None else ()
    return (run.crash_step, run.error, run.kind, run.tokens, run.arrived, short, counts)


@pytest.mark.parametrize("make, knobs, speed, minutes", CASES)
def test_a_streamed_replay_answers_as_the_whole_one(tmp_path, make, knobs, speed, minutes):
    """Crash step, error, kind, tokens, arrived requests (and without a crash the requests
    served and refused) are the whole replay's."""
    path, k = make(tmp_path), Knobs(**knobs)
    try:
        whole = estimate(k, load_traffic(path, speed=speed), minutes, seeds=1).runs[0]
        want = _answer(whole)
    except ValueError as exc:  # the host pool's refusal: the stream must give the same
        want = str(exc)
    try:
        streamed = estimate(k, StreamedTraffic(path, speed), minutes, seeds=1).runs[0]
        got = _answer(streamed)
    except ValueError as exc:
        got = str(exc)
    assert got == want


def test_the_cases_cover_a_crash_a_survival_and_a_short_pool(tmp_path):
    """The table above is no table of one kind: crashes, survivals and a host-pool refusal."""
    kinds = set()
    for make, knobs, speed, minutes in CASES:
        try:
            run = estimate(Knobs(**knobs), load_traffic(make(tmp_path), speed=speed), minutes,
                           seeds=1).runs[0]
            kinds.add("crash" if run.crash_step is not None else "none")
        except ValueError:
            kinds.add("short")
    assert kinds == {"crash", "none", "short"}


def test_a_crash_at_the_first_row_reads_two_rows(tmp_path):
    """A lone 65-token prompt first (C + 1 at S 64): the replay reads it and the one after
    (its read-ahead), not the 5,000 rows behind them."""
    rows = [{"arrival_s": 0, "prompt_len": 65, "max_tokens": 4}] + [
        {"arrival_s": 1 + i, "prompt_len": 20, "max_tokens": 4} for i in range(5000)]
    path = tmp_path / "first.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    traffic = StreamedTraffic(str(path))
    run = estimate(Knobs(**S64), traffic, 60, seeds=1).runs[0]
    assert (run.crash_step, run.arrived, traffic.stream.rows) == (0, 1, 2)


# (--from, --to): the rows of trace time [from, to) of the 400-row trace (400 gaps of 0.2 s on
# average: about 80 s, then the lone prompt 60 s later)
WINDOWS = [(10.0, 30.0), (0.0, 5.0), (50.0, None), (20.0, 20.5)]


@pytest.mark.parametrize("span", [trace_seek.SPAN, 64], ids=["read", "bisected"])
@pytest.mark.parametrize("start, end", WINDOWS)
def test_a_window_is_its_rows_cut_into_their_own_file(tmp_path, monkeypatch, start, end, span):
    """The window's replay (rows before it dropped, or found by bisection, reading stopped
    past it, times from its first row) answers as those rows written alone, replayed whole.
    ``bisected``: the bisection's span cut to 64 bytes, so the 400-row file is sought."""
    monkeypatch.setattr(trace_seek, "SPAN", span)
    path = _timed(tmp_path, "w.jsonl", 400, 5, last=65)
    rows = [json.loads(line) for line in open(path)]
    t0 = rows[0]["arrival_s"]  # trace time counts from the first row
    cut = [r for r in rows if r["arrival_s"] - t0 >= start
           and (end is None or r["arrival_s"] - t0 < end)]
    own = tmp_path / "own.jsonl"
    own.write_text("".join(json.dumps(r) + "\n" for r in cut))
    k = Knobs(**S64)
    want = _answer(estimate(k, load_traffic(str(own)), 60, seeds=1).runs[0])
    window = StreamedTraffic(path, None, start, end)
    run = estimate(k, window, 60, seeds=1).runs[0]
    assert _answer(run) == want
    # read to its end without a crash; up to the crash and one more row with one
    assert window.stream.count == (len(cut) if run.crash_step is None else run.arrived)
    assert window.stream.handed == (len(cut) if run.crash_step is None else run.arrived + 1)
    # sought where the window starts past the first row (not for --from 0)
    assert (window.stream.seeked_bytes > 0) == (span == 64 and start > 0)


def _rows(path, start, end=None):
    stream = StreamedTraffic(path, None, start, end).stream
    return list(stream), stream


@pytest.mark.parametrize("make", [
    lambda tmp: AZURE,  # a header, wall-clock times in nanoseconds
    lambda tmp: MOONCAKE,  # milliseconds, hash_ids
    # Windows line endings and blank lines between the rows: the same rows
    lambda tmp: _write(tmp / "crlf.jsonl",
                       open(MOONCAKE).read().replace("\n", "\r\n\r\n").encode()),
], ids=["azure", "mooncake", "crlf-blank"])
def test_bisection_finds_the_rows_reading_finds(tmp_path, monkeypatch, make):
    """For windows all over a trace, the rows sought by bisection (span 64 bytes) are those
    read from the top, and so is each row's line number seen by a refusal."""
    path = make(tmp_path)
    for start in (0.5, 3.0, 17.0, 29.9, 60.0, 1e6):
        want, read = _rows(path, start)
        monkeypatch.setattr(trace_seek, "SPAN", 64)
        got, sought = _rows(path, start)
        monkeypatch.undo()
        assert got == want and sought.count == read.count, start
        assert sought.line == read.line  # the last line read, numbered from the top


def _write(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def test_a_refusal_after_a_seek_names_the_line_reading_names(tmp_path, monkeypatch):
    """A malformed row inside the window, and one a probe reads, are refused naming their
    line as read from the top; rows before the window no probe reads are not checked."""
    rows = [json.dumps({"arrival_s": i * 0.1, "prompt_len": 5, "max_tokens": 2})
            for i in range(400)]
    rows[300] = '{"arrival_s": 30.0, "prompt_len": 0, "max_tokens": 2}'  # line 301
    path = _write(tmp_path / "bad.jsonl", ("\n".join(rows) + "\n").encode())
    with pytest.raises(TraceError, match="line 301 prompt_len: 0 tokens"):
        _rows(path, 25.0)  # read from the top (the file is under the span)
    monkeypatch.setattr(trace_seek, "SPAN", 64)
    with pytest.raises(TraceError, match="line 301 prompt_len: 0 tokens"):
        _rows(path, 25.0)  # sought: the bad row is in the window
    with pytest.raises(TraceError, match="line 301 prompt_len: 0 tokens"):
        _rows(path, 35.0)  # past it, but within the last span read before the window
    rows[300] = rows[50].replace("5.0", "30.0")  # mended; line 51 broken instead (5.0 s)
    rows[50] = '{"arrival_s": 5.0, "prompt_len": 0, "max_tokens": 2}'
    path = _write(tmp_path / "bad.jsonl", ("\n".join(rows) + "\n").encode())
    got, stream = _rows(path, 35.0)  # far before the window: no probe reads it
    assert len(got) == 50 and stream.seeked_bytes > 0
    monkeypatch.undo()
    with pytest.raises(TraceError, match="line 51 prompt_len: 0 tokens"):
        _rows(path, 35.0)  # read from the top, it is


def _zstd(data: bytes) -> bytes:
    import zstandard  # a test dependency (pyproject.toml)
    return zstandard.ZstdCompressor().compress(data)


@pytest.mark.parametrize("compress", [gzip.compress, _zstd])
def test_a_compressed_trace_streams_as_the_plain_one(tmp_path, compress):
    """A gzip- or zstd-compressed trace streams the rows of the plain one."""
    path = tmp_path / "trace.jsonl.z"
    path.write_bytes(compress(open(MOONCAKE, "rb").read()))
    a, b = StreamedTraffic(MOONCAKE), StreamedTraffic(str(path))
    assert list(a.stream) == list(b.stream) and b.stream.handed == 200


def test_a_zstd_trace_without_zstandard_is_one_line(tmp_path, monkeypatch):
    """Without the zstandard module, the zstd magic bytes alone say what to do."""
    monkeypatch.setitem(sys.modules, "zstandard", None)
    path = tmp_path / "trace.jsonl.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 16)
    with pytest.raises(TrafficError, match="pip install zstandard"):
        open_traffic(str(path), start_s=0.0)


@pytest.mark.parametrize("text, message", [
    # a 401-digit prompt_len: its digits cut in the line (it printed all 400, with commas)
    ('{"arrival_s": 0, "prompt_len": 1' + "0" * 400 + '}\n',
     r"line 1 prompt_len: 1000000\d*\.\.\.0+ tokens; must be <= 10,485,760"),
    # the second row 1 s before the first: a stream cannot sort
    ('{"arrival_s": 2, "prompt_len": 5}\n{"arrival_s": 1, "prompt_len": 5}\n',
     "line 2: arrives before line 1; a trace over 1 MiB is replayed as a stream"),
    ('{"arrival_s": 0, "prompt_len": 5}\n{"arrival_s": 1, "prompt_len": 0}\n',
     "line 2 prompt_len: 0 tokens; must be >= 1"),
])
def test_a_streamed_row_is_refused_where_it_is_read(tmp_path, text, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as refused:
        list(StreamedTraffic(str(path)).stream)
    assert len(str(refused.value)) < 300  # one readable line, whatever the row held


@pytest.mark.parametrize("args, message", [
    (dict(rate=2.0, start_s=1.0), "--from/--to: a window of a trace replayed at its own times"),
    (dict(start_s=5.0, end_s=5.0), "--from 5 --to 5: an empty window"),
    (dict(start_s=0.0, whole=True), "--from/--to: the clock fitted by --step-cost-from-log"),
])
def test_a_window_is_refused_where_it_cannot_apply(args, message):
    with pytest.raises(TrafficError, match=message.replace("+", r"\+")):
        open_traffic(AZURE, **args)


@pytest.mark.parametrize("where", ["past the end", "between two rows"])
def test_a_window_with_no_row_is_refused_not_answered(tmp_path, where):
    """A window past the trace's end, or in the minute between its 400th row and its last,
    holds no request: refused in one line as the same (no) rows cut into their own file are
    ("no requests"), where it answered "crashed: 0 of 1 seeds" and passed --check."""
    path = _timed(tmp_path, "w.jsonl", 400, 5, last=65)
    times = [json.loads(line)["arrival_s"] for line in open(path)]
    gap = (times[-2] - times[0], times[-1] - times[0])  # 60 s with no row
    start, end = (gap[1] + 10, None) if where == "past the end" else (gap[0] + 1, gap[1] - 1)
    with pytest.raises(TrafficError, match=r"--from/--to: no row of traffic .* in the window"):
        estimate(Knobs(**S64), StreamedTraffic(path, None, start, end), 60, seeds=1)


def test_a_window_of_no_trace_is_refused(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('{"rate_per_s": 1, "prompt_len": 5}')
    with pytest.raises(TrafficError, match="is no trace with arrival times"):
        open_traffic(str(path), start_s=0.0)


@pytest.mark.parametrize("size, streamed", [
    (STREAM_BYTES - 1, False),  # at most 1 MiB: read whole, as before
    (STREAM_BYTES + 1, True),
])
def test_a_trace_over_one_mib_is_streamed(tmp_path, size, streamed):
    line = '{"arrival_s": 0, "prompt_len": 5}\n'
    path = tmp_path / "t.jsonl"
    path.write_text(line + " " * (size - len(line) - 1) + "\n")
    assert os.path.getsize(path) == size
    assert getattr(open_traffic(str(path)), "streamed", False) is streamed


def test_the_progress_line_says_rows_time_and_steps(tmp_path):
    """Rows read, trace time and the engine step, rewritten in place; cleared at the end."""
    traffic = StreamedTraffic(_timed(tmp_path, "p.jsonl", 10, 6))
    list(traffic.stream)
    out = io.StringIO()
    show = progress_line(traffic, out, after_s=0, every_s=0)
    show(1234)
    show(None)
    assert out.getvalue().startswith(f"\r{traffic.source}: 10 rows read, trace time ")
    assert "engine step 1,234" in out.getvalue() and out.getvalue().endswith("\r\x1b[K")


def test_a_streamed_replay_on_the_command_line(tmp_path):
    """Over 1 MiB: streamed, said so, the crash written as the whole replay writes it; with
    standard error not a terminal, no progress line."""
    # 20,000 requests 10 ms apart (to 200 s), a lone 65-token prompt (C + 1) at 230 s on an
    # idle server, 10,000 more from 260 s: over 1 MiB in all
    rows = [{"arrival_s": 0.01 * i, "prompt_len": 20, "max_tokens": 2} for i in range(20000)]
    rows += [{"arrival_s": 230, "prompt_len": 65, "max_tokens": 2}] + [
        {"arrival_s": 260 + 0.01 * i, "prompt_len": 20, "max_tokens": 2} for i in range(10000)]
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert os.path.getsize(path) > STREAM_BYTES
    outs = {}
    for whole in ("0", "1"):
        work = tmp_path / f"crash{whole}.json"
        out = subprocess.run([sys.executable, "-m", "hisparse_model", "simulate", "--traffic",
                              str(path), "--max-num-seqs", "64", "--max-model-len", "16384",
                              "--host-pool-gib", "512", "--crash-workload", str(work)],
                             capture_output=True, text=True, cwd=ROOT,
                             env={**os.environ, "HISPARSE_TRACE_WHOLE": whole})
        assert out.returncode == 0 and out.stderr == "", out.stderr
        outs[whole] = out.stdout, work.read_text()
    assert "read as a stream" in outs["0"][0] and "read as a stream" not in outs["1"][0]
    assert outs["0"][1] == outs["1"][1]  # the same requests to the crash, written alike
    crash = [line for line in outs["0"][0].splitlines() if "seed 0: crashed" in line]
    assert crash == [line for line in outs["1"][0].splitlines() if "seed 0: crashed" in line]
    # 230 s at 25 ms per step: engine step 9,200, after the 20,001 requests that arrived
    assert crash == ["  seed 0: crashed at 3.8 min (engine step 9200, a 65-token lone_prompt "
                     "step, after 20001 requests)"]


# (options on the Azure excerpt, 200 rows over 3.3 min, read as a stream with --from 0)
#   -> why the Served line says it stopped, and --json's stopped_at / read_to_end
# --to 3: the row past 3 s ends the window; --minutes 0.05 (3 s): the first row past it ends
# the replay; --minutes 10: every row read; S 143 x6 at 8.9 ms: request 72 crashes at 31 s.
STOPS = [
    (["--max-num-seqs", "128", "--to", "3"], "to the window's end (--to 3 s; the rest unread)",
     "the window's end", False),
    (["--max-num-seqs", "128", "--minutes", "0.05"], "to --minutes 0.05 (the rest unread)",
     "--minutes", False),
    (["--max-num-seqs", "128", "--minutes", "10"], "to the trace's end", "the trace's end",
     True),
    (["--max-num-seqs", "143", "--speed", "6", "--step-ms", "8.9"],
     "up to the crash (the rest unread)", "the crash", False),
]


@pytest.mark.parametrize("options, words, stopped, to_end", STOPS)
def test_the_served_line_says_why_the_replay_stopped(options, words, stopped, to_end):
    """A window's end is not the trace's end, nor is --minutes; a crash is said first."""
    base = [sys.executable, "-m", "hisparse_model", "simulate", "--max-num-batched-tokens",
            "8192", "--max-model-len", "8192", "--host-pool-gib", "6", "--traffic", AZURE,
            "--from", "0", *options]
    text = subprocess.run(base, cwd=ROOT, capture_output=True, text=True)
    served = next(line for line in text.stdout.splitlines() if line.startswith("Served:"))
    assert f"), {words};" in served, served
    got = json.loads(subprocess.run(base + ["--json"], cwd=ROOT, capture_output=True,
                                    text=True).stdout)["traffic"]["streamed"]
    assert got["stopped_at"] == stopped
    assert got["read_to_end"] is to_end


def test_a_trace_held_whole_says_its_replay_ended_at_the_crash():
    """Under 1 MiB and with no window the trace is held whole; its Served line says the crash
    ended the replay too (S 143 x6 at 8.9 ms: request 72 at 31 s of the trace's 33 s)."""
    out = subprocess.run([sys.executable, "-m", "hisparse_model", "simulate",
                          "--max-num-seqs", "143", "--max-num-batched-tokens", "8192",
                          "--max-model-len", "8192", "--host-pool-gib", "6", "--traffic", AZURE,
                          "--speed", "6", "--step-ms", "8.9", "--minutes", "1"],
                         cwd=ROOT, capture_output=True, text=True).stdout
    served = next(line for line in out.splitlines() if line.startswith("Served:"))
    assert served.startswith("Served: the whole trace (200 requests over 33 s, within "
                             "--minutes 1), up to the crash (the rest not served), one replay")


def _azure_seconds() -> list[float]:
    """The Azure excerpt's rows as seconds after its first (read here with csv and datetime,
    not the package's reader)."""
    import csv
    from datetime import datetime

    with open(AZURE, newline="") as f:
        stamps = [datetime.strptime(row["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f")
                  for row in csv.DictReader(f)]
    return [(t - stamps[0]).total_seconds() for t in stamps]


# (options after --from 0 unless a --from is given) -> (rows read, skipped, rows read ahead). A window [a, b) reads the rows before b, dropping those before a, and the one row
# at or past b that ends it; --minutes m (speed 1) reads the rows before 60 m and the first
# at or past it; the trace's end reads all 200 and none ahead.
def _before(s: float) -> int:
    return sum(1 for t in _azure_seconds() if t < s)


COUNTS = [
    (["--to", "3"], lambda: (_before(3) + 1, 0, 1)),
    (["--minutes", "0.05"], lambda: (_before(3) + 1, 0, 1)),
    (["--minutes", "10"], lambda: (200, 0, 0)),
    (["--from", "5", "--to", "182"], lambda: (_before(182) + 1, _before(5), 1)),
    # S 143 x6 at 8.9 ms: the crash on request 72 alone (the 73rd row; STOPS): 73 replayed,
    # the 74th read ahead
    (["--max-num-seqs", "143", "--speed", "6", "--step-ms", "8.9"], lambda: (74, 0, 1)),
]


@pytest.mark.parametrize("options, expected", COUNTS)
def test_the_rows_read_are_counted_as_read_skipped_and_read_ahead(options, expected):
    """rows_read = the rows skipped before the window + those replayed (served or refused at
    the door) + the one read ahead where the replay stopped before the trace's end, and the
    Served line says each part."""
    where = [] if "--from" in options else ["--from", "0"]
    base = [sys.executable, "-m", "hisparse_model", "simulate", "--max-num-seqs", "128",
            "--max-num-batched-tokens", "8192", "--max-model-len", "8192", "--host-pool-gib",
            "6", "--traffic", AZURE, *where, *options]
    rows, skipped, ahead = expected()
    got = json.loads(subprocess.run(base + ["--json"], cwd=ROOT, capture_output=True,
                                    text=True).stdout)["traffic"]["streamed"]
    assert (got["rows_read"], got["rows_skipped_before_window"], got["rows_read_ahead"]) \
        == (rows, skipped, ahead)
    assert got["rows_read"] == skipped + got["rows_replayed"] + ahead
    served = next(line for line in subprocess.run(base, cwd=ROOT, capture_output=True,
                                                  text=True).stdout.splitlines()
                  if line.startswith("Served:"))
    assert f"{rows:,} rows read (to trace time " in served
    assert (f"; {skipped:,} before the window, skipped" in served) == bool(skipped)
    assert ("; the last read ahead of the clock, not served)" in served) == bool(ahead)
