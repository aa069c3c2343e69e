"""The served replay (engine/serve_run.py): a real ``vllm serve`` is sent exactly the requests the
model serves, warmed without a step of C + 1 tokens, given a host pool that holds the whole
replay, and its end (crash, stall) is noticed; its H200 runs say what tests/recorded/serve/README.md
says they say."""

import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from hisparse_model.answers.simulate import simulate
from hisparse_model.answers.traffic_risk import first_crash, generate
from hisparse_model.engine import serve_run, serve_warm
from hisparse_model.engine.serve_cli import ServeFlagsError, serve_flags
from hisparse_model.engine.serve_process import (catches, dump_stacks, server_pids,
                                                 stack_dump_env, stop_server)
from hisparse_model.inputs.startup_log import from_log
from hisparse_model.inputs.traces import read_trace
from hisparse_model.inputs.traffic_file import load_traffic
from hisparse_model.model.host_pool import host_blocks
from hisparse_model.model.knobs import Knobs
from hisparse_model.model.kv_layout import layout
from same_engine import assert_same_engine
from hisparse_model.model.plan import plan
from hisparse_model.schedule.scheduler import schedule
from hisparse_model.schedule.scheduler_config import scheduler_config
from hisparse_model.schedule.workload import DistinctPrompt, Request, Workload

from serve_recorded import H100_1GIB, H100_5GIB, HERE, TRACE, X4, X6, sample



def knobs(s: int, **kw) -> Knobs:
    return Knobs(vllm_version="0.31.0", max_num_seqs=s, max_model_len=8192,
                 max_num_batched_tokens=8192, **kw)


# --- the command line -------------------------------------------------------------------------

# (knobs, flag, its value): every engine argument of the reproduction reaches vllm serve
FLAG_ROWS = [
    (knobs(143), "--max-num-seqs", "143"),
    (knobs(143), "--max-num-batched-tokens", "8192"),
    (knobs(143), "--max-model-len", "8192"),
    (knobs(143), "--block-size", "64"),  # the reproduction's 64-token blocks
    (knobs(143), "--load-format", "dummy"),
    (knobs(143), "--gpu-memory-utilization", "0.3"),
    (knobs(143), "--attention-config", '{"hisparse_config": {}}'),
    (knobs(2, enforce_eager=True), "--enforce-eager", None),
    (knobs(2, num_gpu_blocks_override=100), "--num-gpu-blocks-override", "100"),
    (knobs(2, enable_prefix_caching=False), "--no-enable-prefix-caching", None),
    (knobs(2, cudagraph_mode="PIECEWISE"), "--compilation-config",
     '{"cudagraph_mode": "PIECEWISE"}'),
]


@pytest.mark.parametrize("k,flag,value", FLAG_ROWS)
def test_serve_flags_carry_each_engine_argument(k, flag, value):
    """The served engine is the offline reproduction's: each llm_kwargs entry has its flag."""
    argv = serve_flags(k, "/tmp/deepseek-v3.2-tiny", 8100)
    assert argv[0] == "/tmp/deepseek-v3.2-tiny" and flag in argv
    if value is not None:
        assert argv[argv.index(flag) + 1] == value
    assert "--skip-tokenizer-init" in argv  # token ids in, no tokenizer in the model folder


def test_serve_flags_size_the_host_pool_and_refuse_mtp():
    """The host pool is the knob's (the reproduction's 1 GiB by default); MTP is refused in
    one line."""
    pool = lambda argv: json.loads(argv[argv.index("--kv-transfer-config") + 1])[
        "kv_connector_extra_config"]["host_pool_gib"]
    assert pool(serve_flags(knobs(4), "m", 1)) == 1
    assert pool(serve_flags(knobs(4, host_pool_gib=5), "m", 1)) == 5
    with pytest.raises(ServeFlagsError, match="^num_speculative_tokens: "):
        serve_flags(knobs(4, num_speculative_tokens=1), "m", 1)


# --- the warm-up cannot crash the server it warms ----------------------------------------------

WARM_S = [1, 2, 7, 33, 143, 256, 1024]


@pytest.mark.parametrize("s", WARM_S)
def test_warm_waves_never_compute_c_plus_1_tokens(s):
    """Every warm-up prompt is longer than C + 1 and a wave fits one step's budget B (so no
    prompt is chunked): no step can compute exactly C + 1 tokens; the model's own scheduler and
    routing agree whatever order and spacing the wave's requests arrive in."""
    k = knobs(s)
    c = min(8192, s)  # C = min(B, S * q), q = 1
    waves = serve_warm.warm_waves(k)
    assert waves, "at least one wave"
    for p, count in waves:
        assert p > c + 1 and count * (p + serve_warm.WARM_TOKENS) <= 8192 and count <= s
    for p, count in waves:
        ids = range(serve_warm.WARM_ID, serve_warm.WARM_ID + count)
        for arrival in (lambda j: 0, lambda j: j, lambda j: 3 * (count - j)):
            work = Workload(tuple(Request(DistinctPrompt(i, p), serve_warm.WARM_TOKENS,
                                          arrival(j)) for j, i in enumerate(ids)))
            assert first_crash(k, work) is None, (p, count)


# (S, the chunk wave): p = (B - 1) // 2 = 4,095; 3p - B = 12,285 - 8,192 = 4,093 > C = min(B, S)
CHUNK_ROWS = [
    (1, None),            # fewer than 3 sequences: no wave of three
    (2, None),
    (7, (4095, 3)),
    (143, (4095, 3)),     # C = 143: the tail step computes 4,093 + 2 = 4,095 tokens
    (1024, (4095, 3)),    # C = 1,024 < 4,093
    (4096, None),         # C = 4,096 >= 4,093: a tail could be C + 1
]


@pytest.mark.parametrize("s,wave", CHUNK_ROWS)
def test_the_chunk_wave_chunks_a_prompt_and_never_computes_c_plus_1(s, wave):
    """The chunked-prefill warm-up wave: where it exists, three prompts sent at once make the
    model's scheduler chunk one (first part B - 2p, tail 3p - B beside two decodes), and no
    order or spacing of their arrivals makes a step the model routes to the crash."""
    k = knobs(s)
    assert serve_warm.chunk_wave(k) == wave
    if wave is None:
        return
    p, count = wave
    ids = range(serve_warm.WARM_ID, serve_warm.WARM_ID + count)
    for arrival in (lambda j: 0, lambda j: j, lambda j: 3 * (count - j), lambda j: 2 * (j // 2)):
        work = Workload(tuple(Request(DistinctPrompt(i, p), serve_warm.WARM_TOKENS, arrival(j))
                              for j, i in enumerate(ids)))
        assert first_crash(k, work) is None, arrival
    together = Workload(tuple(Request(DistinctPrompt(i, p), serve_warm.WARM_TOKENS, 0)
                              for i in ids))
    steps = schedule(scheduler_config(k, plan(k)), together)
    assert steps[0].num_tokens == 8192  # 4,095 + 4,095 + the third's first 2 tokens
    assert steps[1].num_tokens == 3 * p - 8192 + 2 == 4095  # its tail and two decodes


def test_each_warm_up_pass_computes_its_prompts():
    """A later warm-up pass sends prompts no earlier pass sent (no prefix-cache hit makes its
    /metrics interval cheaper than the replay's steps): ids are WARM_ID + pass x 1,000 + j,
    and a pass holds fewer than 1,000 prompts."""
    per_pass = sum(count for _, count in serve_warm.warm_requests(knobs(143)))
    assert per_pass == 26 + 15 + 4 + 1 + 3 < serve_warm.WARM_PASS_IDS


# --- the host pool ------------------------------------------------------------------------------

def test_host_blocks_are_what_the_served_h200_log_says():
    """The host pool's blocks for 1 GiB are the count the served engine logged."""
    text = (X6 / "server.log").read_text()
    (blocks,) = re.findall(r"HiSparse HMA: 1\.0 GiB host source \((\d+) blocks\)", text)[:1]
    assert host_blocks(1, layout(Knobs())) == int(blocks) == 1820
    # 1,820 blocks x 64 tokens: the KV capacity the engine reported
    assert "GPU KV cache size: 116,480 tokens" in text


def test_the_host_pool_holds_the_whole_replay():
    """host_pool_gib_for gives a pool holding every request of the replay and of the warm-up
    at once: the trace's 6,651 blocks (summed here from the file) and the warm-up's."""
    rows = read_trace(TRACE).requests
    trace_blocks = sum(-(-(r.prompt_len + r.output_len) // 64) for r in rows)
    assert trace_blocks == 6651  # 3.65 GiB at 589,824 bytes a block
    k = knobs(143)
    warm = sum(c * -(-(p + serve_warm.WARM_TOKENS) // 64) for p, c in serve_warm.warm_requests(k))
    # 26 x 5 + 15 x 9 + 4 x 32 + 1 x 110 + 3 x 65 (the chunk wave: 4,119 tokens) = 698 blocks
    assert warm == 698
    gib = serve_run.host_pool_gib_for(serve_run.requests_of(TRACE, 4, k, 240), k)
    assert host_blocks(gib, layout(Knobs())) >= trace_blocks + warm + 2
    # (6,651 + 698 + 2) x 589,824 = 4.04 GiB: ceil 5, + 1 spare
    assert gib == 6


# --- the requests sent are the model's ------------------------------------------------------------

@pytest.mark.parametrize("speed", [1.0, 4.0])
def test_replayed_requests_are_the_workload_the_model_serves(speed):
    """Request i carries the token ids, output length and arrival the model gives request i."""
    k = knobs(143)
    sent = serve_run.requests_of(TRACE, speed, k, 240)
    model = generate(load_traffic(TRACE, speed=speed), 4.0, 0, 10.0, 8192).workload()
    assert len(sent) == len(model.requests) == 200
    for r, m in zip(sent, model.requests):
        assert tuple(r["prompt"]) == tuple(m.prompt_token_ids)
        assert r["max_tokens"] == m.max_tokens
        assert int(r["due_s"] / 0.010) == m.arrival_step  # 10 ms steps
    assert len({tuple(r["prompt"][:2]) for r in sent}) == 200  # no two share a first block


# --- the client against a loopback stand-in ------------------------------------------------------

def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stub(tmp_path, mode: str, n: int):
    port, log = _port(), tmp_path / "server.log"
    server = subprocess.Popen([sys.executable, str(HERE / "serve_stub.py"), str(port), mode,
                               str(n)], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                              env=stack_dump_env({**os.environ, "PYTHONFAULTHANDLER": "1"}),
                              start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        if serve_run.http(f"{base}/health", timeout=1)[0] == 200:
            return server, base, log
        time.sleep(0.05)
    raise AssertionError("the stub did not start")


def test_stacks_are_asked_only_of_processes_that_catch_the_signal(tmp_path):
    """dump_stacks sends SIGUSR2 only where a handler is installed (SigCgt): a process of the
    server's session without one (a compiler the engine waits on) is not killed by it, and
    the Python process that loaded the sitecustomize prints its stacks and goes on."""
    script = ("import subprocess, time; subprocess.Popen(['sleep', '30']); "
              "print('ready', flush=True); time.sleep(30)")
    server = subprocess.Popen([sys.executable, "-c", script], env=stack_dump_env(dict(os.environ)),
                              stdout=subprocess.PIPE, stderr=open(tmp_path / "err.log", "w"),
                              start_new_session=True)
    try:
        assert server.stdout.readline().strip() == b"ready"
        (sleeper,) = [pid for pid in server_pids(server) if pid != server.pid]
        assert catches(server.pid, signal.SIGUSR2) and not catches(sleeper, signal.SIGUSR2)
        dump_stacks(server, gap=0.1)
        state = open(f"/proc/{sleeper}/stat").read().rsplit(")", 1)[1].split()[0]
        assert server.poll() is None and state != "Z"  # both alive (a killed child: a zombie)
        assert "most recent call first" in (tmp_path / "err.log").read_text()
    finally:
        stop_server(server)


def test_an_answer_cut_mid_body_is_status_0_not_a_thread_exception():
    """A server that promises 38 bytes and hangs up after none (a server being stopped): the
    client's request is answered (0, "IncompleteRead: ...") like any other failed request,
    so the /metrics reader's thread does not die of it."""
    from loopback import Loopback

    def cut(h):
        h.send_response(200)
        h.send_header("Content-Length", "38")
        h.end_headers()
        h.wfile.flush()
        h.close_connection = True
        h.connection.shutdown(socket.SHUT_RDWR)

    with Loopback(cut) as server:
        status, text = serve_run.http(server.url, timeout=5)
    assert status == 0 and text.startswith("IncompleteRead")


def test_a_logged_crash_ends_the_replay_and_each_row_is_written_as_it_ends(tmp_path):
    """The 34-token prompt (request 4 at S 33) makes the stand-in log the HiSparse error: the
    replay notes when, ends, and client.jsonl already holds every answered request."""
    server, base, log = _stub(tmp_path, "crash", 34)
    try:
        reqs = serve_run.requests_of(TRACE, 4, knobs(33), 5)
        replay = serve_run.Replay(base, str(tmp_path), reqs, 1.0)
        why = replay.run(server, 5, 0.3, str(log), stall=30)
        rows = [json.loads(line) for line in open(tmp_path / "client.jsonl")]
    finally:
        stop_server(server)
    assert why in ("the server logged the HiSparse error", "a request failed")
    assert replay.crash_logged is not None and replay.first_failure is not None
    # the first 34-token request (rows are written as they end: a later one may end first)
    crashed = min((r for r in rows if r["prompt_len"] == 34), key=lambda r: r["i"])
    assert crashed["i"] == 4 and crashed["status"] == 500
    assert all(r["status"] == 200 for r in rows if r["i"] < 4)
    assert (tmp_path / "metrics-0.txt").exists()


def test_a_stall_dumps_the_server_stacks_and_the_replay_goes_on(tmp_path):
    """A request never answered and none finishing for --stall seconds: every process of the
    server prints its Python stacks into its log (its sitecustomize's SIGUSR2 handler), again
    while the stall lasts, at most --stall-dumps times, and the replay goes on to --seconds."""
    server, base, log = _stub(tmp_path, "hang", 34)
    try:
        reqs = serve_run.requests_of(TRACE, 4, knobs(33), 2)
        replay = serve_run.Replay(base, str(tmp_path), reqs, 1.0)
        why = replay.run(server, 6, 0.3, str(log), stall=1.0, stall_dumps=2)
        alive = server.poll() is None
    finally:
        stop_server(server)
    assert why == "--seconds 6 reached" and alive
    assert replay.stalled_at is not None and len(replay.stack_dumps) == 2
    assert log.read_text().count("most recent call first") >= 2  # a dump per SIGUSR2


# --- the H200 runs -------------------------------------------------------------------------------

def _metric(path: pathlib.Path, name: str) -> float:
    return sample(path.read_text(), name)


def test_a_run_says_which_machine_made_it():
    """run.json's provenance.host: the machine's name, this boot's id, its CPU model and count,
    and GPU UUIDs where nvidia-smi answers (None here, on a CPU machine), so that two runs can
    be shown to share a machine (or not) from their files."""
    from hisparse_model.engine.serve_process import host

    got = host()
    assert set(got) == {"name", "boot_id", "cpu", "cpus", "gpu_uuids"}
    assert got["cpus"] >= 1 and got["boot_id"] and len(got["boot_id"]) == 36  # a UUID
    assert got["boot_id"] == host()["boot_id"]  # the same boot, the same id


@pytest.mark.parametrize("script, uuids", [
    # a failing nvidia-smi prints its complaint on stdout and exits 9: no UUID
    ("echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; "
     "exit 9", None),
    ("echo GPU-0a1b; echo GPU-2c3d", ["GPU-0a1b", "GPU-2c3d"]),  # one UUID a line
])
def test_the_hosts_gpus_are_what_nvidia_smi_answered(tmp_path, monkeypatch, script, uuids):
    """provenance.host.gpu_uuids: nvidia-smi's UUID lines when it succeeds, else None."""
    import os

    from hisparse_model.engine.serve_process import host

    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\n" + script + "\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert host()["gpu_uuids"] == uuids


def test_the_served_log_reads_as_the_knobs_it_was_started_with():
    """check --from-log reads the real vllm serve log as the run's knobs (B from vllm serve's
    own line, not the offline default)."""
    run = json.loads((X6 / "run.json").read_text())
    launch = from_log(str(X6 / "server.log"))
    assert_same_engine(launch.knobs, Knobs.from_dict(run["provenance"]["knobs"]))


def test_the_x6_run_stalled_with_requests_running():
    """No engine step in the replay's first 15 s, 17 steps to 25 s (16 requests finished),
    then none from 25 s to 40 s with 47 requests running, none waiting, no preemption; the log
    has no HiSparse error and an input dump at the stop (the engine core was in a step)."""
    steps = {t: _metric(X6 / f"metrics-{t}.txt", "vllm:iteration_tokens_total_count")
             for t in range(0, 45, 5)}
    done = {t: _metric(X6 / f"metrics-{t}.txt", "vllm:request_success_total")
            for t in (0, 25)}
    assert steps[0] == steps[15] and steps[25] - steps[0] == 17
    assert done[25] - done[0] == 16
    assert steps[25] == steps[30] == steps[35] == steps[40]
    for t in (25, 40):
        assert _metric(X6 / f"metrics-{t}.txt", "vllm:num_requests_running") == 47
        assert _metric(X6 / f"metrics-{t}.txt", "vllm:num_requests_waiting") == 0
        assert _metric(X6 / f"metrics-{t}.txt", "vllm:num_preemptions_total") == 0
    text = (X6 / "server.log").read_text()
    assert serve_run.CRASH_TEXT not in text
    assert "trigger received signal=SIGTERM" in text and "Dumping input data" in text
    # the host pool's blocks and the GPU pool's use the README quotes
    assert "HiSparse HMA: 1.0 GiB host source (1820 blocks), 39.9 GiB shared GPU indexer/" \
           "resident/hot pool (580519 blocks)" in text
    assert round(100 * _metric(X6 / "metrics-40.txt", "vllm:kv_cache_usage_perc"), 1) == 2.2


def test_the_x4_run_stopped_finishing_requests_before_the_c_plus_1_prompt_arrived():
    """Requests 0-62 all finished by 32.7 s; 63-71 reached the idle server at 45.77-45.92 s
    and request 72 (144 tokens = C + 1) at 46.79 s; none of them nor any later one finished.
    Had 63-71 been served, the model's C + 1 step is request 72 alone, for step times under
    30 ms (the observed send times as arrivals)."""
    rows = [json.loads(l) for l in open(X4 / "client.jsonl")]
    assert len(rows) == 200 and [r["i"] for r in rows] == list(range(200))
    assert all(r["status"] == 200 for r in rows[:63])
    assert max(r["done_s"] for r in rows[:63]) < 32.7 < min(r["sent_s"] for r in rows[63:])
    assert (round(rows[63]["sent_s"], 2), round(rows[71]["sent_s"], 2)) == (45.77, 45.92)
    assert (rows[72]["prompt_len"], round(rows[72]["sent_s"], 2)) == (144, 46.79)
    assert not [r for r in rows[63:] if r["status"] == 200]
    # blocks of 64 tokens the README quotes: 63-71 need 386, 0-62 needed 2,362
    need = lambda rs: sum(-(-(r["prompt_len"] + r["max_tokens"]) // 64) for r in rs)
    assert (need(rows[63:72]), need(rows[:63])) == (386, 2362)
    k = knobs(143)
    for ms, crashes in ((5, True), (15, True), (30, False)):
        work = Workload(tuple(Request(DistinctPrompt(r["i"], r["prompt_len"]), r["max_tokens"],
                                      int((r["sent_s"] - rows[63]["sent_s"]) * 1000 / ms))
                              for r in rows[63:81]))
        found = first_crash(k, work)
        assert (found is not None) == crashes, ms
        if found:
            assert dict(found[2].scheduled) == {9: 144}  # workload request 9 = trace request 72
            assert "stop=144, capacity=143" in found[1]


def test_the_step_time_readers_read_the_served_texts():
    """--step-ms-from-metrics' arithmetic on two of the x6 snapshots is the inter-token
    latency's Δsum / Δcount (recomputed here from the raw samples): 90.7 ms over the
    replay's first 20 s, first-use compilation included; the log reader reads its lines."""
    from hisparse_model.inputs.step_time import from_log, parse_metrics, step_from_metrics

    a, b = (X6 / "metrics-0.txt", X6 / "metrics-20.txt")
    itl = "vllm:inter_token_latency_seconds"
    want = 1000 * (_metric(b, itl + "_sum") - _metric(a, itl + "_sum")) / (
        _metric(b, itl + "_count") - _metric(a, itl + "_count"))
    got = step_from_metrics(parse_metrics(a.read_text()), parse_metrics(b.read_text()), 20.0,
                            "x6")
    assert got.ms == pytest.approx(want) and round(want, 1) == 90.7
    assert from_log(str(X6 / "server.log")).ms > 0


def _rows(folder) -> list[dict]:
    return sorted((json.loads(l) for l in open(folder / "client.jsonl")), key=lambda r: r["i"])


def test_the_h100_5gib_run_made_no_step_after_the_burst_that_precedes_request_72():
    """H100, 5 GiB host pool (9,102 blocks: the replay's 6,651 and the warm-up's 503 fit):
    requests 0-62 finished by 20.43 s; requests 63-199 were sent from 30.51 s to 33.18 s and
    none was answered; from 30 s to the stop at 40 s the server's /metrics counted no engine
    step, no prompt token and no finished request, and vLLM dumped the input of a step it
    was executing when it was stopped (none had finished in the 9.5 s since the burst was
    sent); no HiSparse error.
    Request 72 (144 tokens = C + 1) was sent at 31.19 s, into that step's wait."""
    rows = _rows(H100_5GIB)
    assert len(rows) == 200 and all(r["status"] == 200 for r in rows[:63])
    assert round(max(r["done_s"] for r in rows[:63]), 2) == 20.43
    assert (round(min(r["sent_s"] for r in rows[63:]), 2),
            round(max(r["sent_s"] for r in rows[63:]), 2)) == (30.51, 33.18)
    assert {r["status"] for r in rows[63:]} == {0}  # cut at the stop: no answer
    assert (rows[72]["prompt_len"], round(rows[72]["sent_s"], 2)) == (144, 31.19)
    for name in ("vllm:iteration_tokens_total_count", "vllm:prompt_tokens_total",
                 "vllm:request_success_total"):
        seen = {t: _metric(H100_5GIB / f"metrics-{t}.txt", name) for t in (30, 35, 40)}
        assert len(set(seen.values())) == 1, (name, seen)
    text = (H100_5GIB / "server.log").read_text()
    assert serve_run.CRASH_TEXT not in text
    assert "HiSparse HMA: 5.0 GiB host source (9102 blocks)" in text
    stop = text.index("trigger received signal=SIGTERM")
    assert "Dumping input data" in text[stop:]  # raised inside execute_model: a step running
    run = json.loads((H100_5GIB / "run.json").read_text())
    assert run["stopped_because"] == "--seconds 40 reached" and run["stalled_at_s"] is None
    # the first burst, 0-62 (147,578 prompt tokens, due by 6.6 s), at the 13.2 ms a step the
    # server measured before the replay: the model's last step with work is step 612, done
    # at 613 x 13.2 ms = 8.09 s; the server finished it at 20.43 s
    k = knobs(143, host_pool_gib=5)
    first = Workload(tuple(Request(DistinctPrompt(r["i"], r["prompt_len"]), r["max_tokens"],
                                   int(r["due_s"] * 1000 / 13.2)) for r in rows[:63]))
    assert sum(r["prompt_len"] for r in rows[:63]) == 147578
    assert simulate(k, first).steps[-1].step == 612
    assert run["provenance"]["gpu"] == "NVIDIA H100 80GB HBM3"


def test_the_h100_1gib_run_found_the_server_busy_when_request_72_came():
    """H100, 1 GiB host pool: every request was answered, no HiSparse error.  Requests 63-71
    (sent at 30.51-30.61 s) finished at 33.54-37.12 s, so request 72 (144 tokens, sent at
    31.20 s) met them running and finished at 34.21 s.  At the 7.4 ms a step the server's
    /metrics read before the replay, the model serves 63-71 before 72 arrives (its steps
    from those arrivals: 72 alone, stop=144); the real steps of that burst took seconds."""
    rows = _rows(H100_1GIB)
    assert {r["status"] for r in rows} == {200}
    burst = rows[63:72]
    assert (round(min(r["sent_s"] for r in burst), 2), round(max(r["sent_s"] for r in burst), 2)
            ) == (30.51, 30.61)
    assert (round(min(r["done_s"] for r in burst), 2), round(max(r["done_s"] for r in burst), 2)
            ) == (33.54, 37.12)
    assert (rows[72]["prompt_len"], round(rows[72]["sent_s"], 2), round(rows[72]["done_s"], 2)
            ) == (144, 31.2, 34.21)
    assert serve_run.CRASH_TEXT not in (H100_1GIB / "server.log").read_text()
    k = knobs(143)
    t0 = rows[63]["sent_s"]
    work = Workload(tuple(Request(DistinctPrompt(r["i"], r["prompt_len"]), r["max_tokens"],
                                  int((r["sent_s"] - t0) * 1000 / 7.4)) for r in rows[63:81]))
    found = first_crash(k, work)
    assert found is not None and dict(found[2].scheduled) == {9: 144}  # 9th here = 72
    assert "stop=144, capacity=143" in found[1]
    # the model serves 63-71 alone in 51 engine steps: 51 x 7.4 ms = 0.38 s after 30.51 s,
    # done by 30.89 s, before request 72 at 31.19 s; the server took 3.0-6.5 s
    alone = simulate(k, Workload(work.requests[:9]))
    assert alone.crash is None and len(alone.steps) == alone.steps[-1].step + 1 == 51


# --- the host pool, on vLLM's own scheduler (CPU) -------------------------------------------------

# the planner's stand-in layers are the tiny model's own, bf16 rows as on the H200 and H100:
# 64 x 8 x 1,152 = 589,824 bytes a block, so the pool is given in whole blocks
CPU_HOST_BLOCK_BYTES = layout(Knobs()).host_block_bytes


@pytest.mark.vllm_cpu
@pytest.mark.parametrize("step_ms", [9.0, 100.0, 1000.0])
def test_vllms_scheduler_runs_short_of_a_1_gib_host_pool_not_of_the_runners(vllm_servers,
                                                                           step_ms):
    """vLLM 0.31.0's own scheduler and HiSparse coordinator (crosscheck/scheduler_driver.py)
    serve the x4 replay's 200 requests, arriving at their steps for a given step time, with
    as many host blocks as the GPU had: with host_pool_gib_for's pool (6 GiB: 10,922 blocks)
    no allocation is refused at any pace; with the reproduction's 1 GiB (1,820 blocks) the
    pool runs short once requests pile up (a slow, compiling engine: 100 ms, 1 s a step)."""
    from hisparse_model.schedule.scheduler_config import SchedulerConfig

    k = knobs(143)
    sent = serve_run.requests_of(TRACE, 4, k, 240)
    gib = serve_run.host_pool_gib_for(sent, k)
    runner_blocks = host_blocks(gib, layout(Knobs()))  # 6 x 2**30 // 589,824
    assert runner_blocks == 10922
    work = [{"prompt_token_ids": r["prompt"], "max_tokens": r["max_tokens"],
             "arrival_step": int(r["due_s"] * 1000 / step_ms)} for r in sent]
    config = SchedulerConfig(max_num_seqs=143, max_num_batched_tokens=8192, max_model_len=8192,
                             num_speculative_tokens=0, enable_prefix_caching=True,
                             num_gpu_blocks=580519, async_scheduling=True,
                             vllm_version="0.31.0").__dict__
    cases = [{"config": {**config, "host_pool_gib": blocks * CPU_HOST_BLOCK_BYTES / 2**30},
              "workload": work, "accepted": None} for blocks in (runner_blocks, 1820)]
    driver = "hisparse_model.crosscheck.scheduler_driver:"
    assert [vllm_servers.call("0.31.0", driver + "host_blocks", c["config"])["host_blocks"]
            for c in cases] == [runner_blocks, 1820]  # the H200's counts
    out = vllm_servers.call("0.31.0", driver + "run", {"cases": cases, "jobs": 1}, timeout=600)
    runner, one_gib = out["results"]
    assert "driver_error" not in runner and "driver_error" not in one_gib
    assert sum(len(s["finished"]) for s in runner["steps"]) == 200
    assert runner["alloc_failures"] == 0
    assert (one_gib["alloc_failures"] > 0) == (step_ms >= 100), one_gib["alloc_failures"]
