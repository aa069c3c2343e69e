"""The command line: exact JSON schema, readable table, exit status 2 with one line naming the knob."""

import json
import subprocess
import sys

import pytest

from hisparse_model.routing import ERROR_TEMPLATE

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
                         "capture_sizes", "startup", "prompts"]
    assert got == {
        "vllm_version": "0.31.0", "max_num_seqs": 3, "max_num_batched_tokens": 960,
        "max_decode_query_len": 1, "swap_capacity": 3, "workspace_rows": 4,
        # 1, 2, 4 from the default list, plus max_num_seqs = 3 (uniform-decode size)
        "capture_sizes": [1, 2, 3, 4],
        "startup": {"ok": True, "error": None},
        "prompts": [
            {"n": 3, "ok": True, "error": None},
            {"n": 4, "ok": False, "error": ERROR_TEMPLATE.format(stop=4, capacity=3)},
            {"n": 200, "ok": True, "error": None},
        ],
    }


def test_predict_json_startup_crash():
    """S=1: start-up error text is the engine's, stop=2, capacity=1."""
    got = json.loads(run("predict", "--max-num-seqs", "1", "--prompt-lens", "2", "--json").stdout)
    assert got["startup"] == {"ok": False, "error": ERROR_TEMPLATE.format(stop=2, capacity=1)}


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
