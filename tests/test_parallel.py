"""Tensor and data parallelism: vLLM's refusals, TP's error surface, the DP sync, dummy batches."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hisparse_model.schedule.data_parallel import assign_ranks, with_placeholders
from hisparse_model.answers.diagnose import OFF_BY_ONE, diagnose
from hisparse_model.model.knobs import Knobs
from hisparse_model.model.parallel import caller_error, error_surface, split_requests, worker_failed
from hisparse_model.model.plan import plan
from hisparse_model.answers.predict import predict
from hisparse_model.recorded.recordings import load_all, recording_knobs
from hisparse_model.answers.simulate import simulate
from hisparse_model.model.versions import swap_error
from hisparse_model.schedule.workload import Workload, WorkloadError

CMD = [sys.executable, "-m", "hisparse_model"]
ERR = ("ValueError: HiSparse swap rows exceed the configured speculative decode capacity: "
       "stop={}, capacity={}.")

# Rank 0 of a DP=2, S=3 engine: request 0 (2 tokens) at step 0, request 1 (3 tokens) at step 2,
# so step 2 is 1 decode + a 3-token prefill = 4 tokens; rank 1's only request arrives at step 30.
DP_CRASH = [{"prompt_len": 2, "dp_rank": 0},
            {"prompt_len": 3, "dp_rank": 0, "arrival_step": 2},
            {"prompt_len": 2, "dp_rank": 1, "arrival_step": 30}]


@pytest.mark.parametrize("changes, error", [
    # the tiny model has 8 attention heads: 8 % 3 != 0
    ({"tensor_parallel_size": 3}, "tensor_parallel_size: Total number of attention heads (8) "
                                  "must be divisible by tensor parallel size (3)."),
    ({"pipeline_parallel_size": 2},
     "pipeline_parallel_size: HiSparse does not support pipeline parallelism."),
    # DCP reuses the TP ranks: 2 % 2 == 0 passes ParallelConfig, then HiSparse refuses DCP
    ({"tensor_parallel_size": 2, "decode_context_parallel_size": 2},
     "decode_context_parallel_size: HiSparse does not support decode context parallelism."),
    # ParallelConfig is built before SchedulerConfig: 2 % 4 != 0 wins over B = 2 < S = 4
    ({"tensor_parallel_size": 2, "decode_context_parallel_size": 4, "max_num_seqs": 4,
      "max_num_batched_tokens": 2}, "decode_context_parallel_size: tp_size=2 must be "
                                    "divisible by dcp_size=4."),
    # PP = 2 and cudagraph_mode=FULL on 0.32.0: VllmConfig checks PP first
    ({"pipeline_parallel_size": 2, "vllm_version": "0.32.0", "cudagraph_mode": "FULL"},
     "pipeline_parallel_size: HiSparse does not support pipeline parallelism."),
])
def test_parallel_refusals_are_vllms(changes, error):
    """Each parallel layout vLLM refuses with HiSparse is refused with vLLM's text, in its order."""
    with pytest.raises(ValueError) as exc:
        plan(Knobs(**{"max_num_seqs": 2, **changes}))
    assert str(exc.value) == error


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tp_sizes_nothing_differently(tp):
    """C, W, capture sizes and every batch are those of TP = 1 (nothing HiSparse sizes is split)."""
    for s in (1, 2, 3, 8):
        one = predict(Knobs(max_num_seqs=s), [2, 3, 200])
        many = predict(Knobs(max_num_seqs=s, tensor_parallel_size=tp), [2, 3, 200])
        assert many.sizes == one.sizes and many.capture_sizes == one.capture_sizes
        assert many.startup == one.startup
        assert [p.batches for p in many.prompts] == [p.batches for p in one.prompts]


def test_tp2_predicts_every_single_gpu_recording():
    """On each committed single-GPU recording's knobs, TP = 2 predicts the recorded outcomes."""
    recs = load_all()
    assert len(recs) >= 20
    for rec in recs:
        knobs = recording_knobs(rec).replace(tensor_parallel_size=2)
        pred = predict(knobs, rec["prompt_lens"])
        assert (pred.startup_ok, pred.startup_error) == (rec["startup"]["ok"],
                                                         rec["startup"]["error"]), rec["_path"]
        for got, want in zip(rec["prompts"], pred.prompts):
            if got["ran"]:
                assert (got["ok"], got["error"]) == (want.ok, want.error), rec["_path"]


ERR43 = ERR.format(4, 3)
# str(ValueError) drops the type; the executor's f-string adds quotes and its advice
WRAPPED = ("RuntimeError: Worker failed with error 'HiSparse swap rows exceed the configured "
           "speculative decode capacity: stop=4, capacity=3.', please check the stack trace "
           "above for the root cause")
DEAD = ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
        "See stack trace (above) for the root cause.")
INIT = ("RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}")


@pytest.mark.parametrize("sizes, startup, in_process, dp_rank, seen", [
    # in process (VLLM_ENABLE_V1_MULTIPROCESSING=0): the engine core's exception is the caller's
    ((1, 1), False, True, 0, ERR43),    # TP = 1: the worker's ValueError, re-raised as is
    ((1, 1), True, True, 0, ERR43),     # ... at start-up too (LLM(...) raises it)
    ((2, 1), False, True, 0, WRAPPED),  # TP = 2: the executor's wrap of str(ValueError)
    ((2, 1), True, True, 0, WRAPPED),   # ... at start-up too (a collective_rpc like serving)
    ((1, 2), False, True, 1, ERR43),    # a DP rank with TP = 1: as TP = 1
    # vLLM's default multiprocessing: the engine core is a process of its own
    ((1, 1), False, False, 0, DEAD),    # serving: it reports itself dead
    ((2, 1), False, False, 0, DEAD),
    ((1, 1), True, False, 0, INIT.format("{'EngineCore': 1}")),   # start-up: it exits 1
    ((2, 1), True, False, 0, INIT.format("{'EngineCore': 1}")),
    ((1, 2), True, False, 1, INIT.format("{'EngineCore_DP1': 1}")),  # DP names its rank
])
def test_what_the_caller_sees_by_engine_layout(sizes, startup, in_process, dp_rank, seen):
    """The caller's traceback ends in the engine's own text in process (TP = 1) or the
    executor's wrap (TP > 1); with multiprocessing in start-up failure or EngineDeadError."""
    tp, dp = sizes
    knobs = Knobs(tensor_parallel_size=tp, data_parallel_size=dp)
    assert caller_error(knobs, ERR43, startup=startup, in_process=in_process,
                        dp_rank=dp_rank) == seen


def test_tp_error_surface():
    """error_surface: both callers, and the log's texts (the error, under TP > 1 its wrap)."""
    assert worker_failed(ERR43) == WRAPPED
    two = error_surface(Knobs(tensor_parallel_size=2), ERR43)
    assert two == {"caller": DEAD, "log": [ERR43, WRAPPED], "workers": 2,
                   "in_process_caller": WRAPPED}
    one = error_surface(Knobs(), ERR43, startup=True)
    assert one == {"caller": INIT.format("{'EngineCore': 1}"), "log": [ERR43], "workers": 1,
                   "in_process_caller": ERR43}
    assert error_surface(Knobs(), None) is None


@pytest.mark.parametrize("text", [
    "RuntimeError: Worker failed with error 'HiSparse swap rows exceed the configured "
    "speculative decode capacity: stop=4, capacity=3.', please check the stack trace above "
    "for the root cause",
    "(EngineCore_DP1 pid=123) ERROR ... ValueError: HiSparse swap rows exceed the configured "
    "speculative decode capacity: stop=4, capacity=3.",
])
def test_explain_reads_the_wrapped_texts(text):
    """``explain`` finds the off-by-one (stop=4 = C + 1, C = 3) in the TP executor's wrap and in
    a DP engine's log line."""
    found = diagnose(text)
    assert found.kind == OFF_BY_ONE
    assert any("stop=4" in line or "4 tokens" in line for line in found.lines), found.lines


@pytest.mark.parametrize("n, dp, ranks", [
    (10, 4, [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]),  # floor 2, remainder 2: ranks 0, 1 take 3
    (4, 2, [0, 0, 1, 1]),  # floor 2, remainder 0
    (3, 8, [0, 1, 2]),  # floor 0, remainder 3: ranks 3..7 get none
])
def test_requests_split_as_the_offline_example(n, dp, ranks):
    """Without dp_rank, rank r takes the slice start(r)..start(r+1), the first ranks one more."""
    assert split_requests(n, dp) == ranks


def test_assignment_refuses_unknown_ranks():
    """A dp_rank past the ranks is one line naming the request."""
    with pytest.raises(WorkloadError, match="request 1: dp_rank must be < data_parallel_size=2"):
        assign_ranks(Workload.from_json([{"prompt_len": 2, "dp_rank": 2}]), 2)


@pytest.mark.parametrize("requests, dp, ranks", [
    # 1 request over 2: split [0]; rank 1 empty gets the placeholder, request 1
    ([{"prompt_len": 2}], 2, [0, 1]),
    # request 1 pinned to rank 0, request 0 split to rank 0: rank 1's placeholder
    ([{"prompt_len": 2}, {"prompt_len": 3, "dp_rank": 0}], 2, [0, 0, 1]),
    # split of 4 over 3 is [0, 0, 1, 2]: requests 2, 3 -> ranks 1, 2, rank 0 empty; its
    # placeholder is request 4, and the split of 5 ([0, 0, 1, 1, 2]) must not move request 3
    ([{"prompt_len": 2, "dp_rank": 1}, {"prompt_len": 2, "dp_rank": 1}, {"prompt_len": 2},
      {"prompt_len": 2}], 3, [1, 1, 1, 2, 0]),
    # nobody empty: nothing added
    ([{"prompt_len": 2}, {"prompt_len": 2}], 2, [0, 1]),
])
def test_an_empty_rank_serves_a_placeholder(requests, dp, ranks):
    """A rank given no request serves a one-token placeholder from step 0 (vLLM's example
    gives an empty rank a placeholder prompt); the given requests keep their ranks."""
    work = with_placeholders(Workload.from_json(requests), dp)
    assert assign_ranks(work, dp) == ranks
    extra = work.requests[len(requests):]
    added = len(ranks) - len(requests)
    assert [(r.prompt_len, r.arrival_step) for r in extra] == [(1, 0)] * added
    sched = simulate(Knobs(max_num_seqs=2, data_parallel_size=dp), Workload.from_json(requests))
    assert sched.assignment == ranks and sorted(sched.finished) == list(range(len(ranks)))
    assert sched.placeholders == tuple(range(len(requests), len(ranks)))  # shown to the user


@pytest.mark.parametrize("version, busy_routed, route, error", [
    # 0.31.0 routes on W = C + 1 = 4: 4 tokens go to swap_in, which holds C = 3 rows;
    # rank 0's mixed batch hands only its 1 decode token over
    ("0.31.0", 1, "swap_in", ERR.format(4, 3)),
    ("0.32.0", 1, "all_resident", None),  # routes on C = 3: 4 > 3
    # 0.33.0 hands a resident mixed batch over whole; an all-resident prefill stays resident
    ("0.33.0", 4, "all_resident", None),
])
def test_idle_rank_dies_on_a_batch_it_never_scheduled(version, busy_routed, route, error):
    """Step 2: rank 0 runs 1 decode + 3 prefill = 4 = C + 1 tokens safely; idle rank 1 pads its
    dummy to the PIECEWISE size 4 and routes all 4 as one prefill."""
    sched = simulate(Knobs(vllm_version=version, max_num_seqs=3, data_parallel_size=2),
                        Workload.from_json(DP_CRASH))
    step = next(s for s in sched.steps if s.step == 2)
    busy, idle = step.ranks
    assert step.mode == "PIECEWISE"  # rank 0's mixed batch has no FULL graph
    assert (busy.num_tokens, busy.padded, busy.dummy) == (4, 4, None)
    assert busy.routed_tokens == busy_routed
    # capture sizes 1, 2, 3, 4 (S = 3, 2 S = 6): 4 is captured, so the dummy is one request of 4
    assert (idle.scheduled, idle.padded, idle.dummy, idle.routed_tokens, idle.route,
            idle.error) == ({}, 4, (4,), 4, route, error)
    if error:
        assert sched.crash == {"step": 2, "rank": 1, "error": error, "scheduled": False}
    else:
        assert sched.crash is None and sorted(sched.finished) == [0, 1, 2]


def test_one_gpu_serves_the_same_requests_safely():
    """The same two rank-0 requests on one GPU: the 4-token mixed step routes only its decode."""
    one = simulate(Knobs(max_num_seqs=3), Workload.from_json(DP_CRASH[:2]))
    assert one.crash is None


def test_sync_modes_and_padding():
    """Min mode across ranks; FULL replays route nothing; eager pads nothing."""
    work = Workload.from_json([{"prompt_len": 2, "dp_rank": 0},
                               {"prompt_len": 2, "dp_rank": 1, "arrival_step": 1}])
    sched = simulate(Knobs(max_num_seqs=3, data_parallel_size=2), work)
    s0, s1 = sched.steps[0], sched.steps[1]
    # step 0: rank 0 prefills 2 (PIECEWISE 2), rank 1's dummy wants FULL 1: PIECEWISE, pad to 2
    assert s0.mode == "PIECEWISE" and [r.padded for r in s0.ranks] == [2, 2]
    assert s0.ranks[1].dummy == (2,) and s0.ranks[1].routed_tokens == 2  # 2 <= C = 3: safe
    # step 1: rank 0 decodes 1 (FULL 1), rank 1 prefills 2 (PIECEWISE): PIECEWISE, both pad to 2
    assert s1.mode == "PIECEWISE" and [r.padded for r in s1.ranks] == [2, 2]
    assert [r.routed_tokens for r in s1.ranks] == [1, 2]  # real batches route their own count
    eager = simulate(Knobs(max_num_seqs=3, data_parallel_size=2, enforce_eager=True), work)
    e0 = eager.steps[0]
    # eager: rank 0 runs its 2 tokens, rank 1's dummy its own q = 1 token (a decode)
    assert e0.mode == "NONE" and [r.padded for r in e0.ranks] == [2, 1]
    assert e0.ranks[1].dummy == (1,) and e0.ranks[1].routed_tokens == 1
    later = [s for s in sched.steps if s.step >= 3 and s.mode == "FULL"]
    assert later and all(r.routed_tokens == 0 for s in later for r in s.ranks)


def test_dp_declines_mtp():
    """MTP under DP (the drafter's own sync) is declined with one line naming the knob."""
    with pytest.raises(ValueError, match="^num_speculative_tokens: MTP under data parallelism"):
        simulate(Knobs(max_num_seqs=2, data_parallel_size=2, num_speculative_tokens=1),
                 Workload.from_json([{"prompt_len": 2}, {"prompt_len": 2}]))


def test_cli_simulate_dp_json(tmp_path):
    """simulate -dp 2 --json: steps[].ranks[...] and a crash that names its rank."""
    f = tmp_path / "w.json"
    f.write_text(json.dumps({"requests": DP_CRASH}))
    out = subprocess.run([*CMD, "simulate", "--vllm", "0.31.0", "-dp", "2", "--max-num-seqs",
                          "3", "--workload", str(f), "--json"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["crash"] == {"step": 2, "rank": 1, "error": ERR.format(4, 3), "scheduled": False}
    assert got["dp_rank_of_request"] == [0, 0, 1]
    # the same step record as one rank's (draft: None, no MTP under DP), without its flat keys
    assert set(got["steps"][-1]) == {"step", "mode", "ranks"}
    assert set(got["steps"][-1]["ranks"][1]) == {
        "rank", "scheduled", "num_tokens", "num_decode_tokens", "dispatch", "padded", "dummy",
        "resident", "routed_tokens", "route", "error", "draft"}
    # rank 1's dummy at step 2 is one request of 4 tokens > q = 1: a prefill, no decode token
    assert got["steps"][-1]["ranks"][1]["num_decode_tokens"] == 0
    assert got["error_surface"]["caller"] == DEAD  # serving, vLLM's default multiprocessing
    assert got["error_surface"]["in_process_caller"] == ERR.format(4, 3)  # TP = 1 per rank
    assert {"max_num_seqs": 4} in [a["change"] for a in got["advice"]]


def test_cli_live_refuses_tp_with_dp(tmp_path):
    """live runs TP or DP, not both: -tp 2 -dp 2 is one line, exit 2, before any GPU probe."""
    (tmp_path / "w.json").write_text(json.dumps({"requests": [{"prompt_len": 2}] * 2}))
    out = subprocess.run([*CMD, "live", "-tp", "2", "-dp", "2", "--max-num-seqs", "2",
                          "--workload", str(tmp_path / "w.json"),
                          "--out", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "tensor_parallel_size or data_parallel_size above 1, not both" in out.stderr
    assert not (tmp_path / "r.json").exists()


# live's arguments -> the one line refused before any GPU probe (this machine has no torch:
# a probe would answer "cannot run the engine here", exit 3)
LIVE_EARLY = [
    # the tiny model has 8 attention heads: vLLM refuses TP 3 at start-up, as predict says
    (["-tp", "3", "--out", "{tmp}/r.json"],
     "tensor_parallel_size: Total number of attention heads (8) must be divisible by tensor "
     "parallel size (3)."),
    # /proc passes os.access for root; no file can be made there
    (["--out", "/proc/r.json"], "--out /proc/r.json: the folder /proc is not writable"),
    # a folder live would make, under one where nothing can be made
    (["--out", "/proc/new/r.json"], "--out /proc/new/r.json: the folder /proc is not writable"),
]


@pytest.mark.parametrize("args, line", LIVE_EARLY)
def test_cli_live_refuses_before_the_gpu_probe(tmp_path, args, line):
    """What vLLM refuses at start-up and an output that cannot be written are one line, exit
    2, before any GPU probe."""
    out = subprocess.run([*CMD, "live", "--max-num-seqs", "2",
                          *[a.format(tmp=tmp_path) for a in args]],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr == f"hisparse live: error: {line}\n"


def test_cli_predict_tp_and_bad_layouts():
    """predict -tp 2 shows the TP error surface; -dp and refused layouts exit 2 with one line."""
    out = subprocess.run([*CMD, "predict", "-tp", "2", "--max-num-seqs", "3", "--prompt-lens",
                          "4"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "TP=2: the same on every rank" in out.stdout
    assert "Worker failed with error 'HiSparse swap rows" in out.stdout
    for args, first in ((["-dp", "2"], "data_parallel_size: "),
                        (["-tp", "9"], "tensor_parallel_size must be <= 8"),
                        (["--pipeline-parallel-size", "2"], "pipeline_parallel_size: ")):
        bad = subprocess.run([*CMD, "predict", "--max-num-seqs", "3", *args],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and bad.stdout == ""
        assert bad.stderr.count("\n") == 1 and first in bad.stderr


def _mixed(s: int, late: dict) -> list[dict]:
    """Rank 0: 2 tokens at step 0, s tokens at step 2 (step 2 = 1 decode + s prefill)."""
    return [{"prompt_len": 2, "dp_rank": 0}, {"prompt_len": s, "dp_rank": 0, "arrival_step": 2},
            {"prompt_len": 2, "dp_rank": 1, **late}]


@pytest.mark.parametrize("requests, knobs, crash", [
    # S = 3: 1 + 3 = 4 = C + 1, a capture size: idle rank 1's dummy routes 4
    (_mixed(3, {"arrival_step": 30}), {"max_num_seqs": 3}, (2, 1, False, 4)),
    # S = 7: captures 1, 2, 4, 7, 8; 1 + 7 = 8 = C + 1
    (_mixed(7, {"arrival_step": 30}), {"max_num_seqs": 7}, (2, 1, False, 8)),
    # rank 1 idle because its one-token request finished at step 0
    (_mixed(3, {"max_tokens": 1}), {"max_num_seqs": 3}, (2, 1, False, 4)),
    # without dp_rank: 3 requests split [0, 0, 1], the same schedule
    ([{k: v for k, v in r.items() if k != "dp_rank"} for r in _mixed(3, {"arrival_step": 30})],
     {"max_num_seqs": 3}, (2, 1, False, 4)),
    # TP = 2 on each DP rank: the same
    (_mixed(3, {"arrival_step": 30}), {"max_num_seqs": 3, "tensor_parallel_size": 2},
     (2, 1, False, 4)),
    # rank 0's own 4-token prefill: it dies as on one GPU (rank 1's dummy of 4 too)
    ([{"prompt_len": 4, "dp_rank": 0}, {"prompt_len": 2, "dp_rank": 1, "arrival_step": 30}],
     {"max_num_seqs": 3}, (0, 0, True, 4)),
    # eager: the dummy runs its own q = 1 token, a decode
    (_mixed(3, {"arrival_step": 30}), {"max_num_seqs": 3, "enforce_eager": True}, None),
    # FLASHMLA_SPARSE hands only decode tokens over: a one-request prefill dummy routes none
    (_mixed(3, {"arrival_step": 30}), {"max_num_seqs": 3, "attention_backend": "FLASHMLA_SPARSE"},
     None),
    # no PIECEWISE graphs: rank 0's mixed step is eager, so is the dummy (1 token)
    (_mixed(3, {"arrival_step": 30}), {"max_num_seqs": 3, "cudagraph_mode": "FULL_DECODE_ONLY"},
     None),
    # S = 4: 1 + 4 = 5 pads to 8 > W = 5: all-resident
    (_mixed(4, {"arrival_step": 30}), {"max_num_seqs": 4}, None),
])
def test_dp_scenarios_on_0_31_0(requests, knobs, crash):
    """The DP = 2 scenarios the next issue records live: (step, rank, scheduled, stop) or None."""
    sched = simulate(Knobs(data_parallel_size=2, **knobs), Workload.from_json(requests))
    got = sched.crash
    if crash is None:
        assert got is None
        return
    step, rank, scheduled, stop = crash
    assert got == {"step": step, "rank": rank, "scheduled": scheduled,
                   "error": ERR.format(stop, knobs["max_num_seqs"])}


# workload -> (finished, lost) under DP = 2, S = 3 (C = 3, W = 4; captures 1, 2, 3, 4)
DP_LOSSES = [
    # rank 0: r0 (2 tokens) decodes through step 2; r1 (3 tokens) joins at step 2: 1 + 3 = 4
    # tokens, rank 0 routes only its decode; idle rank 1's dummy is one 4-token prefill: 4 = W
    # raises at step 2.  Nothing had finished: r0 and r1 are still running; rank 1's request
    # (arrival 30) was never submitted, so it is not lost.
    ([{"prompt_len": 2, "dp_rank": 0}, {"prompt_len": 3, "arrival_step": 2, "dp_rank": 0},
      {"prompt_len": 2, "arrival_step": 30, "dp_rank": 1}],
     [], [(0, "still running"), (1, "still running")]),
    # rank 0: r0 (2 tokens, 2 outputs) prefills at step 0 and decodes its last token at step 1;
    # step 1's output is handed back only after step 2's forward, and step 2 (r1's 4-token
    # prefill on rank 0, a 4-token dummy on rank 1) raises: r0 computed but never returned
    ([{"prompt_len": 2, "max_tokens": 2, "dp_rank": 0},
      {"prompt_len": 4, "arrival_step": 2, "dp_rank": 0},
      {"prompt_len": 2, "arrival_step": 30, "dp_rank": 1}],
     [], [(0, "computed but never returned"), (1, "still running")]),
]


@pytest.mark.parametrize("requests,finished,lost", DP_LOSSES)
def test_dp_crash_loses_what_one_engine_would(requests, finished, lost):
    """Under DP every rank stops in the crash step: the callers get what was handed back before
    it, and each rank's lost requests are labelled as on one engine."""
    sched = simulate(Knobs(vllm_version="0.31.0", max_num_seqs=3, data_parallel_size=2),
                        Workload.from_json(requests))
    assert sched.crash["step"] == 2
    assert sorted(sched.finished) == finished
    assert [(x.request, x.why) for x in sched.lost] == lost


def test_an_idle_ranks_dummy_keeps_its_last_steps_residency():
    """A dummy run leaves all_context_pages_resident as the rank's last real step set it
    (the connector is off for dummies), so a rank whose last step was not all resident
    hands its dummy prefill to nothing and cannot crash on it."""
    # rank 1: r1 (100 tokens, 1 output) writes page 0 and finishes before the page's transfer
    # completes: r2 (100 tokens at step 20) hits that page with no GPU copy -> steps 20 and 21
    # are not all resident (test_scheduler's detached publication), then rank 1 is idle.
    # rank 0: r3 (2 tokens) at 22, r4 (3 tokens) at 24: step 24 is 1 + 3 = 4 = W tokens
    # (S = 3: C = 3, captures 1, 2, 3, 4), so idle rank 1 runs a 4-token dummy prefill.
    work = Workload.from_json([
        {"prompt_len": 100, "max_tokens": 1, "dp_rank": 1},
        {"prompt_len": 100, "arrival_step": 20, "max_tokens": 2, "dp_rank": 1},
        {"prompt_len": 2, "arrival_step": 22, "dp_rank": 0},
        {"prompt_len": 3, "arrival_step": 24, "dp_rank": 0}])
    sched = simulate(Knobs(vllm_version="0.31.0", max_num_seqs=3, data_parallel_size=2), work)
    step24 = next(s for s in sched.steps if s.step == 24)
    idle = step24.ranks[1]
    assert (idle.dummy, idle.padded, idle.resident) == ((4,), 4, False)
    # not all resident: FLASH_ATTN_MLA_SPARSE hands over only decode tokens, a dummy prefill
    # has none -> nothing routed; were it all resident, 4 = C + 1 would go to swap_in and raise
    assert (idle.routed_tokens, idle.route, idle.error) == (0, None, None)
    assert sched.crash is None


# rank 0: a 2-token prompt at step 0, a 3-token one at step 2; rank 1: a 2-token one at step 30
SCENARIO_1 = [{"prompt_len": 2, "dp_rank": 0}, {"prompt_len": 3, "arrival_step": 2, "dp_rank": 0},
              {"prompt_len": 2, "arrival_step": 30, "dp_rank": 1}]


def _dp_text(tmp_path, requests, *args):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"requests": requests}))
    return subprocess.run([*CMD, "simulate", "--vllm", "0.31.0", "-dp", "2", "--workload",
                           str(path), *args], capture_output=True, text=True, timeout=120)


def test_cli_simulate_dp_text(tmp_path):
    """simulate -dp 2 prints one line per step with a cell per rank, the crash with its rank and
    what the caller sees, and what it loses; requests numbered from 1 (#1 is request 0)."""
    out = _dp_text(tmp_path, SCENARIO_1, "--max-num-seqs", "3")
    assert out.returncode == 0, out.stderr
    err = swap_error(4, 3)
    lines = out.stdout.splitlines()
    # S = 3 per rank, B = 3 * 320 = 960, q = 1, C = 3, W = 4
    assert lines[0] == "vLLM 0.31.0  DP=2 TP=1  S=3 per rank B=960 q=1  C=3 W=4  3 requests"
    assert lines[1:5] == [
        "start-up: ok",
        # step 0: rank 0 prefills #1 (2 tokens, PIECEWISE 2); idle rank 1 runs a 2-token dummy
        "  step 0     [PIECEWISE] rank 0: #1:2 pad 2 2->swap_in | rank 1: dummy [2] pad 2 "
        "2->swap_in",
        # step 1: one decode token: FULL graph of 1 on both ranks, a replay routes nothing
        "  step 1     [FULL     ] rank 0: #1:1 pad 1 replay | rank 1: dummy [1] pad 1 replay",
        # step 2: 1 decode + 3 prefill = 4 on rank 0 (routes its decode); rank 1's dummy is
        # one 4-token prefill, all routed: 4 = W -> swap_in raises
        "  step 2     [PIECEWISE] rank 0: #1:1 #2:3 pad 4 1->swap_in | rank 1: dummy [4] pad 4 "
        "4->swap_in !!"]
    assert (f"crash at step 2 on DP rank 1 (a dummy batch: it scheduled nothing this step): "
            f"{err}") in lines
    assert f"  (in process, VLLM_ENABLE_V1_MULTIPROCESSING=0: {err})" in lines
    assert "finished: 0 of 3 requests (what the callers received)" in lines
    assert "lost at the crash: 2 requests: #1 #2 (still running)" in lines


def test_cli_simulate_dp_text_folds_steps_and_names_placeholders(tmp_path):
    """Identical steps fold into '... N more like it' (--full lists each); a rank given no
    request serves a placeholder, named in the header; a start-up crash kills every rank."""
    # one 2-token request, 3 outputs: rank 0 prefills at step 0, decodes at steps 1 and 2
    # (two identical FULL replays: folded); rank 1 serves the placeholder #2 (1 token) alongside
    out = _dp_text(tmp_path, [{"prompt_len": 2, "max_tokens": 3}], "--max-num-seqs", "4")
    assert out.returncode == 0, out.stderr
    assert "(#2: rank 1's placeholder, it was given none)" in out.stdout.splitlines()[0]
    folded = out.stdout.count("more like it")
    full = _dp_text(tmp_path, [{"prompt_len": 2, "max_tokens": 3}], "--max-num-seqs", "4",
                    "--full").stdout
    assert "more like it" not in full
    assert full.count("  step ") > out.stdout.count("  step ") and folded >= 1
    # S = 1: C = 1, the PIECEWISE capture of 2 = W raises in every rank's start-up
    dead = _dp_text(tmp_path, [{"prompt_len": 2}], "--max-num-seqs", "1").stdout
    assert f"crash at start-up (every rank): {swap_error(2, 1)}" in dead
    assert "lost: none (the engine died at start-up, before accepting a request)" in dead


def test_a_rank_whose_pool_could_run_short_is_declined():
    """num_gpu_blocks_override is per rank: a rank whose requests could run its pool short is
    one line naming the rank and the knob (the model declines to guess at preemption)."""
    # 100 blocks, no prefix caching: a 200-token prompt with 8 outputs needs 68 blocks (as in
    # test_kv_pool); two on rank 0 need 136 > 99 usable
    knobs = Knobs(max_num_seqs=2, enable_prefix_caching=False, num_gpu_blocks_override=100,
                  data_parallel_size=2)
    work = Workload.from_json([{"prompt_len": 200, "dp_rank": 0},
                               {"prompt_len": 200, "dp_rank": 0}, {"prompt_len": 2, "dp_rank": 1}])
    with pytest.raises(ValueError, match=r"^DP rank 0: num_gpu_blocks_override: "):
        simulate(knobs, work)
