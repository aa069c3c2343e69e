"""Streamed traces at production size, from one run: ``python scripts/bench_streamed_trace.py``.

Generates a Mooncake-format trace of ``--mb`` MB (default 60: about 190,000 rows) whose first
request is a lone 1,025-token prompt, so a server at S 1,024 (C = 1,024) crashes at engine
step 0, and times ``hisparse simulate --traffic`` on it in a child process (wall seconds and
peak RSS from ``getrusage``): streamed (the default for a trace over 1 MiB) and, for the
ratio, read whole (``HISPARSE_TRACE_WHOLE=1``, the reader before issue 63).  ``--no-crash``:
the same trace with its first prompt cut to 1,000 tokens, on the same server, replayed to
the end of ``--minutes`` (rows per second reported).  ``--window-s W``: the trace's last
``W`` seconds replayed as a window (``--from``/``--to``: the rows before it found by bisection)
against the same rows cut into a file of their own (the issue's goal: the window within 1.2
times the file's time).  Nothing here asserts a time; it reports.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KNOBS = ["--max-num-seqs", "1024", "--max-num-batched-tokens", "8192", "--max-model-len",
         "163840", "--host-pool-gib", "512", "--step-ms", "10"]


def write_trace(path: str, mb: float, first: int = 1025, seed: int = 0) -> int:
    """A Mooncake-format trace of about ``mb`` MB: row 1 ``first`` tokens at 0 ms alone, then
    rows from 1 s on, 40 ms apart on average, prompts 100 to 30,000 tokens (hash_ids one per
    512 tokens, a tenth of them sharing a first block), outputs 1 to 800.  Returns its rows."""
    rng = random.Random(seed)
    limit, size, rows, t, next_id = mb * 1e6, 0, 0, 1000, 10
    with open(path, "w") as f:
        def put(obj):
            nonlocal size, rows
            line = json.dumps(obj) + "\n"
            f.write(line)
            size, rows = size + len(line), rows + 1
        put({"timestamp": 0, "input_length": first, "output_length": 8,
             "hash_ids": list(range(-(-first // 512)))})
        while size < limit:
            n = rng.randint(100, 30_000)
            blocks = -(-n // 512)
            ids = [0] if rng.random() < 0.1 else []
            ids += list(range(next_id, next_id + blocks - len(ids)))
            next_id += blocks
            if next_id > 990_000:  # block ids are below 1,000,000: old contents come back
                next_id = 10
            put({"timestamp": t, "input_length": n, "output_length": rng.randint(1, 800),
                 "hash_ids": ids})
            t += int(rng.expovariate(1 / 40))
    return rows


def measure(argv: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MB, the first line of its answer) of one child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "hisparse_model", *argv], capture_output=True,
                         text=True, cwd=REPO, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if rss <= before:
        rss = float("nan")  # a child under the previous peak: getrusage keeps the maximum
    said = out.stdout.strip() if out.stdout.startswith("{") else next(
        (line.strip() for line in out.stdout.splitlines() if "crashed" in line
         or "Crashed" in line), out.stderr.strip()[-200:])
    return wall, rss / 1024, said


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=60.0)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--whole", action="store_true", help="also time the whole read (slow)")
    ap.add_argument("--no-crash", action="store_true")
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--window-s", type=float, default=None,
                    help="time the trace's last WINDOW_S seconds as a window and as a file")
    args = ap.parse_args(argv)
    path = os.path.join(args.dir, f"mc_{args.mb:g}mb{'_nocrash' if args.no_crash else ''}.jsonl")
    if not os.path.exists(path):
        rows = write_trace(path, args.mb, 1000 if args.no_crash else 1025)
        print(f"wrote {path}: {rows:,} rows, {os.path.getsize(path) / 1e6:.1f} MB")
    cmd = ["simulate", *KNOBS, "--traffic", path, "--minutes", f"{args.minutes:g}"]
    if args.no_crash:  # 512 GiB (KNOBS) holds the requests in flight, finished ones freed
        cmd += ["--json"]
    if args.window_s:
        return window(path, args.window_s)
    runs = [("streamed", {})] + ([("whole", {"HISPARSE_TRACE_WHOLE": "1"})] if args.whole else [])
    got = {}
    for name, env in runs:
        wall, rss, said = measure(cmd, env)
        got[name] = (wall, rss)
        if args.no_crash and said.startswith("{"):
            rows = json.loads(said)["traffic"].get("streamed", {}).get("rows_read", 0)
            said = f"{rows:,} rows read, {rows / wall:,.0f} rows/s"
        print(f"{name}: {wall:.2f} s, peak RSS {rss:.0f} MB: {said}")
    if "whole" in got:
        (sw, sr), (ww, wr) = got["streamed"], got["whole"]
        print(f"ratios whole / streamed: time x{ww / sw:.1f}, peak RSS x{wr / sr:.1f}")
    return 0


def window(path: str, seconds: float) -> int:
    """The last ``seconds`` of the trace at ``path`` as a window and as its own file."""
    with open(path, "rb") as f:
        first = json.loads(f.readline())["timestamp"]
        f.seek(max(0, os.path.getsize(path) - 65536))
        last = json.loads(f.read().splitlines()[-1])["timestamp"]
    start = (last - first) / 1000 - seconds
    own = path + f".last{seconds:g}s.jsonl"
    with open(path) as f, open(own, "w") as out:
        for line in f:
            if (json.loads(line)["timestamp"] - first) / 1000 >= start:
                out.write(line)
    base = ["simulate", *KNOBS, "--minutes", "10080", "--json"]
    got = {}
    for name, argv in (("window", [*base, "--traffic", path, "--from", f"{start:.3f}"]),
                       ("own file", [*base, "--traffic", own])):
        wall, rss, said = measure(argv)
        if not said.startswith("{"):
            print(f"{name}: {said}")
            return 1
        got[name] = wall
        rows = json.loads(said)["requests"]
        print(f"{name}: {wall:.2f} s, peak RSS {rss:.0f} MB, {rows} requests")
    print(f"ratio window / own file: x{got['window'] / got['own file']:.2f} (goal: under 1.2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
