"""Traces with their own arrival times: read in each documented format, replayed exactly.

Invariant: a trace's requests arrive at the engine step its own times say (divided by
``--speed``), in its order, every one once; a malformed row is refused in one line naming
the file, the row and the column.  Expected steps are computed here from the file's text
with ``datetime`` (Azure) or the raw milliseconds (Mooncake), not with ``traces.py``.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import re
import subprocess
import sys

import pytest

from hisparse_model import Knobs
from hisparse_model.answers.traffic_risk import TrafficError, estimate, generate, load_traffic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AZURE = os.path.join(ROOT, "tests", "traces", "azure-code-2023-excerpt.csv")
MOONCAKE = os.path.join(ROOT, "tests", "traces", "mooncake-conversation-excerpt.jsonl")
STEP_MS = 25.0


def _azure_steps(speed: float = 1.0) -> list[tuple[int, int, int]]:
    """(arrival step, prompt, output) from the CSV text: datetime, 6 of the 7 decimals (the
    7th is 0 on every row of the 2023 files), sorted by time."""
    rows = []
    with open(AZURE) as f:
        next(f)
        for line in f:
            stamp, n, m = line.strip().split(",")
            rows.append((dt.datetime.fromisoformat(stamp[:26]), int(n), int(m)))
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0]
    return [(int((t - t0).total_seconds() / speed / (STEP_MS / 1000)), n, m) for t, n, m in rows]


def _mooncake_steps() -> list[tuple[int, int, int]]:
    rows = [json.loads(line) for line in open(MOONCAKE)]
    rows.sort(key=lambda r: r["timestamp"])
    # ms -> step of 25 ms: timestamp // 25 (all of this excerpt's stamps are whole ms)
    return [(r["timestamp"] // 25, r["input_length"], r["output_length"]) for r in rows]


@pytest.mark.parametrize("path, expected, speed", [
    (AZURE, _azure_steps, 1.0),
    # twice as fast: every gap halved, so step floor(t / 2 / 25 ms)
    (AZURE, lambda: _azure_steps(2.0), 2.0),
    (MOONCAKE, _mooncake_steps, 1.0),
])
def test_a_trace_is_replayed_at_its_own_times(path, expected, speed):
    """Every request of the trace (all shorter than max_model_len 200,000), at its own step,
    in its order, over the minutes its times span."""
    traffic = load_traffic(path, speed=None if speed == 1.0 else speed)
    run = generate(traffic, 24 * 60, seed=0, step_ms=STEP_MS, max_model_len=200_000)
    assert list(run.requests) == expected() and run.refused == 0


def test_a_gzipped_trace_reads_as_the_plain_one(tmp_path):
    """Mooncake's release is gzipped: the same requests either way."""
    gz = tmp_path / "trace.jsonl.gz"
    gz.write_bytes(gzip.compress(open(MOONCAKE, "rb").read()))
    plain, zipped = load_traffic(MOONCAKE), load_traffic(str(gz))
    assert (plain.arrivals_s, plain.prompt_len, plain.max_tokens) == (
        zipped.arrivals_s, zipped.prompt_len, zipped.max_tokens)


def test_timed_json_lines_are_a_trace(tmp_path):
    """arrival_s, prompt_len and max_tokens (or output_len; 8 when absent), sorted stably."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 1.0, "prompt_len": 5, "output_len": 2}\n'
                    '{"arrival_s": 0.5, "prompt_len": 7}\n'
                    '{"arrival_s": 1.0, "prompt_len": 9, "max_tokens": 3}\n')
    run = generate(load_traffic(str(path)), 1, 0, STEP_MS, 320)
    # 0.5 s is the start: 0, then 0.5 s later = step 20 for both (file order kept)
    assert run.requests == ((0, 7, 8), (20, 5, 2), (20, 9, 3))


def test_rate_resamples_a_trace_and_a_seed_varies_it():
    """--rate: Poisson arrivals at R, lengths drawn from the trace's; seeds differ."""
    traffic = load_traffic(AZURE, rate_per_s=2.0)
    assert not traffic.replayed and traffic.rate_per_s == 2.0
    a, b = (generate(traffic, 2, seed, STEP_MS, 200_000) for seed in (0, 1))
    lengths = {n for _, n, _ in _azure_steps()}
    assert a.requests != b.requests and {n for _, n, _ in a.requests} <= lengths


def test_a_replay_is_one_run_whatever_the_seeds():
    """The trace fixes everything a seed would vary: --seeds 8 serves one replay."""
    est = estimate(Knobs(max_num_seqs=64, max_model_len=16384, host_pool_gib=512),
                   load_traffic(AZURE), 2, seeds=8)
    assert len(est.runs) == 1


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


AZ_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
MC = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'


@pytest.mark.parametrize("name, text, message", [
    # the header is row 1: the first data row is row 2
    ("a.csv", AZ_HEAD + "2023-11-16 18:17:03.97,12,3\n2023-11-16 25:00:00,12,3\n",
     "row 3 column TIMESTAMP: '2023-11-16 25:00:00' is not a time (YYYY-MM-DD HH:MM:SS"),
    ("a.csv", AZ_HEAD + "2023-11-16 18:17:03,twelve,3\n",
     "row 2 column ContextTokens: 'twelve' is not a whole number of tokens"),
    ("a.csv", AZ_HEAD + "2023-11-16 18:17:03,12,0\n",
     "row 2 column GeneratedTokens: 0 tokens; must be >= 1"),
    ("a.csv", AZ_HEAD + "2023-11-16 18:17:03,12\n", "row 2: 2 columns, the header has 3"),
    ("m.jsonl", MC + '{"timestamp": -5, "input_length": 3, "output_length": 1}\n',
     "line 2 timestamp: -5; a time is >= 0"),
    ("m.jsonl", MC + '{"timestamp": 5, "input_length": 3}\n', "line 2: no 'output_length'"),
    ("m.jsonl", MC + '{"timestamp": 5, "input_length": 3, "output_length": 1, '
     '"hash_ids": [1, 2]}\n',
     "line 2 hash_ids: 2 blocks, but input_length 3 fills 1 blocks of 512 tokens"),
    ("m.jsonl", MC + "[1, 2]\n", "line 2: not a JSON object"),
    ("t.jsonl", '{"arrival_s": 0, "prompt_len": 3}\n{"arrival_s": "soon", "prompt_len": 3}\n',
     "line 2 arrival_s: 'soon' is not a time (a finite number)"),
    ("t.jsonl", '{"arrival_s": 0, "prompt_len": 3}\n{"arrival_s": 1, "prompt_len": 2.5}\n',
     "line 2 prompt_len: 2.5 is not a whole number of tokens"),
])
def test_a_malformed_row_is_named_in_one_line(tmp_path, name, text, message):
    path = _write(tmp_path, name, text)
    with pytest.raises(TrafficError) as err:
        load_traffic(path)
    assert str(err.value) == f"trace {path} {message}" or \
        str(err.value).startswith(f"trace {path} {message}")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("args, message", [
    (dict(speed=0.0), "--speed 0: must be a number > 0"),
    (dict(speed=2.0, rate_per_s=1.0), "--speed 2 and --rate 1: give one"),
])
def test_speed_is_refused_where_it_cannot_apply(args, message):
    with pytest.raises(TrafficError, match=message.replace("+", r"\+")):
        load_traffic(AZURE, **args)


def test_speed_needs_a_trace_with_times(tmp_path):
    path = _write(tmp_path, "d.json", '{"rate_per_s": 1, "prompt_len": 5}')
    with pytest.raises(TrafficError, match="--speed 2: only a trace with arrival times"):
        load_traffic(path, speed=2.0)


@pytest.mark.parametrize("path, fmt", [(AZURE, "azure"), (MOONCAKE, "mooncake")])
def test_simulate_traffic_says_it_replays_the_trace(path, fmt):
    """The command line names the replay, its format and the one run."""
    out = subprocess.run([sys.executable, "-m", "hisparse_model", "simulate", "--traffic", path,
                          "--minutes", "1", "--max-num-seqs", "64", "--max-model-len",
                          "163840", "--host-pool-gib", "512", "--speed", "4"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert f"(the trace's own arrival times ({fmt}) sped up x4)" in out.stdout
    assert "one replay (the trace fixes every arrival and length" in out.stdout


def test_a_replayed_crash_is_written_and_replays_to_the_same_step(tmp_path):
    """S 33 (C = 33), max_model_len 8192: the Azure excerpt's 34-token prompt reaches an idle
    server at step 40 (1.0 s after the first request) and is a lone C + 1 prompt; the crash
    workload the replay writes crashes ``simulate --workload`` at that step, as the replay."""
    work = tmp_path / "crash.json"
    knobs = ["--max-num-seqs", "33", "--max-model-len", "8192"]
    out = subprocess.run([sys.executable, "-m", "hisparse_model", "simulate", "--traffic", AZURE,
                          "--minutes", "5", "--crash-workload", str(work), *knobs, "--json"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    (seed,) = json.loads(out.stdout)["seeds"]
    assert (seed["crash_step"], seed["kind"], seed["tokens"]) == (40, "lone_prompt", 34)
    # the requests of the excerpt that arrived by step 40, as the CSV's own times say
    arrived = [r for r in _azure_steps() if r[0] <= 40]
    written = json.loads(work.read_text())["requests"]
    assert [(r["arrival_step"], r["prompt_len"], r["max_tokens"]) for r in written] == arrived
    again = subprocess.run([sys.executable, "-m", "hisparse_model", "simulate", "--workload",
                            str(work), *knobs, "--json"], capture_output=True, text=True, cwd=ROOT)
    crash = json.loads(again.stdout)["crash"]
    assert crash["step"] == 40 and "stop=34, capacity=33" in crash["error"]


def test_shared_blocks_are_cached_and_a_cached_prefix_plus_c_plus_1_crashes(tmp_path):
    """Mooncake-style hash_ids, S 64 (C = 64, W = 65): request 1 (1,024 tokens, blocks 7 and
    8, 8 output tokens: its decode steps leave GPU copies of its pages, so a later hit is
    resident) fills the prefix cache; 10 s later request 2 (577 tokens, blocks 7 and 9) finds
    block 7 cached (512 tokens, 8 full 64-token KV blocks) and computes 577 - 512 = 65 = C + 1
    new tokens alone: 0.31.0 crashes with stop=65.  Its crash workload keeps the shared blocks
    and replays to the same step; without hash_ids (each prompt its own) nothing is cached
    and 577 > W goes all-resident."""
    lines = ['{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [7, 8]}',
             '{"timestamp": 10000, "input_length": 577, "output_length": 1, "hash_ids": [7, 9]}']
    shared = tmp_path / "shared.jsonl"
    shared.write_text("\n".join(lines) + "\n")
    alone = tmp_path / "alone.jsonl"
    alone.write_text("\n".join(line.split(', "hash_ids"')[0] + "}" for line in lines) + "\n")
    work = tmp_path / "crash.json"
    knobs = ["--max-num-seqs", "64", "--max-model-len", "4096"]
    out = subprocess.run([sys.executable, "-m", "hisparse_model", "simulate", "--traffic",
                          str(shared), "--minutes", "1", "--crash-workload", str(work), *knobs,
                          "--json"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    (seed,) = json.loads(out.stdout)["seeds"]
    # 10 s at 25 ms per step: request 2 arrives before step 400
    assert (seed["crash_step"], seed["kind"], seed["tokens"]) == (400, "cached_prefix", 65)
    written = json.loads(work.read_text())["requests"]
    assert [r["prompt_blocks"] for r in written] == [[7, 8], [7, 9]]
    again = subprocess.run([sys.executable, "-m", "hisparse_model", "simulate", "--workload",
                            str(work), *knobs, "--json"], capture_output=True, text=True, cwd=ROOT)
    crash = json.loads(again.stdout)["crash"]
    assert crash["step"] == 400 and "stop=65, capacity=64" in crash["error"]
    out = subprocess.run([sys.executable, "-m", "hisparse_model", "simulate", "--traffic",
                          str(alone), "--minutes", "1", *knobs, "--json"],
                         capture_output=True, text=True, cwd=ROOT)
    assert json.loads(out.stdout)["seeds"][0]["crash_step"] is None


@pytest.mark.parametrize("blocks, n", [
    ((7,), 64),  # one full KV block
    ((7,), 63),  # none full: no key
    ((7, 8, 9), 1500),  # 23 full KV blocks over three trace blocks
    ((999_999, 0), 600),  # the largest content id
])
def test_a_shared_block_prompt_keys_as_its_tokens_do(blocks, n):
    """The lazy keys of a BlockPrompt are the scheduler's keys of its explicit tokens."""
    from hisparse_model.schedule.prefix_keys import block_keys
    from hisparse_model.schedule.shared_prompts import BlockPrompt
    prompt = BlockPrompt(blocks, n)
    assert prompt.keys() == block_keys(tuple(prompt)) and len(prompt.keys()) == n // 64


@pytest.mark.parametrize("shared, n", [
    # equal first blocks: the keys agree for the shared 512 tokens (8 KV blocks), then differ
    ((7, 8), 8), ((7, 9), 8), ((6, 8), 0),
])
def test_prompts_share_exactly_the_blocks_their_ids_share(shared, n):
    from hisparse_model.schedule.shared_prompts import BlockPrompt
    a, b = BlockPrompt((7, 8), 1024).keys(), BlockPrompt(shared, 1024).keys()
    agree = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
    assert agree == (16 if shared == (7, 8) else n)


@pytest.mark.parametrize("request_, message", [
    ({"prompt_len": 600, "prompt_blocks": [1]},
     "request 1: 1 prompt_blocks, but prompt_len 600 fills 2 blocks of 512 tokens"),
    ({"prompt_len": 5, "prompt_blocks": [-1]}, "request 1: prompt_blocks must be a list"),
    ({"prompt_len": 5, "prompt_blocks": "7"}, "request 1: prompt_blocks must be a list"),
    ({"prompt_len": 5, "prompt_id": 3, "prompt_blocks": [1]},
     "request 1: prompt_blocks goes with prompt_len alone"),
])
def test_a_bad_prompt_blocks_is_refused_in_one_line(request_, message):
    from hisparse_model.schedule.workload import Workload, WorkloadError
    with pytest.raises(WorkloadError, match=re.escape(message)):
        Workload.from_json([request_])


@pytest.mark.parametrize("make", [
    lambda: __import__("hisparse_model.schedule.shared_prompts", fromlist=["x"]).BlockPrompt((5, 6), 600),
    lambda: __import__("hisparse_model.schedule.workload", fromlist=["x"]).DistinctPrompt(7, 600),
])
def test_a_lazy_prompt_is_the_tuple_of_its_tokens(make):
    """Indexing (negative, slices, past the end), iteration, equality with its own kind and
    with the tuple of its tokens, and the hash all agree with that tuple."""
    prompt = make()
    tokens = tuple(prompt[i] for i in range(len(prompt)))
    assert tuple(prompt) == tokens and len(tokens) == 600
    assert prompt[-1] == tokens[-1] and prompt[510:515] == tokens[510:515]
    with pytest.raises(IndexError):
        prompt[600]
    assert prompt == make() and prompt == tokens and prompt != tokens[:-1]
    assert hash(prompt) == hash(tokens) and prompt != 3
    assert type(prompt).__name__ in repr(prompt)


def test_block_prompts_of_other_blocks_differ():
    from hisparse_model.schedule.shared_prompts import BlockPrompt
    assert BlockPrompt((5, 6), 600) != BlockPrompt((5, 7), 600)
    # block 6's first token names it: 3000 + 6 // 1000, 4000 + 6 % 1000 at positions 512, 513
    assert BlockPrompt((5, 6), 600)[512:514] == (3000, 4006)
