"""``hisparse simulate``: every step of its JSON hand-computed, exit statuses, bad input."""

import json
import subprocess
import sys

import pytest

CMD = [sys.executable, "-m", "hisparse_model", "simulate"]
ERR = ("ValueError: HiSparse swap rows exceed the configured speculative decode capacity: "
       "stop={stop}, capacity={capacity}.")


def run(tmp_path, workload, *args):
    path = tmp_path / "traffic.json"
    path.write_text(json.dumps(workload))
    return subprocess.run([*CMD, "--workload", str(path), *args], capture_output=True,
                          text=True, timeout=120)


def one_rank(steps: list[dict]) -> list[dict]:
    """A one-rank step's JSON keeps the flat keys it had before data parallelism, and beside
    them the same record as rank 0 (no dummy) and the mode the one rank agreed on (its own)."""
    flat = []
    for s in steps:
        s = dict(s)
        ranks, mode = s.pop("ranks"), s.pop("mode")
        assert ranks == [{"rank": 0, "dummy": None,
                          **{k: v for k, v in s.items() if k != "step"}}]
        assert mode == s["dispatch"]
        flat.append(s)
    return flat


def test_one_request_every_step(tmp_path):
    """S=4 on 0.32.0, one 3-token prompt, 2 outputs: a PIECEWISE prefill, then one FULL decode.

    B = 4 * 320 = 1280, q = 1, C = min(1280, 4) = 4, W = 5; capture sizes: the grid up to
    min(1280, 2 * 4) = 8 is 1, 2, 4, 8 (S = 4 is on it).
    """
    out = run(tmp_path, {"requests": [{"prompt_len": 3, "max_tokens": 2}]},
              "--vllm", "0.32.0", "--max-num-seqs", "4", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert (got["max_num_batched_tokens"], got["max_decode_query_len"], got["swap_capacity"],
            got["workspace_rows"], got["capture_sizes"]) == (1280, 1, 4, 5, [1, 2, 4, 8])
    assert got["startup"] == {"ok": True, "error": None}
    assert one_rank(got["steps"]) == [
        # the prompt: 3 tokens > q = 1, a prefill; the smallest PIECEWISE graph holding 3 is 4;
        # no decode token and every page resident: all 3 routed; 3 <= C = 4 -> swap_in
        {"step": 0, "scheduled": {"0": 3}, "num_tokens": 3, "num_decode_tokens": 0,
         "dispatch": "PIECEWISE", "padded": 4, "resident": True, "routed_tokens": 3,
         "route": "swap_in", "error": None, "draft": None},  # no MTP: no draft steps
        # async scheduling: the second output token is scheduled before the first is back;
        # 1 request of 1 token is a uniform decode: the FULL graph of 1 replays, routes nothing
        {"step": 1, "scheduled": {"0": 1}, "num_tokens": 1, "num_decode_tokens": 1,
         "dispatch": "FULL", "padded": 1, "resident": True, "routed_tokens": 0,
         "route": None, "error": None, "draft": None},
    ]  # 3 + 1 = prompt + max_tokens - 1 tokens: the last output is never fed back
    assert got["crash"] is None and got["finished"] == [0] and got["advice"] == []
    assert got["lost"] == []  # no crash: the caller received everything
    # the workload is echoed with its defaults filled in
    assert got["inputs"]["workload"] == [{"prompt_len": 3, "max_tokens": 2, "arrival_step": 0}]
    assert any("async scheduling" in a for a in got["assumptions"])


CONCURRENT = {"requests": [{"prompt_len": 3}, {"prompt_len": 2}]}


def test_two_prompts_together_crash_031(tmp_path):
    """S=4 (C = 4): prompts of 3 and 2 tokens in one step route 5 = C + 1 tokens: 0.31.0 dies at step 0."""
    out = run(tmp_path, CONCURRENT, "--vllm", "0.31.0", "--max-num-seqs", "4", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert one_rank(got["steps"]) == [
        # runner order: shorter first (2, then 3), both > q = 1: no decode token; 5 tokens
        # replay the PIECEWISE graph of 8; all 5 routed; 5 <= W = 5 -> swap_in, 5 > C = 4
        {"step": 0, "scheduled": {"0": 3, "1": 2}, "num_tokens": 5, "num_decode_tokens": 0,
         "dispatch": "PIECEWISE", "padded": 8, "resident": True, "routed_tokens": 5,
         "route": "swap_in", "error": ERR.format(stop=5, capacity=4), "draft": None},
    ]
    assert got["crash"] == {"step": 0, "error": ERR.format(stop=5, capacity=4)}
    assert got["finished"] == []
    # both prompts were in the step that raised: neither has an output yet
    assert got["lost"] == [{"request": 0, "why": "still running"},
                           {"request": 1, "why": "still running"}]
    # the advice names a change that avoids the crash (each is verified by the model)
    assert got["advice"]


@pytest.mark.parametrize("version,check,status", [
    ("0.31.0", True, 1),  # --check: a predicted crash is exit status 1
    ("0.31.0", False, 0),  # without --check the prediction itself is the answer
    ("0.32.0", True, 0),  # 0.32.0 routes 5 > C all-resident: no crash
])
def test_check_exit_status(tmp_path, version, check, status):
    """Exit status 1 only with --check and a predicted crash; the text names vLLM's error."""
    out = run(tmp_path, CONCURRENT, "--vllm", version, "--max-num-seqs", "4",
              *(["--check"] if check else []))
    assert out.returncode == status, out.stderr
    assert (ERR.format(stop=5, capacity=4) in out.stdout) == (version == "0.31.0")


@pytest.mark.parametrize("workload,needle", [
    ({"requests": [{"prompt_len": 3}, {"prompt_len": 0}]}, "request 2: prompt_len"),  # from 1
    ({"requests": [{"prompt_len": 400}]}, "max_model_len"),  # 400 >= max_model_len 320
])
def test_bad_workload_is_one_line_exit_2(tmp_path, workload, needle):
    """A bad request: exit 2, one line on stderr naming it, nothing on stdout."""
    out = run(tmp_path, workload, "--max-num-seqs", "4", "--json")
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr


def test_missing_workload_file_exit_2(tmp_path):
    """A workload path that does not exist: exit 2, one line naming the file."""
    out = subprocess.run([*CMD, "--workload", str(tmp_path / "nope.json"), "--max-num-seqs", "4"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "nope.json" in out.stderr
