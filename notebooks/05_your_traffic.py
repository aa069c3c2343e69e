# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 5 · Your traffic: will it crash 0.31.0, at which step, and what do I change?
#
# > **Run All first** (menu *Run* ▸ *Run All Cells*): the notebook is stored without outputs,
# > so its dashboards appear once it has run. Open the `.ipynb`; the `.py` beside it is the
# > same notebook as text, for review.
#
# New to these words (prefill, decode, KV cache, MTP, C, W, q, B, S, stock, all-resident, the fix PR)?
# Each is defined in [notebook 1's glossary](01_off_by_one.ipynb#Glossary).
#
# Notebooks 1–4 served one prompt at a time. A real engine serves requests **together**, and
# that is where most 0.31.0 crashes come from: on the H200, two short prompts that were fine one
# at a time killed the engine when they were submitted together. This notebook serves a whole
# workload through an exact model of vLLM's scheduler (`hisparse_model.answers.simulate`), step by step,
# and routes every step as the engine does.
#
# ## What happens in one engine step, in plain words
#
# * **Several requests share a step.** Each engine step, vLLM's scheduler first gives every
#   running request its next tokens (a decode: 1 token, or 1 + K under MTP), then admits
#   waiting requests in arrival order, as long as the step has token budget left
#   (B = `max_num_batched_tokens`) and fewer than `max_num_seqs` requests run. A prompt longer
#   than the budget left is cut into chunks (chunked prefill).
# * **Their prefills add up.** Two prompts of 3 and 2 tokens that arrive together are
#   prefilled in one step of 3 + 2 = 5 tokens.
# * **A step of exactly C + 1 routed tokens crashes 0.31.0.** 0.31.0 sends a batch of
#   n ≤ W = C + 1 routed tokens to `swap_in`, which has only C = min(B, max_num_seqs · q) rows
#   (notebook 1). With `max_num_seqs=4`, C = 4 and W = 5: the 5-token step above raises
#   `stop=5, capacity=4`.
# * **Decodes of running requests are handed over separately.** FLASH_ATTN_MLA_SPARSE hands the
#   routing the whole step only when the step has no decode token; a *mixed* step (decodes of
#   running requests plus a prefill) hands over only its decode part, and the prefill is
#   staged. The decode part is at most one q-token query per running request and at most B
#   tokens, so at most min(B, max_num_seqs · q) = C: a mixed step never crashes, only steps
#   made of prefills alone can. (FLASHMLA_SPARSE never routes a prefill at all.)
# * **Prefix caching shortens prefills.** With `enable_prefix_caching` (vLLM's default), a
#   prompt whose first 64-token blocks were computed before only computes the rest: a 69-token
#   prompt after a 64-token one computes 69 − 64 = 5 tokens, which is W again.
# * **Async scheduling** (on by default here): vLLM schedules step k + 1 while step k still
#   runs, so a request's first decode is scheduled in the very next step. A request with
#   `arrival_step` k joins before engine step k is scheduled; steps with no work are skipped
#   in the tables.

# %%
from IPython.display import HTML, display

from hisparse_model import Knobs
from hisparse_model.answers.simulate import simulate
from hisparse_model.views.traffic import schedule_report
from hisparse_model.schedule.workload import synthetic


def show(knobs, workload):
    """The crash (or none) and every engine step, as the dashboard below shows them."""
    display(HTML(schedule_report(simulate(knobs, workload))))


knobs = Knobs(max_num_seqs=4)  # B = 4 * 320 = 1280, q = 1, C = min(1280, 4) = 4, W = 5
show(knobs, synthetic(2, [3, 2], spacing=0))  # together: one step of 3 + 2 = 5 = W tokens

# %% [markdown]
# The same two requests, 12 steps apart: the 3-token prefill (3 ≤ C) and, later, the 2-token
# one each fit `swap_in`; the decodes replay a FULL CUDA graph and route nothing anew.

# %%
show(knobs, synthetic(2, [3, 2], spacing=12))

# %% [markdown]
# One step apart, the second prompt (4 tokens) joins the first one's decode: a mixed step of
# 1 + 4 = 5 = W tokens, but only the 1 decode token reaches the routing.

# %%
show(knobs, synthetic(2, [3, 4], spacing=1))

# %% [markdown]
# Prefix caching: a 64-token prompt, then 12 steps later a 69-token prompt with the same first
# 64 tokens. With caching on (the default) the second computes 5 tokens and crashes; off, it
# computes all 69 (more than W, so the all-resident path) and both finish.

# %%
show(knobs, synthetic(2, [64, 69], spacing=12))
show(knobs.replace(enable_prefix_caching=False), synthetic(2, [64, 69], spacing=12))

# %% [markdown]
# ## Try your own traffic
#
# Build a workload: the number of requests, their prompt lengths (a comma list, cycled over the
# requests), the steps between two arrivals (0: all at once) and the output tokens per request;
# then the engine's knobs. The answer comes first, above the controls: does this traffic
# crash, where, and with which error. Under the controls the dashboard shows
#
# * the crash (or none) with vLLM's exact error text and, in words, which requests made
#   the crashing step; the requests that finished (what the caller received) and, at a crash,
#   those whose output is lost (computed but never returned, or still running);
# * the **buffers picture** of one engine step: its routed tokens over the W workspace rows and
#   the C swap rows (the crash step by default, else the busiest; `draw_step` picks another);
# * C and W with their formulas (folded), and every engine step in a table (identical
#   neighbours folded, the crash row pinned);
# * the **timeline**: tokens in each step on a linear axis, stacked by request (one colour per
#   request up to 8; past 8 each colour is a group, r1–r8, r9–r16, …, named in the legend;
#   requests are numbered r1, r2, … in arrival order, r1 being vLLM's request 0), and
#   below it the tokens the step handed to the routing against the C and W lines (green: fits
#   `swap_in`, blue: all-resident, grey: a FULL-graph replay that routes nothing, red: the
#   crash, also marked with a dashed line). Every bar is drawn whole; when C is large the one
#   row from C to W is drawn 10 px tall so the two lines stay apart, and the axis says it is
#   not to scale;
# * the **max_num_seqs map**: what the same traffic does under every max_num_seqs 1…64 with
#   your other knobs (red: start-up crash, brown: never starts, of an error that is not the
#   overflow, as in notebook 2, orange: crashes on this traffic, green: serves it all, grey:
#   vLLM refuses the knobs). Values nearest yours are simulated first; on very large
#   workloads the farthest ones may be left "not computed" to keep the dashboard responsive;
#   a max_num_seqs above 64 is pointed at past the map's right end;
# * under the map, when it crashes, what avoids it, in the order an engineer would take it:
#   the fix first, then single-knob changes by what they cost (requests and tokens per step,
#   prefill chunks), the ones that cripple the engine apart (each one re-simulated). The map and the changes are searches: they are drawn after the numbers
#   and the timeline, so they may arrive a moment later.
#
# Engine steps are counted from 0, as `arrival_step` counts them (a request with arrival step
# 0 joins before the first step).

# %%
from IPython.display import display

from hisparse_model.views.traffic import TrafficDashboard

dash = TrafficDashboard(max_num_seqs=4, requests=2, prompt_lens="3, 2", arrival_spacing=0)
display(dash.widget)

# %% [markdown]
# ## The model against the engine, step by step
#
# Each file in `tests/recorded/workloads/` is a workload served by the real vLLM on an H200
# (`hisparse live --workload`), with what the scheduler ran in every step and
# the routing log. `compare_workload_recording` simulates the same knobs and workload and
# reports every difference (sizes, start-up, each step's tokens per request, the crash, the
# finished and lost requests, every routing row). Pick a recording: its steps are listed engine next to
# model, and the timeline's black dots are the engine's tokens per step.

# %%
from hisparse_model.views.traffic import WorkloadRecordingsDashboard

recorded = WorkloadRecordingsDashboard()
display(recorded.widget)

# %% [markdown]
# ## Serve your traffic on the real engine
#
# With a CUDA GPU and vLLM installed, this cell writes the dashboard's workload to
# `test-artifacts/live-traffic-workload.json`, runs
# `hisparse live --workload … --out test-artifacts/live-traffic.json` with the
# dashboard's knobs (the installed vLLM's version), and compares the recording with the model
# as above. Elsewhere it says why it cannot run.

# %%
import os

from hisparse_model.views.traffic import run_live

# A live run takes minutes; the notebook tests set HISPARSE_NOTEBOOK_LIVE=0 to skip it.
RUN_LIVE = os.environ.get("HISPARSE_NOTEBOOK_LIVE", "1") != "0"

recording = run_live(dash, skip=None if RUN_LIVE else "HISPARSE_NOTEBOOK_LIVE=0")
if recording is not None:
    display(WorkloadRecordingsDashboard([recording], name="live_traffic").widget)

# %% [markdown]
# ## What the simulation assumes
#
# `SIMULATE_ASSUMPTIONS` (every number in this notebook), then what notebooks 1–4's
# one-prompt-at-a-time `predict` assumes instead (`reproduction.ASSUMPTIONS`).

# %%
from hisparse_model.model.reproduction import ASSUMPTIONS
from hisparse_model.answers.simulate import SIMULATE_ASSUMPTIONS
from hisparse_model.views.tables import assumption_lists_html

display(HTML(assumption_lists_html(SIMULATE_ASSUMPTIONS, "predict (notebooks 1-4) instead:",
                                   ASSUMPTIONS)))

# %% [markdown]
# ## Takeaways
#
# 1. Under 0.31.0 what crashes is a **step** of exactly C + 1 routed tokens, and concurrency
#    makes such steps: prefills of requests that arrive together add up.
# 2. Mixed steps route only their decodes, which never exceed C: only all-prefill steps crash.
# 3. Prefix caching changes how many tokens a prefill computes, so it can create (or remove)
#    a C + 1 step.
# 4. The fix (0.32.0, or `routing=fix`) routes on C, so no step ever crashes.
#
# ## Try this
#
# Predict each answer before you open it. Every answer is computed by the model when this
# cell runs, and a test recomputes it another way, so none can go stale.

# %%
from IPython.display import HTML, display

from hisparse_model.views.exercises import try_this_html

display(HTML(try_this_html("traffic")))
