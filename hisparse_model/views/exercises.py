"""Each notebook's "Try this": a question, the controls it starts from, and the model's answer.

d2l-style: every answer is a function of the model (:mod:`.answers`), run when the notebook
shows it, so an answer cannot go stale when the model or a default changes.  Each question
names every control it starts from (``Exercise.start``), so no answer rests on a state the
learner cannot see; tests/test_exercises.py sets those controls on the notebook's own
dashboard and recomputes each answer's numbers from the state it then holds.
:func:`try_this_html` shows a notebook's questions with each answer folded away in a
``<details>``, one click to reveal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from .answers import (Answer, b_moves_c, c_equals_b, chunked_67, default_traffic, dp_crash,
                      dp_crashing_seqs, eager_moves_crash, exposed, exposed_and_what_a_step_loses,
                      first_prompt_crash,
                      fix_matches_032, flashmla_routes, model_len_moves_c, mtp_sizes,
                      mtp_workload, recordings_agree, spaced_traffic, stop_at_w,
                      strip_with_b64, traffic_map)
from .controls import SPECS
from .exposure import SERVE_DEFAULT as SERVE
from .tables import CSS, esc


class Exercise(NamedTuple):
    start: dict  # the controls the question starts from, each one named (none left implicit)
    question: str
    answer: Callable[[dict], Answer]  # computed from ``start``, so it answers what is shown



# --------------------------------------------------------------------------
# each notebook's questions, each from the controls it names
# --------------------------------------------------------------------------

# what each notebook's dashboard opens with (its cell passes the same values)
OFF_BY_ONE = {"max_num_seqs": 2, "num_speculative_tokens": 0, "max_num_batched_tokens": 0,
              "max_model_len": 320}
STARTUP = {"vllm_version": "0.31.0", "attention_backend": "FLASH_ATTN_MLA_SPARSE",
           **OFF_BY_ONE, "enforce_eager": False, "cudagraph_mode": "default",
           "prompt_lens": "2, 3, 200"}
VERSIONS = {"vllm_version": "0.31.0", "attention_backend": "FLASH_ATTN_MLA_SPARSE",
            "routing": "stock", **OFF_BY_ONE, "prompt_lens": "2, 3, 200"}
TRAFFIC = {"requests": 2, "prompt_lens": "3, 2", "arrival_spacing": 0, "max_tokens": 8,
           "vllm_version": "0.31.0", "routing": "stock",
           "attention_backend": "FLASH_ATTN_MLA_SPARSE", "max_num_seqs": 4,
           "max_num_batched_tokens": 0, "max_model_len": 320, "num_speculative_tokens": 0,
           "enable_prefix_caching": True, "enforce_eager": False, "cudagraph_mode": "default"}
TWO_GPUS = {"vllm_version": "0.31.0", "max_num_seqs": 3, "joining_prompt": 0}
EXPOSURE = {"command": SERVE, "vllm_version": "0.31.0"}  # the knobs show the command's values
FIX_PR_KNOBS = {"command": "", "vllm_version": "0.31.0",
                "attention_backend": "FLASH_ATTN_MLA_SPARSE", "routing": "stock",
                "max_num_seqs": 2, "max_num_batched_tokens": 0, "num_speculative_tokens": 0,
                "max_model_len": 320}

EXERCISES: dict[str, list[Exercise]] = {
    "off_by_one": [
        Exercise({**OFF_BY_ONE, "num_speculative_tokens": 2},
                 "Predict q, C, W and the crashing size before looking.", mtp_sizes),
        Exercise({**OFF_BY_ONE, "max_num_seqs": 4, "max_num_batched_tokens": 4},
                 "Now C = B. Which batch crashes?", c_equals_b),
        Exercise(OFF_BY_ONE, "Drag max_model_len across its whole range: does C move?",
                 model_len_moves_c),
        Exercise({**OFF_BY_ONE, "num_speculative_tokens": 2},
                 "Type B = 2 … 7 into max_num_batched_tokens: where does C follow B?",
                 b_moves_c),
    ],
    "startup": [
        Exercise(STARTUP, "Which prompt crashes first, and why not start-up?",
                 first_prompt_crash),
        Exercise({**STARTUP, "max_num_seqs": 1, "enforce_eager": True},
                 "Where does the crash move?", eager_moves_crash),
        Exercise({**STARTUP, "max_num_batched_tokens": 64},
                 "In the strip: which max_num_seqs crash at start-up, which at a prompt, which "
                 "are safe, which refused?", strip_with_b64),
    ],
    "versions": [
        Exercise({**VERSIONS, "max_num_batched_tokens": 64, "prompt_lens": "67"},
                 "How is the 67-token prompt chunked, and which other lengths crash 0.31.0?",
                 chunked_67),
        Exercise({**VERSIONS, "routing": "fix"},
                 "Does 0.31.0 now serve every prompt as 0.32.0 does?", fix_matches_032),
        Exercise({**VERSIONS, "attention_backend": "FLASHMLA_SPARSE"},
                 "Which prefills are still routed?", flashmla_routes),
        Exercise({**VERSIONS, "num_speculative_tokens": 1, "prompt_lens": "2, 4, 5, 6"},
                 "Which prompt crashes 0.31.0?", mtp_workload),
    ],
    "recordings": [
        Exercise({}, "How many recorded runs does the model match exactly?", recordings_agree),
        Exercise({"recording": "v0.31.0-stock-s2-b64"},
                 "Why does the 67-token prompt crash with stop=3?", stop_at_w),
    ],
    "traffic": [
        Exercise(TRAFFIC, "Before running it: at which step does this traffic (prompts of 3 "
                 "and 2 tokens arriving together) crash, and with what n?", default_traffic),
        Exercise(TRAFFIC, "In the map: which max_num_seqs serve this traffic?", traffic_map),
        Exercise({**TRAFFIC, "arrival_spacing": 1}, "Does the traffic still crash?",
                 spaced_traffic),
    ],
    "two_gpus": [
        Exercise({**TWO_GPUS, "max_num_seqs": 7},
                 "Which rank dies, at which step, on whose batch?", dp_crash),
        Exercise(TWO_GPUS, "In the strip: which max_num_seqs crash this scenario?",
                 dp_crashing_seqs),
        Exercise({**TWO_GPUS, "vllm_version": "0.32.0", "max_num_seqs": 7},
                 "Does any rank crash?", dp_crash),
    ],
    "exposure": [
        Exercise({**EXPOSURE, "command": SERVE + " --attention-backend FLASHMLA_SPARSE"},
                 "Is the server still exposed, and why?", exposed),
        Exercise({**EXPOSURE, "command": SERVE + " --max-num-batched-tokens 1024"},
                 "Safe? (and what does a step lose?)", exposed_and_what_a_step_loses),
        Exercise({**EXPOSURE, "vllm_version": "0.32.0"},
                 "The same command under 0.32.0: exposed?", exposed),
        Exercise({**EXPOSURE, "command": SERVE + " --max-model-len 1000"},
                 "No prompt of 1025 tokens fits any more. Which traffic still kills the "
                 "server?", exposed),
        Exercise(FIX_PR_KNOBS, "The fix PR's knobs, with the command box empty: which step "
                 "size kills it?", exposed),
        Exercise({**FIX_PR_KNOBS, "max_num_batched_tokens": 2}, "Is it still exposed?",
                 exposed),
    ],
}


def start_html(start: dict) -> str:
    """The controls a question starts from, one ``name = value`` each (0: not set), as HTML:
    a command as it is typed into the box (``<code class='hs-command'>``, nothing escaped
    but for HTML), so that what a learner copies from the page pastes as the command."""
    def shown(name, value):
        if name == "command":
            return (f"command = <code class='hs-command'>{esc(value)}</code>" if value
                    else "command box empty")
        return esc(f"{name} = {value}" + (" (not set)" if value == 0 and name in SPECS
                                          and SPECS[name].optional else ""))
    return "; ".join(shown(n, v) for n, v in start.items())


def try_this_html(notebook: str) -> str:
    """The notebook's "Try this": each question with the controls it starts from, its
    computed answer folded away."""
    items = "".join(
        f"<li><div class='hs-start'>Start from: {start_html(ex.start)}"
        + ("" if ex.start else "any state") + f"</div>{esc(ex.question)}"
        f"<details class='hs-answer'><summary>Show the answer</summary>"
        f"{esc(ex.answer(ex.start).text)}</details></li>" for ex in EXERCISES[notebook])
    # no heading of its own: each notebook heads the cell "Try this" (twice read as two lists)
    return (f"{CSS}<div class='hisparse-dashboard hs-try-this'>"
            f"<ol>{items}</ol><div class='hs-note'>Each question names every control it starts "
            f"from; each answer is computed by the model for those controls when this cell "
            f"runs (hisparse_model.views.exercises), so it is never stale.</div></div>")
