"""Notebook 7's dashboard, driven without a browser: a pasted command or the knobs -> the verdict.

Expected values are the issue's arithmetic: vllm serve's defaults (S = 1024, B = 8192, C = 1024)
on 0.31.0 are exposed by 1025-token steps (a lone prompt, the last chunk of 8192 + 1025 = 9217
tokens, a burst); the FLASHMLA_SPARSE backend or 0.32.0 are not; the fix PR's S = 2 knobs are
exposed by a 3-token step.
"""

import re

from hisparse_model.views.exposure import SERVE_DEFAULT, exposure_dashboard
from hisparse_model.views.page import TABS


def _visible(markup: str) -> str:
    markup = re.sub(r"<(\w+)[^>]*\shidden[\s>][^<]*</\1>", " ", markup)
    return " ".join(re.sub(r"<[^>]+>", " ", markup).split())


def test_pasted_serve_command_is_exposed_with_examples_and_advice():
    """The default serve command: exposed, three 1025-token kinds replayed, advice with flags."""
    d = exposure_dashboard(SERVE_DEFAULT)
    assert d.error is None
    assert d.labels["exposed"] == "exposed" and d.labels["tokens"] == "1025,1025,1025"
    assert d.labels["kinds"] == "lone_prompt,last_chunk,burst" and d.labels["verified"] == "true"
    text = _visible(d.numbers.value)
    assert "EXPOSED for all traffic" in text and "9217-token prompt" in text
    assert "--attention-backend FLASHMLA_SPARSE" in text and "upgrade to vLLM 0.32.0" in text
    assert "stop=1025, capacity=1024" in text


def test_changes_follow_the_command_and_the_knobs():
    """A safe command says never and why; an empty box reads the knobs; a refusal is shown."""
    d = exposure_dashboard(SERVE_DEFAULT + " --attention-backend FLASHMLA_SPARSE")
    assert d.labels["exposed"] == "safe" and "decode part" in _visible(d.numbers.value)
    d.controls["vllm_version"].value = "0.32.0"
    d.controls["command"].value = SERVE_DEFAULT
    assert d.labels["exposed"] == "safe" and "routes on C" in _visible(d.numbers.value)
    d.controls["vllm_version"].value = "0.31.0"
    d.controls["command"].value = ""  # the knobs: the fix PR's S = 2, C = 2
    assert d.labels["exposed"] == "exposed" and d.labels["tokens"] == "3"
    d.controls["max_num_batched_tokens"].value = 2  # B = C = 2: no room for 3
    assert d.labels["exposed"] == "safe" and d.labels["advice"] == "0"
    d.controls["command"].value = "vllm serve deepseek-ai/DeepSeek-V3.2"  # HiSparse off
    assert d.error and "HiSparse is off" in d.error
    d.controls["command"].value = "vllm serve 'unclosed"
    assert d.error.startswith("command:")


def test_the_app_has_the_tab():
    """The app shows the dashboard as tab 7."""
    titles = [title for title, _ in TABS]
    assert titles[-1] == "7 · is my server exposed?"


# (knob moved after the serve command was pasted, value) -> (verdict, C, W, digest tokens)
OVERRIDES = [
    # S = 3 overrides S = 1024: C = min(8192, 3 · 1) = 3, W = 4, 4-token steps kill it
    (("max_num_seqs", 3), ("exposed", "3", "4", "4,4,4")),
    # K = 1: q = 2, C = min(8192, 1024 · 2) = 2048; still exposed (by 2049-token steps)
    (("num_speculative_tokens", 1), ("exposed", "2048", "2049", None)),
    # the backend toggle overrides the command's (default) FLASH_ATTN_MLA_SPARSE: no prefill routed
    (("attention_backend", "FLASHMLA_SPARSE"), ("safe", "1024", "1025", "none")),
    # routing = fix routes on C
    (("routing", "fix"), ("safe", "1024", "1025", "none")),
]


def test_a_moved_knob_overrides_the_pasted_command():
    """With a command pasted, each knob moved since the dashboard opened overrides the command's
    value for it (and the source says so); the picture's C and W follow."""
    for (name, value), (word, c, w, tokens) in OVERRIDES:
        d = exposure_dashboard(SERVE_DEFAULT)
        d.controls[name].value = value
        assert d.labels["exposed"] == word, (name, value, d.labels)
        assert f"C={c} W={w}" in d.labels["summary"]
        assert f"with {name} = {value} from the knobs" in d.labels["source"]
        if tokens is not None:
            assert d.labels["tokens"] == tokens
        assert f"data-c='{c}'" in d.numbers.value or f'data-c="{c}"' in d.numbers.value
