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
# # 4 · The model against the real engine
#
# > **Run All first** (menu *Run* ▸ *Run All Cells*): the notebook is stored without outputs,
# > so its dashboards appear once it has run. Open the `.ipynb`; the `.py` beside it is the
# > same notebook as text, for review.
#
# New to these words (prefill, decode, KV cache, MTP, C, W, q, B, S, stock, all-resident, the fix PR)?
# Each is defined in [notebook 1's glossary](01_off_by_one.ipynb#Glossary).
#
# Every number in notebooks 1–3 comes from `hisparse_model`, a pure-Python reading of vLLM's
# source. Here the model meets the engine: each file in `tests/recorded/` is one real run of
# vLLM (tiny DeepSeek-V3.2 with dummy weights, the fix PR's setup) on an H200, with its
# provenance (vLLM, torch, GPU, date, engine arguments) and the engine's routing log.
#
# **Names.** A recording is named after its knobs: `v0.31.0-stock-s2-b64` is vLLM 0.31.0
# with its own (stock) routing, `max_num_seqs=2` (`s2`) and `max_num_batched_tokens=64`
# (`b64`); `fix` is 0.31.0 with the upstream fix's routing, `mtpK` K speculative tokens,
# `eager` `enforce_eager=True`, `flashmla` the FLASHMLA_SPARSE backend.
#
# **The verdict** is `compare_recording`'s: a recording agrees when the engine's sizes (B, q,
# C, capture sizes, CUDA-graph mode) equal the model's, start-up and every prompt that ran
# end as predicted (ok, or the same error text), and every routing call the engine logged is
# the one the model predicts, in order.
#
# **The chart.** One row per recording, one column per event (start-up, then each prompt).
# The **big square** is what the engine did; the black-ringed **dot** inside it is what the
# model predicts, filled with its outcome's colour: a ring on the square's own colour means
# the same outcome. A prompt after a crash never ran: the engine died, and
# the model, which serves the prompts one after another as the engine did, says so too (a light
# grey square and dot, *not run*). The recording you pick is highlighted in the chart and in
# the table, and its provenance and routing log are listed below the table.

# %%
import os

from IPython.display import display

from hisparse_model.views import live_output_path, recordings_dashboard

# A live run takes minutes; the notebook tests set HISPARSE_NOTEBOOK_LIVE=0 to skip it.
RUN_LIVE = os.environ.get("HISPARSE_NOTEBOOK_LIVE", "1") != "0"

dash = recordings_dashboard()
display(dash.widget)

# %% [markdown]
# ## Run the engine live
#
# With a CUDA GPU and vLLM installed (`pip install -e ".[gpu]"`), this cell runs one
# configuration (the fix PR's: `max_num_seqs=2`, prefix caching off, prompts 2, 3, 200) in a child process
# with a 600 s timeout, writes its recording to `test-artifacts/live-notebook.json`, and
# shows it against the model in the same kind of dashboard. Without a GPU engine (the usual
# case on a laptop) it says so in one calm line: nothing is wrong, the recordings above are
# the engine's.

# %%
from hisparse_model import Knobs
from hisparse_model.engine.live import run_one
from hisparse_model.views.engine_runs import live_status

live_vllm = live_status(None if RUN_LIVE else "HISPARSE_NOTEBOOK_LIVE=0")
if live_vllm:
    live = run_one(Knobs(vllm_version=live_vllm, max_num_seqs=2, enable_prefix_caching=False),
                   [2, 3, 200],
                   live_output_path(), timeout=600, command="notebook 04_model_vs_engine")
    live_dash = recordings_dashboard([live], name="live")
    display(live_dash.widget)

# %% [markdown]
# ## Takeaways
#
# 1. The model is exact: for every recording, the engine's sizes, outcomes and routing calls
#    equal the prediction, error text included. A difference is a bug in the model or in our
#    reading of vLLM, never a tolerance to widen.
# 2. Each recording pins its vLLM version, torch, GPU and engine arguments (provenance), so
#    a recording is only ever compared with the model for the same version and knobs.
#
# ## Try this
#
# Predict each answer before you open it. Every answer is computed by the model when this
# cell runs, and a test recomputes it another way, so none can go stale.

# %%
from IPython.display import HTML, display

from hisparse_model.views.exercises import try_this_html

display(HTML(try_this_html("recordings")))
