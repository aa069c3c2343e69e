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
# # 3 · The fix (0.32.0) and the next fix (0.33.0)
#
# > **Run All first** (menu *Run* ▸ *Run All Cells*): the notebook is stored without outputs,
# > so its dashboards appear once it has run. Open the `.ipynb`; the `.py` beside it is the
# > same notebook as text, for review.
#
# New to these words (prefill, decode, KV cache, MTP, C, W, q, B, S, stock, all-resident, the fix PR)?
# Each is defined in [notebook 1's glossary](01_off_by_one.ipynb#Glossary).
#
# The same knobs and the same prompts run through vLLM 0.31.0, 0.32.0, 0.33.0 and 0.34.0 side by
# side: the routing rule each version applies, B, q, C, W, the capture sizes, whether
# start-up survives and how each prompt ends. The `vllm_version` buttons pick the version
# whose batches are listed in full and highlighted in the chart; `attention_backend` shows
# why **FLASHMLA_SPARSE never crashes**; `routing = fix` applies the upstream fix's rule to
# 0.31.0; `prompt_lens` takes any prompt lengths (comma-separated).
#
# ## Three routing rules
#
# `convert_logical_to_physical_topk` decides, for n routed tokens:
#
# | version | `swap_in` when | otherwise |
# |---|---|---|
# | 0.31.0 | n ≤ W = C + 1 (the workspace's rows) | all-resident |
# | 0.32.0 | n ≤ C (the swap rows: the fix) | all-resident |
# | 0.33.0, 0.34.0 | n ≤ C **and** the batch is decode-only (or not all resident) | all-resident: every all-resident prefill |
#
# The table in the dashboard cites each version's line.
#
# ## Which tokens reach the routing (the attention backend)
#
# * **FLASH_ATTN_MLA_SPARSE** (0.31.0 / 0.32.0): the decode tokens, if any; a batch with no
#   decode token whose pages are all resident is routed **whole**, so a prefill chunk of
#   exactly W tokens reaches `swap_in` in 0.31.0. A chunk of at most q tokens (q = 1 +
#   num_speculative_tokens) counts as decode tokens: it is routed as such.
# * **FLASHMLA_SPARSE** (0.31.0 / 0.32.0): decode tokens only; prefill tokens are staged.
#   Decode tokens number at most max_num_seqs · q and at most B, so n ≤ C always: it can
#   never crash.
# * **0.33.0 and 0.34.0**, every backend: the whole batch when it is decode-only or all resident, else
#   the decode part; the new rule then sends every all-resident prefill to the all-resident
#   path. 0.34.0 routes as 0.33.0 does; what it changed is its start-up (notebook 2:
#   the extensible KV cache's sizing warmup runs before the captures).
#
# ## Try the versions, backends and workloads
#
# The chart shows prompt lengths n below max_model_len (a control: notebook 1 introduces it),
# each prompt served alone, in each version: the route of its last prefill chunk (green
# `swap_in`, blue all-resident), or red where one of its chunks crashes, marked ▼ with its n
# (at a small B that can be its first chunk). It draws the lengths that tell the
# versions apart: C − 5 … W + 5, and every length where some version changes path; a `⋯`
# column stands for the lengths left out, each going where the length left of it goes.
# Prefills longer than B are chunked into pieces of at most B tokens, so a long prompt's last
# chunk can be the W-token batch even when the prompt is much longer than W ("Try this" at
# the end works out which lengths, for B = 64). The batch table names each row's prompt
# as "prompt k (n tokens)", k counted from 1; with prefix caching on, a later prompt that
# shares an earlier one's blocks prefills only what is not cached.

# %%
from IPython.display import display

from hisparse_model.views import versions_dashboard

dash = versions_dashboard(vllm_version="0.31.0", attention_backend="FLASH_ATTN_MLA_SPARSE",
                          max_num_seqs=2, prompt_lens="2, 3, 200")
display(dash.widget)

# %% [markdown]
# ## Takeaways
#
# 1. **0.32.0 fixes the off-by-one** by routing on C, the capacity `swap_in` really has:
#    the W-token batch now takes the all-resident path. Nothing else changes path.
# 2. **0.33.0 goes further**: every all-resident prefill takes the all-resident path, so
#    `swap_in` only ever sees decode-only batches (at most C tokens).
# 3. The crash needs a backend that routes prefill tokens: **FLASHMLA_SPARSE** stages them
#    and routes decode tokens only (n ≤ C), so even 0.31.0 never crashes with it.
#
# ## Try this
#
# Predict each answer before you open it. Every answer is computed by the model when this
# cell runs, and a test recomputes it another way, so none can go stale.

# %%
from IPython.display import HTML, display

from hisparse_model.views.exercises import try_this_html

display(HTML(try_this_html("versions")))
