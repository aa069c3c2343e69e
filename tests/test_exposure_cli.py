"""check and predict --exposure: the verdict for all traffic leads; --check exits 1 when exposed.

The done-means cases of issue 27: vllm serve's defaults on 0.31.0 (S = 1024, B = 8192,
C = 1024) are exposed by a 1025-token step, whatever the three sample prompts do; the
FLASHMLA_SPARSE backend, B = 1024 or vLLM 0.32.0 are not, each with its reason.
"""

import json
import subprocess
import sys

import pytest

from hisparse_model.answers.deployment_advice import deployment_advice, deployment_advice_lines
from hisparse_model.answers.exposure import exposure
from hisparse_model.model.knobs import Knobs
from hisparse_model.model.reproduction import TINY_OVERRIDES
from hisparse_flags import connector_flags

CHECK = [sys.executable, "-m", "hisparse_model", "check"]
SERVE = ["--", "vllm", "serve", "deepseek-ai/DeepSeek-V3.2", *connector_flags()]


def run(*args):
    return subprocess.run([*CHECK, *args], capture_output=True, text=True, timeout=120)


def test_serve_defaults_exposed_exit_1():
    """The default serve command on 0.31.0 exits 1 and names the 1025-token step first."""
    out = run("--check", *SERVE)
    assert out.returncode == 1, out.stderr
    head = out.stdout.splitlines()[:2]
    assert head[1].startswith("  EXPOSED") and "exactly 1025 tokens" in head[1]
    assert '{"requests": [{"prompt_len": 1025}]}' in out.stdout
    # the three sample prompts (2, 3, 200) are fine: only the prompts' meaning exits 0
    assert run("--check", "--check-prompts-only", *SERVE).returncode == 0


@pytest.mark.parametrize("extra,before,words", [
    (["--attention-backend", "FLASHMLA_SPARSE"], [], "decode part"),
    (["--max-num-batched-tokens", "1024"], [], "B = 1024 <= C = 1024"),
    ([], ["--vllm", "0.32.0"], "routes on C"),
])
def test_safe_changes_exit_0_with_reason(extra, before, words):
    """Each change that makes the server safe exits 0 and says why."""
    out = run("--check", *before, *SERVE, *extra)
    assert out.returncode == 0, out.stdout[:400] + out.stderr
    assert "NOT EXPOSED" in out.stdout.splitlines()[1] and words in out.stdout


def test_json_exposure_block():
    """--json leads with "exposure": exposed, steps (what, tokens, example, error), never_because"""
    got = json.loads(run("--json", *SERVE).stdout)
    assert list(got)[0] == "exposure"
    exp = got["exposure"]
    assert exp["exposed"] is True and exp["never_because"] is None
    step = exp["steps"][0]
    assert step["tokens"] == 1025 and step["example"] == {"requests": [{"prompt_len": 1025}]}
    assert step["error"].endswith("stop=1025, capacity=1024.") and step["verified"] is True
    assert all(a["why"].startswith("no traffic can kill it") for a in got["advice"])
    safe = json.loads(run("--json", "--vllm", "0.32.0", *SERVE).stdout)["exposure"]
    assert safe["exposed"] is False and safe["steps"] == []
    assert "routes on C" in safe["never_because"]


def test_predict_exposure_flag():
    """predict --exposure --check exits 1 on the fix PR's setup even with safe prompts."""
    args = [sys.executable, "-m", "hisparse_model", "predict", "--max-num-seqs", "2",
            "--prompt-lens", "2"]
    assert subprocess.run(args + ["--check"], capture_output=True, timeout=120).returncode == 0
    out = subprocess.run(args + ["--check", "--exposure"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1 and "exactly 3 tokens" in out.stdout


def test_deployment_advice_is_verified_and_never_only_moves_c():
    """Every change offered makes the analysis say 'not exposed'; S 1024 -> 1023 is not offered."""
    base = Knobs(max_num_seqs=1024, max_num_batched_tokens=8192, max_model_len=163840,
                 host_pool_gib=512)
    advice = deployment_advice(base, 200)
    changes = [a["change"] for a in advice]
    assert changes[0] == {"vllm_version": "0.32.0"}
    # S = ceil(8192 / 1) = 8192 makes C = B; K = ceil(8192 / 1024) - 1 = 7 makes S*q = B
    assert {"max_num_seqs": 8192, "max_num_batched_tokens": 8192} in changes
    assert {"num_speculative_tokens": 7, "max_num_batched_tokens": 8192} in changes
    assert {"max_num_batched_tokens": 1024} in changes
    for change in changes:
        extra = {"routing": "stock"} if change.get("vllm_version") else {}
        assert exposure(base.replace(**change, **extra)).exposed is False
    assert all(c.get("max_num_seqs") != 1023 for c in changes)
    assert deployment_advice(base.replace(vllm_version="0.32.0")) == []


def test_deployment_advice_skips_refused_and_unsafe_changes():
    """A change vLLM refuses is not offered (K = 7 with parallel drafting: Model Runner V2
    refuses it); a start-up crash's advice is only what the analysis finds safe."""
    base = Knobs(max_num_seqs=1024, max_num_batched_tokens=8192, max_model_len=163840,
                 host_pool_gib=512,
                 parallel_drafting=True)  # inert without K
    changes = [a["change"] for a in deployment_advice(base)]
    assert changes and all("num_speculative_tokens" not in c for c in changes)
    start = Knobs(max_num_seqs=1)  # S = 1: a PIECEWISE capture of 2 = W tokens at start-up
    assert exposure(start).steps[0].kind == "startup"
    for a in deployment_advice(start):
        assert exposure(start.replace(**a["change"], **(
            {"routing": "stock"} if "vllm_version" in a["change"] else {}))).exposed is False
    assert deployment_advice_lines([]) == [
        "  (no change the exposure analysis checks makes it safe)"]


def test_undecided_exits_1():
    """Where the model cannot decide (a set KV pool of 177 blocks may not hold the 513 + 512
    burst, 113 + 113 = 226 blocks), check says UNDECIDED and --check exits 1."""
    out = run("--check", "--prompt-lens", "2", *SERVE, "--max-model-len", "1000",
              "--num-gpu-blocks-override", "177", "--hf-overrides",
              json.dumps(TINY_OVERRIDES))  # the fix PR's tiny model: 8 hot groups
    assert out.returncode == 1 and out.stdout.splitlines()[1].startswith("  UNDECIDED")
