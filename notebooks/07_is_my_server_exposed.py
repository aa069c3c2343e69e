# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 7 · Is my server exposed?
#
# > **Run All first** (menu *Run* ▸ *Run All Cells*): the notebook is stored without outputs,
# > so its dashboard appears once it has run. Open the `.ipynb`; the `.py` beside it is the
# > same notebook as text, for review.
#
# Three sample prompts that survive say little about a server: an operator's question is
# **can any traffic kill this deployment, and which?** Paste your `vllm serve` command into
# the `command` box (it is read as `hisparse check` reads it) and press Enter (or click
# outside the box): the knobs below then show the command's values, the values in effect.
# Move a knob to override the command's value for it (the line under the verdict names each
# moved value); *reset the knobs to the command* undoes the moves, and pasting a new
# command starts from its own values. While an edit of the box is not applied yet, the hint
# under it says so and the verdict is greyed. Or empty the box and use the knobs alone.
# The dashboard answers for *all* traffic:
#
# * **EXPOSED**: every kind of engine step that reaches `swap_in` with more than C rows, in
#   words (a lone prompt, the last chunk of a longer prompt, prompts arriving together),
#   each with a minimal example workload that the model's own serving simulation
#   (`simulate`) replays and sees crash with the exact error;
# * **NOT EXPOSED**: the reason no step can (the version routes on C; the backend hands the
#   routing only a step's decode part, at most C tokens; B ≤ C leaves no room for C + 1 ...);
# * **UNDECIDED**: where the model cannot tell (a KV pool it does not model running short),
#   it says so instead of guessing.
#
# It assumes any traffic the scheduler model can produce: prompts shorter than
# `max_model_len`, arriving at any engine step, chunked prefill, prefix caching; the KV pool
# never runs short (no preemption).
#
# ## Why 1025 tokens
#
# With `vllm serve`'s defaults on an H200, S = 1024 requests and B = 8192 tokens a step,
# so C = min(B, S·q) = 1024 swap rows. A step with no decode in it hands all its tokens to
# the routing (FLASH_ATTN_MLA_SPARSE, pages resident); 0.31.0 sends up to W = C + 1 = 1025
# of them to `swap_in`, which has 1024 rows. Any step that computes exactly 1025 tokens with
# no decode running kills the engine, and every request after it.

# %%
from IPython.display import display

from hisparse_model.views.exposure import SERVE_DEFAULT, exposure_dashboard

dash = exposure_dashboard(SERVE_DEFAULT)
display(dash.widget)

# %% [markdown]
# ## How likely, and how soon?
#
# *Exposed* says that some traffic kills the server; **your** traffic decides how soon.
# `hisparse simulate --traffic FILE --minutes N` serves traffic through the same serving model,
# seed by seed, until the first crash: a description (Poisson arrivals at its rate, lengths
# from a histogram) or a real trace with its own arrival times (Azure's CSV, Mooncake's
# JSON Lines), replayed. Each crash is exact; `--crash-workload FILE` writes the requests
# that `simulate --workload` replays to it.
#
# The answer rests on one more number: **how long an engine step takes**, which turns
# arrival times into engine steps. Read it from your server (`--step-ms-from-metrics URL`
# reads its `/metrics`, `--step-ms-from-log FILE` its log). Below, without a measured one,
# the server the dashboard above shows (its pasted command, with any knob you moved since)
# under the bundled example traffic (10 requests/s, prompts of 1 to 16,000 tokens, 8 output
# tokens) is estimated at three step times, 6, 12 and 25 ms, 4 seeds of 20 minutes each: the
# spread between the lines is what the missing measurement leaves open. With yours, build
# the panel as `RiskPanel(dash, traffic_path="your-trace.csv", step_ms=8.9)` for one chart
# (8 seeds, bands by the kind of step that killed each). An estimate takes seconds, so it is
# made when you press **estimate for the server above**; while the dashboard shows another
# server the chart is greyed and says so.

# %%
from IPython.display import display

from hisparse_model.views.risk_panel import RiskPanel

risk = RiskPanel(dash, minutes=20)
display(risk.widget)

# %% [markdown]
# ## Takeaways
#
# 1. **The default `vllm serve` of DeepSeek-V3.2 with HiSparse on 0.31.0 is exposed**: a
#    1025-token prompt reaching an idle server, the last 1025-token chunk of a 9217-token
#    prompt, or prompts arriving together that add up to 1025 kill it. The three default
#    sample prompts (2, 3, 200 tokens) never show it.
# 2. **The fix makes it safe for all traffic**: 0.32.0 (or 0.31.0 patched with the upstream
#    fix) routes on C, so `swap_in` never gets more than C rows.
# 3. **How soon depends on the traffic**: under the example traffic some seeds die within
#    minutes, others survive; a lone prompt of exactly C + 1 = 1025 tokens reaching a
#    moment with no decode running is the usual killer.
# 4. **Knob changes can too, at a cost**: the FLASHMLA_SPARSE backend, or B ≤ S·q (no step
#    holds C + 1 tokens). Moving `max_num_seqs` so that C + 1 still fits in B only moves the
#    fatal step size: it is never offered as a fix.
#
# ## Try this
#
# Predict each answer before you open it. Every answer is computed by the model when this
# cell runs, and a test recomputes it another way, so none can go stale.

# %%
from IPython.display import HTML, display

from hisparse_model.views.exercises import try_this_html

display(HTML(try_this_html("exposure")))
