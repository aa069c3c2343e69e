"""The command line: exact JSON schema, readable table, exit status 2 with one line naming the knob."""

import json
import subprocess
import sys

import pytest

from hisparse_model.model.routing import ERROR_TEMPLATE

CMD = [sys.executable, "-m", "hisparse_model"]


def run(*args):
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=60)


def test_predict_json_exact():
    """The issue's example: S=3, max_model_len=320 -> B = 3*320 = 960, C = 3, W = 4."""
    out = run("predict", "--vllm", "0.31.0", "--max-num-seqs", "3", "--max-model-len", "320",
              "--prompt-lens", "3,4,200", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert list(got) == ["vllm_version", "max_num_seqs", "max_num_batched_tokens",
                         "max_decode_query_len", "swap_capacity", "workspace_rows",
                         "capture_sizes", "startup", "prompts", "inputs", "cudagraph_mode",
                         "crash", "advice", "assumptions", "error_surface", "model_config"]
    core = {k: got[k] for k in list(got)[:9]}
    assert core == {
        "vllm_version": "0.31.0", "max_num_seqs": 3, "max_num_batched_tokens": 960,
        "max_decode_query_len": 1, "swap_capacity": 3, "workspace_rows": 4,
        # 1, 2, 4 from the default list, plus max_num_seqs = 3 (uniform-decode size)
        "capture_sizes": [1, 2, 3, 4],
        "startup": {"ok": True, "error": None},
        "prompts": [
            {"n": 3, "ran": True, "ok": True, "error": None},
            {"n": 4, "ran": True, "ok": False, "error": ERROR_TEMPLATE.format(stop=4, capacity=3)},
            # the engine died on the prompt of 4: the next is not run (as live runs record)
            {"n": 200, "ran": False, "ok": None, "error": None},
        ],
    }
    # every input is echoed, the routing mode and attention backend included
    assert got["inputs"] == {
        "vllm_version": "0.31.0", "routing": "stock", "max_num_seqs": 3, "max_model_len": 320,
        "max_num_batched_tokens": None, "num_speculative_tokens": 0, "parallel_drafting": False,
        "enforce_eager": False, "cudagraph_mode": None,
        "attention_backend": "FLASH_ATTN_MLA_SPARSE", "enable_prefix_caching": True,
        "num_gpu_blocks_override": None, "host_pool_gib": 1.0, "tensor_parallel_size": 1,
        "data_parallel_size": 1, "pipeline_parallel_size": 1, "decode_context_parallel_size": 1,
        "model": "reproduction", "hf_overrides": None, "kv_cache_dtype": "auto",
        "prompt_lens": [3, 4, 200]}
    assert got["crash"] is True and got["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    # the config every count came from: the fix PR's tiny model, 2**30 // 589,824 = 1,820
    # host blocks (64 x 8 layers x 1,152 bytes), 8 hot groups of cdiv(2 x 128, 64) = 4 blocks
    assert got["model_config"] == {
        "model": "the fix PR's tiny DeepSeek-V3.2", "num_hidden_layers": 8, "mtp_layers": 0,
        "index_topk": 128, "row_format": "bf16", "row_bytes": 1152,
        "host_block_bytes": 589_824, "host_blocks": 1820, "hot_groups": 8,
        "hot_blocks_per_request": 4, "kv_cache_groups": 18}


def test_predict_json_startup_crash():
    """S=1: start-up error text is the engine's, stop=2, capacity=1."""
    got = json.loads(run("predict", "--max-num-seqs", "1", "--prompt-lens", "2", "--json").stdout)
    assert got["startup"] == {"ok": False, "error": ERROR_TEMPLATE.format(stop=2, capacity=1)}
    # the engine is dead after a start-up crash: the prompt is not run, not "ok"
    assert got["prompts"] == [{"n": 2, "ran": False, "ok": None, "error": None}]


def test_predict_options():
    """--max-num-batched-tokens, --num-speculative-tokens and --enforce-eager reach the model."""
    got = json.loads(run("predict", "--max-num-seqs", "2", "--max-num-batched-tokens", "64",
                         "--num-speculative-tokens", "1", "--enforce-eager", "--json").stdout)
    # q = 1 + 1 = 2; C = min(64, 2*2) = 4; eager -> no capture sizes
    assert (got["max_num_batched_tokens"], got["max_decode_query_len"]) == (64, 2)
    assert (got["swap_capacity"], got["workspace_rows"], got["capture_sizes"]) == (4, 5, [])


def test_predict_table():
    """Without --json the table shows C's formula and the crash text."""
    out = run("predict", "--max-num-seqs", "2", "--prompt-lens", "3")
    assert "C = min(B, S*q) = min(640, 2*1) = 2" in out.stdout
    assert "stop=3, capacity=2" in out.stdout


@pytest.mark.parametrize(
    "args,knob",
    [
        (["--vllm", "0.40.0", "--max-num-seqs", "2"], "vllm_version"),
        (["--max-num-seqs", "0"], "max_num_seqs"),
        (["--max-num-seqs", "4", "--max-num-batched-tokens", "2"], "max_num_batched_tokens"),
        (["--max-num-seqs", "2", "--prompt-lens", "3,x"], "prompt_lens"),
        (["--max-num-seqs", "2", "--prompt-lens", "400"], "prompt_lens"),
        (["--max-num-seqs", "2", "--num-speculative-tokens", "-1"], "num_speculative_tokens"),
        (["--max-num-seqs", "2", "--attention-backend", "TRITON_MLA"], "attention_backend"),
        (["--prompt-lens", "3"], "max_num_seqs"),
        (["--max-num-seqs", "x"], "max_num_seqs"),
        (["--max-num-seqs", "2", "--max-model-len", "163841"], "max_model_len"),
        (["--max-num-seqs", "1000000000000"], "derived as min(max_num_seqs * max_model_len"),
        (["--max-num-seqs", "2", "--num-speculative-tokens", "1", "--parallel-drafting"],
         "parallel_drafting: Model Runner V2 does not yet support"),
    ],
)
def test_bad_knobs(args, knob):
    """Bad input: exit status 2, one line on stderr naming the knob, no traceback."""
    out = run("predict", *args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and knob in lines[0] and "Traceback" not in out.stderr
    assert out.stdout == ""


def test_live_without_gpu_says_why():
    """`live` on a machine without GPU/vLLM exits non-zero with a one-line reason."""
    out = run("live", "--max-num-seqs", "2", "--out", "/tmp/never-written.json")
    assert out.returncode == 3
    assert out.stderr.startswith("live: cannot run the engine here:")


CHECK_CASES = [
    # S=2, prompt 3 = C + 1 -> a crash -> --check exits 1; without --check 0
    (["--max-num-seqs", "2", "--prompt-lens", "3"], 1),
    # S=2, prompt 2 = C -> no crash -> 0
    (["--max-num-seqs", "2", "--prompt-lens", "2"], 0),
    # S=1 crashes at start-up (2-token capture = C + 1) -> 1
    (["--max-num-seqs", "1", "--prompt-lens", "5"], 1),
    # 0.32.0 never crashes -> 0
    (["--vllm", "0.32.0", "--max-num-seqs", "1", "--prompt-lens", "2,3"], 0),
]


@pytest.mark.parametrize("args,status", CHECK_CASES)
def test_check_exit_status(args, status):
    """predict --check exits 1 exactly when a crash is predicted; without it, always 0."""
    assert run("predict", *args, "--check").returncode == status
    assert run("predict", *args).returncode == 0


def test_advice_is_verified():
    """Every piece of advice, applied, makes the same scenario crash-free (checked by re-running)."""
    got = json.loads(run("predict", "--max-num-seqs", "2", "--prompt-lens", "3,200",
                         "--json").stdout)
    changes = [a["change"] for a in got["advice"]]
    # S 2 -> 3 gives C = 3, W = 4: the 3-token prompt fits; 0.32.0 routes on C
    assert {"max_num_seqs": 3} in changes and {"vllm_version": "0.32.0"} in changes
    for change in changes:
        (knob, value), = change.items()
        flag = "--vllm" if knob == "vllm_version" else "--" + knob.replace("_", "-")
        again = run("predict", "--max-num-seqs", "2", "--prompt-lens", "3,200", flag,
                    str(value), "--check")
        # the flag given last wins (argparse), so this re-runs the scenario with the change
        assert again.returncode == 0, change
    human = run("predict", "--max-num-seqs", "2", "--prompt-lens", "3").stdout
    assert "To avoid it (in this order" in human and "max_num_seqs=3" in human


def test_no_advice_without_crash():
    """A configuration that never crashes gets no advice."""
    got = json.loads(run("predict", "--max-num-seqs", "2", "--prompt-lens", "2", "--json").stdout)
    assert got["advice"] == [] and got["crash"] is False


def test_help_is_generated_from_the_knobs():
    """--help lists every knob with its default and marks max_num_seqs required."""
    out = " ".join(run("predict", "--help").stdout.split())  # undo argparse's wrapping
    for flag in ("--max-num-seqs", "--max-model-len", "--max-num-batched-tokens",
                 "--num-speculative-tokens", "--enforce-eager", "--cudagraph-mode",
                 "--attention-backend", "--routing", "--vllm", "--parallel-drafting"):
        assert flag in out
    assert "(required)" in out and "(default: 320)" in out


def test_folded_batches_expand_with_full():
    """Identical consecutive batches fold into one line with a count; --full shows each."""
    # S=2 JIT warmup decodes: (1, 1) twice in a row -> one line "x2"
    folded = run("predict", "--max-num-seqs", "2", "--prompt-lens", "2").stdout
    full = run("predict", "--max-num-seqs", "2", "--prompt-lens", "2", "--full").stdout
    assert " x2" in folded and " x2" not in full
    assert len(full.splitlines()) == len(folded.splitlines()) + 1


def test_prediction_states_its_assumptions():
    """Human output ends with the model's assumptions."""
    out = run("predict", "--max-num-seqs", "2").stdout
    assert "Assumptions:" in out and "each alone in the engine" in out


EXPLAIN_CASES = [
    # stop = 3 = C + 1 with C = 2: S = 2 (K = 0) or S = 1 (K = 1) or B = 2
    ("ValueError: HiSparse swap rows exceed the configured speculative decode capacity: "
     "stop=3, capacity=2.", ["capacity=2", "C + 1", "max_num_seqs=2, num_speculative_tokens=0",
                             "max_num_seqs=1, num_speculative_tokens=1", "0.32.0"]),
    ("... stop=17, capacity=16.", ["capacity=16", "max_num_seqs=16", "max_num_seqs=8, "
                                   "num_speculative_tokens=1"]),
]


@pytest.mark.parametrize("text,needles", EXPLAIN_CASES)
def test_explain(text, needles):
    """explain turns a log line into C, the knobs that give it, and what to change."""
    out = run("explain", text)
    assert out.returncode == 0
    for needle in needles:
        assert needle in out.stdout


def test_explain_bad_text():
    """An empty text is bad input (exit 2, one line); any other unknown text is exit 4."""
    out = run("explain", "  ")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert run("explain", "something else").returncode == 4


def test_live_rejects_bad_knobs_before_probing():
    """live validates knobs first: bad knobs exit 2 even without a GPU."""
    out = run("live", "--max-num-seqs", "0", "--out", "/tmp/never-written.json")
    assert out.returncode == 2 and "max_num_seqs" in out.stderr


def test_after_a_crash_later_batches_and_prompts_are_not_run():
    """Once a start-up batch or a prompt crashes, the table lists nothing after it as run."""
    # S=1, captures [1, 2]: the memory profile runs PIECEWISE 2 (= W: crash), then would run
    # PIECEWISE 1 and FULL 1, the warmup prefill (2) and decode (1), and the captures
    # PIECEWISE 2, PIECEWISE 1, FULL 1: 7 batches after the crash never run
    dead = run("predict", "--max-num-seqs", "1", "--prompt-lens", "2,3").stdout
    assert "  not run: 7 later start-up batches (the engine died)" in dead
    assert dead.count("jit_warmup") == 0
    assert "prompt of 3 tokens: not run (the engine died at start-up)" in dead
    # S=2: the prompt of 3 = W crashes in its prefill; its decode and the 200 are not run
    out = run("predict", "--max-num-seqs", "2", "--prompt-lens", "2,3,200").stdout
    assert "  not run: 1 later batch (the engine died)" in out
    assert "prompt of 200 tokens: not run (the engine died at prompt 2, of 3 tokens)" in out


def test_simulate_reports_what_a_crash_loses(tmp_path):
    """S=4: r0 (2 tokens, 3 out) decodes last in step 2; r1 (3) + r2 (2) at step 3 make
    5 = C + 1 tokens: the crash keeps step 2's output from the caller."""
    work = tmp_path / "w.json"
    work.write_text(json.dumps({"requests": [
        {"prompt_len": 2, "max_tokens": 3},
        {"prompt_len": 3, "arrival_step": 3}, {"prompt_len": 2, "arrival_step": 3}]}))
    args = ("simulate", "--vllm", "0.31.0", "--max-num-seqs", "4", "--max-num-batched-tokens",
            "256", "--no-enable-prefix-caching", "--workload", str(work))
    got = json.loads(run(*args, "--json").stdout)
    assert got["crash"]["step"] == 3 and got["finished"] == []
    assert got["lost"] == [{"request": 0, "why": "computed but never returned"},
                           {"request": 1, "why": "still running"},
                           {"request": 2, "why": "still running"}]
    # numbered from 1 as the per-request column numbers them: #1 is the JSON's (vLLM's) 0
    assert ("lost at the crash: 3 requests: #1 (computed but never returned); #2 #3 "
            "(still running)") in run(*args).stdout
