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
# # 6 · Two GPUs: a rank dies on a batch it never scheduled
#
# > **Run All first** (menu *Run* ▸ *Run All Cells*): the notebook is stored without outputs,
# > so its dashboards appear once it has run. Open the `.ipynb`; the `.py` beside it is the
# > same notebook as text, for review.
#
# New to these words (prefill, decode, KV cache, MTP, C, W, q, B, S, stock, all-resident, the fix PR)?
# Each is defined in [notebook 1's glossary](01_off_by_one.ipynb#Glossary).
#
# With data parallelism (`-dp 2`) each GPU runs an engine of its own, with its own scheduler
# and its own `max_num_seqs`. Every step the ranks agree on one CUDA-graph mode (the lowest
# any rank asks for) and pad to the graph of the largest rank's token count. A rank that
# scheduled nothing still runs a forward: vLLM's **dummy batch**, one request of that padded
# size. When the padded size is C + 1, vLLM 0.31.0 sends all of it to `swap_in` and the idle
# rank raises `stop=C+1, capacity=C`.
#
# Below, rank 0 serves a 2-token prompt and then a prompt that joins at step 2. Its length is
# `joining_prompt`; left at 0 it has S tokens (as many as `max_num_seqs`), so step 2 is one
# decode plus an S-token prefill, S + 1 = C + 1 tokens, of which rank 0 routes only the decode.
# Moving `max_num_seqs` then changes the traffic too; set `joining_prompt` to hold the traffic
# fixed while the engine changes. Rank 1's only request arrives later, so at step 2 it runs
# the dummy batch. The strip shows this scenario at every `max_num_seqs` 1 … 64 at once; both
# ranks' timelines are side by side; the advice lists single-knob changes that avoid the
# crash, each checked by running the model again.

# %%
from hisparse_model.views.two_gpus import two_gpus_dashboard

two_gpus_dashboard(max_num_seqs=3)

# %% [markdown]
# The picture above draws the forward that crashes (or, with no crash, the busiest one;
# `draw_step` picks another step, and its rank that failed or routed most); the
# chart under the numbers shows both ranks' forwards step by step, a ⋯ where steps with no
# work are skipped.
#
# ## Takeaways
#
# 1. With data parallelism an **idle rank still runs a forward**: vLLM's dummy batch, padded
#    to the CUDA-graph size of the busiest rank's token count.
# 2. When that padded size is exactly **W = C + 1**, 0.31.0 sends the whole dummy batch to
#    `swap_in`, and the rank that scheduled nothing raises `stop=C+1, capacity=C`.
# 3. So the crash depends on the other rank's traffic and on the capture sizes, not on the
#    crashing rank's own requests; the fix (0.32.0 routes on C) removes it for every rank.
#
# ## Try this
#
# Predict each answer before you open it. Every answer is computed by the model when this
# cell runs, and a test recomputes it another way, so none can go stale.

# %%
from IPython.display import HTML, display

from hisparse_model.views.exercises import try_this_html

display(HTML(try_this_html("two_gpus")))
