"""Advice an engineer would take: the fix first, then changes by cost, crippling ones last and
marked; each cost in the model's terms; every safe max_num_seqs range named."""

import json
import subprocess
import sys

from hisparse_model import Knobs
from hisparse_model.answers.advice import CRIPPLES, FIX, KEEPS, LOSES, advise, prediction_crashes

CMD = [sys.executable, "-m", "hisparse_model"]


def run(*args):
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=120)


def test_predict_advice_order_and_costs():
    """S = 2, prompts 2, 3, 200 on 0.31.0: the fix, then S = 3, then K = 1; B = 2 cripples, last."""
    got = json.loads(run("predict", "--max-num-seqs", "2", "--json").stdout)
    advice = got["advice"]
    assert all(list(a) == ["change", "why", "cost"] for a in advice)
    assert [a["change"] for a in advice] == [
        {"vllm_version": "0.32.0"},  # the upgrade: routes on C
        {"routing": "fix"},  # 0.31.0 with the fix's predicate
        {"max_num_seqs": 3},  # C = 3, W = 4: the 3-token prompt fits; S = 1 dies at start-up
        {"num_speculative_tokens": 1},  # q = 2, C = 4, W = 5: no batch of 5
        {"max_num_batched_tokens": 2},  # C = B = 2: the 3-token prompt goes in 2 + 1
    ]
    fix, _, seqs, drafts, tokens = (a["cost"] for a in advice)
    assert fix["shrinks"] == [] and not fix["cripples"]
    # S 2 -> 3: B = min(S * 320, 16384) = 640 -> 960; the 200-token prompt: 1 chunk either way
    assert (seqs["requests_per_step"], seqs["tokens_per_step"]) == ([2, 3], [640, 960])
    assert seqs["prefill_chunks_longest_prompt"] == [1, 1] and seqs["shrinks"] == []
    assert drafts["decode_tokens_per_request"] == [1, 2]
    # B 640 -> 2: tokens per step cut 320-fold; the 200-token prompt needs 200 / 2 = 100 chunks
    assert tokens["tokens_per_step"] == [640, 2]
    assert tokens["prefill_chunks_longest_prompt"] == [1, 100] and tokens["cripples"]


def test_predict_text_marks_crippling_changes():
    """The text lists usable changes first, numbered, each with its cost; crippling ones apart."""
    out = run("predict", "--max-num-seqs", "2").stdout
    usable, crippling = out.split("Also avoid it, but cripple the engine (not advised):")
    assert usable.index("1. vllm_version=0.32.0") < usable.index("max_num_seqs=3")
    assert "max_num_batched_tokens=2" not in usable
    assert "5. max_num_batched_tokens=2" in crippling and "tokens/step 640 -> 2" in crippling
    assert "cost: keeps throughput: requests/step 2 -> 3; tokens/step 640 -> 960" in usable


def test_simulate_names_every_safe_max_num_seqs_range(tmp_path):
    """The 3 + 2 workload at S = 4 (C = 4, W = 5 = 3 + 2): safe at 2-3 and 5-64, both named."""
    work = tmp_path / "w.json"
    work.write_text(json.dumps([{"prompt_len": 3}, {"prompt_len": 2}]))
    got = json.loads(run("simulate", "--max-num-seqs", "4", "--workload", str(work),
                         "--json").stdout)
    seqs = [a for a in got["advice"] if "max_num_seqs" in a["change"]]
    # S = 5 (above, keeps throughput) before S = 3 (below, fewer requests per step);
    # S = 1 dies at start-up (W = 2 is a capture)
    assert [a["change"]["max_num_seqs"] for a in seqs] == [5, 3]
    assert all("every safe max_num_seqs in 1-64: 2-3,5-64" in a["why"] for a in seqs)
    assert seqs[1]["cost"]["shrinks"] == ["requests_per_step", "tokens_per_step"]


def test_ranks_follow_costs():
    """Ranks: the fix, then changes that shrink nothing, then losses, then crippling ones."""
    assert FIX < KEEPS < LOSES < CRIPPLES
    advice = advise(Knobs(max_num_seqs=2), prediction_crashes([3, 200]))
    verdicts = [a["cost"]["text"].split(":")[0] for a in advice]
    assert verdicts[-1].startswith("CRIPPLES")
    assert not any(v.startswith("CRIPPLES") for v in verdicts[:-1])


def test_no_fix_advice_on_a_fixed_version():
    """On 0.32.0 a crash (the MTP warmup's IndexError, B < K + 2) gets no upgrade advice."""
    knobs = Knobs(vllm_version="0.32.0", max_num_seqs=1, num_speculative_tokens=1,
                  max_num_batched_tokens=2)
    advice = advise(knobs, prediction_crashes([2]))
    changes = [a["change"] for a in advice]
    assert all("vllm_version" not in c and "routing" not in c for c in changes)
    # B = 3 = K + 2: the warmup has one request of q + 1 = 3 tokens
    assert {"max_num_batched_tokens": 3} in changes


def test_ranges_are_written_as_the_maps_write_them():
    """Consecutive values fold into a-b; gaps split; nothing is "none"."""
    from hisparse_model.answers.advice import ranges

    assert ranges([2, 3, 5, 6, 7, 64]) == "2-3,5-7,64"
    assert ranges([1]) == "1" and ranges([]) == "none"
