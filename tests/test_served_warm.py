"""Six warm `vllm serve` replays on an H100 (2026-12-06): four on vLLM 0.31.0
(tests/recorded/serve/h100-warm-2026-12-06/), the HiSparse crash over HTTP on a server that
compiled nothing while it served, for a lone prompt (Azure) and for a prompt whose first block
was a prefix-cache hit (Mooncake), and the server's door; two on vLLM 0.34.0
(h100-warm-v034-2026-12-06/), the same two crashing replays served to their end.

Invariant: what each run's files say (run.json, vLLM's own error and step lines, the client's
answers) is what the tables below state; the model's crash for each crashed run is the same
step (requests and tokens) and within 1 % of the server's time (``recorded/serve_recordings.py``,
as ``scripts/serve_compare.py`` sets them side by side); a request the server answered HTTP 400
is one the model's door refuses.
"""

import json
import pathlib

import pytest

from hisparse_model.answers.arrivals import refused_at_door
from hisparse_model.inputs.iteration_log import count_iterations, read_iterations
from hisparse_model.inputs.stall_stacks import jit_warnings
from hisparse_model.recorded.serve_recordings import compare, read_run
from serve_recorded import unpack

HERE = pathlib.Path(__file__).parent
PACKED = [HERE / "recorded" / "serve" / "h100-warm-2026-12-06",
          HERE / "recorded" / "serve" / "h100-warm-v034-2026-12-06"]
TRACES = str(HERE / "traces")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The runner's packed folders, unpacked once."""
    return unpack(PACKED, tmp_path_factory.mktemp("warm"))


# run -> (server ready after s, HiSparse error logged at s, requests sent, S,
#         DeepGEMM cache files when ready, after the replay, steps logged, vLLM), from run.json
TABLE = {
    "x6warm2": (210.1, 31.262, 112, 143, 741, 741, 484, "0.31.0"),
    "mc1620": (107.1, None, 32, 1620, 789, 789, 4075, "0.31.0"),  # stopped at request 30's 400
    "x6s128": (79.1, None, 200, 128, 789, 789, 1250, "0.31.0"),   # every request answered
    "mc1620b": (77.1, 120.066, 35, 1620, 789, 789, 4617, "0.31.0"),
    # a fresh machine: DeepGEMM's 6,919 shapes compiled at start-up, 0 -> 740 files
    "x6v034": (512.3, None, 200, 143, 740, 740, 1496, "0.34.0"),
    # 39 requests the door accepts within 140 s (numbered among the accepted, as mc1620b's)
    "mc1620v034": (95.1, None, 39, 1620, 788, 788, 5331, "0.34.0"),
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_each_run_is_warm_and_what_the_table_says(runs, name):
    """Ready, crash, requests, S and the DeepGEMM cache's files from run.json; no file added
    and no jit_monitor warning during the replay (comparable); the steps run.json counts are
    the step lines the log holds, each of at least one token."""
    run = json.loads((runs / name / "run.json").read_text())
    cache = run["provenance"]["deep_gemm_cache"]
    got = (run["server_ready_after_s"], run["crash_logged_s"], run["requests_sent"],
           run["provenance"]["knobs"]["max_num_seqs"], cache["files_when_ready"],
           cache["files_after_replay"], run["iterations_logged"], run["provenance"]["vllm"])
    assert got == TABLE[name]
    assert run["comparable"] is True and run["deep_gemm_files_grew"] == 0
    assert run["jit_warnings_in_window"] == 0 and run["stall_cause"] is None
    assert "H100" in run["provenance"]["gpu"]
    assert run["provenance"]["deep_gemm_warmup"].startswith("vLLM's default")
    log = (runs / name / "server.log").read_text(errors="replace")
    steps = read_iterations(log)
    assert len(steps) == count_iterations(log) == TABLE[name][6]
    assert all(s.tokens >= 1 for s in steps)
    # async scheduling: vLLM times the step's scheduling alone (iteration_log.py)
    assert max(s.elapsed_ms for s in steps) < 1.0
    # every jit_monitor warning the log holds came before the replay (warm-up and passes)
    assert len(jit_warnings(log)) == run["jit_compilations_logged"]


# run -> (the step that died {request: tokens}, (stop, capacity), the model's kind)
CRASHES = {
    "x6warm2": ({72: 144}, (144, 143), "lone_prompt"),      # C = min(8192, 143) = 143
    "mc1620b": ({34: 1621}, (1621, 1620), "cached_prefix"),  # 2,133 - 512 cached = 1,621
}


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_the_model_crashes_on_the_servers_step_within_one_percent(runs, name):
    """The model's first crash for the replay (at the step time the server's own /metrics
    read before the replay) is the step the server died on, within 1 % of its time."""
    scheduled, stop_capacity, kind = CRASHES[name]
    got = compare(read_run(str(runs / name), TRACES))
    assert got["estimate"]["scheduled"] == got["observed"]["scheduled"] == scheduled
    assert got["observed"]["stop_capacity"] == stop_capacity
    assert got["estimate"]["kind"] == kind
    assert abs(got["estimate"]["crash_s"] - got["observed"]["crash_s"]) <= \
        0.01 * got["observed"]["crash_s"]


def test_a_server_that_never_crashes_answers_every_request(runs):
    """S 128 on the x6 Azure replay: the model finds no crash, and the server answered all
    200 requests 200."""
    got = compare(read_run(str(runs / "x6s128"), TRACES))
    assert got["estimate"]["crash_s"] is None and got["observed"]["crash_s"] is None
    rows = [json.loads(line) for line in (runs / "x6s128" / "client.jsonl").open()]
    assert len(rows) == 200 and {r["status"] for r in rows} == {200}


def test_the_servers_door_is_the_models(runs):
    """mc1620's request 30 (7,935 + 375 = 8,310 tokens > 8,192) was answered HTTP 400 in
    vLLM's words; the model's door refuses it, and every request the server answered 200
    passes the door."""
    rows = [json.loads(line) for line in (runs / "mc1620" / "client.jsonl").open()]
    (bad,) = [r for r in rows if r["status"] != 200]
    assert (bad["i"], bad["status"], bad["prompt_len"], bad["max_tokens"]) == (30, 400, 7935, 375)
    assert "maximum context length is 8192 tokens" in bad["error"]
    assert refused_at_door(bad["prompt_len"], bad["max_tokens"], 8192)
    assert not any(refused_at_door(r["prompt_len"], r["max_tokens"], 8192)
                   for r in rows if r["status"] == 200)


# run on 0.34.0 -> (its 0.31.0 twin, the twin's crashed request, its prompt tokens)
SERVED_ON_034 = {
    "x6v034": ("x6warm2", 72, 144),     # a lone 144-token prompt, C = 143
    "mc1620v034": ("mc1620b", 34, 2133),  # 2,133 tokens, 512 cached: 1,621 routed, C = 1,620
}


@pytest.mark.parametrize("name", sorted(SERVED_ON_034))
def test_034_serves_what_killed_031(runs, name):
    """The request whose batch killed 0.31.0 is answered 200 by 0.34.0 with every token it
    asked for, the same prompt, no HiSparse error is logged, every request is answered, and
    the model finds no crash for the replay (only 0.31.0's routing crashes)."""
    twin, i, prompt_len = SERVED_ON_034[name]
    rows = {r["i"]: r for r in map(json.loads, (runs / name / "client.jsonl").open())}
    twin_rows = {r["i"]: r for r in map(json.loads, (runs / twin / "client.jsonl").open())}
    assert rows[i]["prompt_len"] == twin_rows[i]["prompt_len"] == prompt_len
    assert twin_rows[i]["status"] != 200 and rows[i]["status"] == 200
    assert rows[i]["completion_tokens"] == rows[i]["max_tokens"]
    assert {r["status"] for r in rows.values()} == {200}
    assert "HiSparse swap rows exceed" not in (runs / name / "server.log").read_text(
        errors="replace")
    got = compare(read_run(str(runs / name), TRACES))
    assert got["estimate"]["crash_s"] is None and got["observed"]["crash_s"] is None
