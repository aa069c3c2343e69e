"""Notebook 7's dashboard, driven without a browser: a pasted command or the knobs -> the verdict.

Expected values are the issue's arithmetic: vllm serve's defaults (S = 1024, B = 8192, C = 1024)
on 0.31.0 are exposed by 1025-token steps (a lone prompt, the last chunk of 8192 + 1025 = 9217
tokens, a burst); the FLASHMLA_SPARSE backend or 0.32.0 are not; the fix PR's S = 2 knobs are
exposed by a 3-token step.
"""

import html
import json
import re

import pytest

from hisparse_model.views.exposure import SERVE_DEFAULT, exposure_dashboard
from hisparse_model.views.first_request import startup_dashboard
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
    assert "EXPOSED: some traffic kills this server" in text and "9217-token prompt" in text
    assert "--attention-backend FLASHMLA_SPARSE" in text and "upgrade to vLLM 0.32.0" in text
    assert "stop=1025, capacity=1024" in text


def test_changes_follow_the_command_and_the_knobs():
    """A safe command says never and why; a pasted command takes check's default version
    (a version clicked before it does not survive); an empty box reads the knobs; a refusal
    is shown."""
    d = exposure_dashboard(SERVE_DEFAULT + " --attention-backend FLASHMLA_SPARSE")
    assert d.labels["exposed"] == "safe" and "decode part" in _visible(d.numbers.value)
    d.controls["vllm_version"].value = "0.32.0"
    d.controls["command"].value = SERVE_DEFAULT  # a new command: check's default version
    assert d.controls["vllm_version"].value == "0.31.0" and d.labels["exposed"] == "exposed"
    d.controls["vllm_version"].value = "0.32.0"  # clicked after the paste: it holds
    assert d.labels["exposed"] == "safe" and "routes on C" in _visible(d.numbers.value)
    d.controls["vllm_version"].value = "0.31.0"
    d.controls["command"].value = ""  # the knobs, which show the last command's values
    # no control shows the host pool: the knobs keep the last command's
    assert d.labels["source"] == "the knobs above, with the last command's 2048 GiB host pool"
    assert d.controls["max_num_seqs"].value == 1024
    for name, value in (("max_num_seqs", 2), ("max_model_len", 320),
                        ("max_num_batched_tokens", 0)):  # the fix PR's S = 2, C = 2
        d.controls[name].value = value
    assert d.labels["exposed"] == "exposed" and d.labels["tokens"] == "3"
    d.controls["max_num_batched_tokens"].value = 2  # B = C = 2: no room for 3
    assert d.labels["exposed"] == "safe" and d.labels["advice"] == "0"
    d.controls["command"].value = "vllm serve deepseek-ai/DeepSeek-V3.2"  # HiSparse off
    assert d.error and "HiSparse is off" in d.error
    d.controls["command"].value = "vllm serve 'unclosed"
    assert d.error.startswith("No closing quotation")  # the typist's slip, named as such


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


def _shown(dash) -> dict:
    return {n: dash.controls[n].value for n in ("max_num_seqs", "max_num_batched_tokens",
                                                 "max_model_len", "attention_backend")}


def test_the_controls_show_the_values_in_effect_and_say_where_each_came_from():
    """Notebook 7 (issue 39, item 3): the pasted command's values are in the controls; a move
    overrides one and the source line names it; a new command drops earlier moves; the reset
    button goes back to the command; a refusal names the moved value and the way back."""
    import html
    import shlex

    from hisparse_model.inputs.launch import from_command
    from hisparse_model.views.exposure import SERVE_DEFAULT, exposure_dashboard

    dash = exposure_dashboard(SERVE_DEFAULT)
    version = dash.controls["vllm_version"].value
    k = from_command(shlex.split(SERVE_DEFAULT), version).knobs  # the model's reading
    assert _shown(dash) == {"max_num_seqs": k.max_num_seqs,  # 1024 on an H200: in range now
                            "max_num_batched_tokens": k.max_num_batched_tokens,
                            "max_model_len": k.max_model_len, "attention_backend":
                            k.attention_backend}
    assert dash.labels["source"] == "the pasted vllm serve command"
    # B moved below S: refused, and the line says the 64 is the knobs' and how to undo it
    dash.controls["max_num_batched_tokens"].value = 64
    said = html.unescape(dash.message.value)
    assert "max_num_batched_tokens = 64 from the knobs" in said and "reset the knobs" in said
    # a new command: its values in the controls, the old move dropped
    command = SERVE_DEFAULT + " --max-num-batched-tokens 4096"
    dash.controls["command"].value = command
    assert dash.controls["max_num_batched_tokens"].value == 4096 and dash.error is None
    assert dash.labels["source"] == "the pasted vllm serve command"
    # a move overrides the command's value and is named; reset goes back
    dash.controls["max_num_seqs"].value = 7
    assert dash.labels["source"] == ("the pasted vllm serve command, with max_num_seqs = 7 "
                                     "from the knobs")
    dash.reset.click()
    assert dash.controls["max_num_seqs"].value == k.max_num_seqs
    assert dash.labels["source"] == "the pasted vllm serve command"


def test_a_quoting_slip_is_named_as_the_typists_not_vllms():
    """A command the shell cannot split (an unclosed quote) is "typo in the command", says
    the knobs still show the last command read and how to go on, and never blames vLLM;
    emptying the box answers for the knobs alone."""
    from hisparse_model.views.exposure import SERVE_DEFAULT, exposure_dashboard

    dash = exposure_dashboard(SERVE_DEFAULT)
    dash.controls["command"].value = SERVE_DEFAULT[:-1]  # the closing quote dropped
    assert dash.error.startswith("No closing quotation")
    assert "typo in the command:" in dash.message.value
    assert "vLLM would reject" not in dash.message.value
    assert "last command that was read" in dash.error and "empty the box" in dash.error
    dash.controls["command"].value = ""
    assert dash.error is None and dash.state["source"].startswith("the knobs")


# (a vllm serve command's flags, the title of notebook 2's picture for the same knobs, the
# verdict's reason shown): MTP with max_num_batched_tokens < K + 2 leaves the JIT warmup with
# no request, so start-up dies of IndexError before any token reaches the routing (n = 0)
NEVER_STARTS_ROWS = [
    # K 1, B 2 < 1 + 2 = 3: the walkthrough's command
    ("--max-num-seqs 1 --max-num-batched-tokens 2", 1,
     "The batch that fails start-up: warmup decode of no request",
     "With MTP (K = 1) and max_num_batched_tokens = 2 < K + 2 = 3 the JIT warmup has no request"),
    # K 2, B 3 < 2 + 2 = 4
    ("--max-num-seqs 2 --max-num-batched-tokens 3", 2,
     "The batch that fails start-up: warmup decode of no request",
     "With MTP (K = 2) and max_num_batched_tokens = 3 < K + 2 = 4 the JIT warmup has no request"),
]


@pytest.mark.parametrize("flags, k, title, why", NEVER_STARTS_ROWS)
def test_a_server_that_never_starts_shows_its_failing_start_up_batch(flags, k, title, why):
    """A server that never starts shows why and notebook 2's picture of the start-up batch
    that fails, never 'the model cannot decide'."""
    spec = json.dumps({"method": "deepseek_mtp", "num_speculative_tokens": k})
    d = exposure_dashboard(f"{SERVE_DEFAULT} {flags} --speculative-config '{spec}'")
    assert "data-verdict='never_starts'" in d.numbers.value
    text = _visible(d.numbers.value)
    assert "cannot decide" not in text and "None" not in text
    assert why in html.unescape(text)
    pictures = re.findall(r"<svg[^>]*hs-buffers.*?</svg>", d.numbers.value, re.S)
    assert len(pictures) == 1 and f"<title>{title}</title>" in pictures[0]
    assert "data-n='0'" in pictures[0]  # no token reaches the routing
    nb2 = startup_dashboard(**{n: d.state[n] for n in (
        "max_num_seqs", "max_num_batched_tokens", "num_speculative_tokens", "max_model_len")})
    assert pictures[0] in nb2.numbers.value  # the same picture, drawn by notebook 2's code
