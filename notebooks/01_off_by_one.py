# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.17.3
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 1 · The off-by-one: W = C + 1 workspace rows, C swap rows
#
# **What you will see.** vLLM 0.31.0 with HiSparse crashes on a batch of exactly
# `C + 1` tokens:
#
# ```
# ValueError: HiSparse swap rows exceed the configured speculative decode capacity: stop=C+1, capacity=C.
# ```
#
# This notebook computes the two sizes behind that message for any knobs you choose,
# the **swap capacity C** and the **index-group workspace W = C + 1**, and draws which
# path every batch size n = 1 … 3C takes. Under 0.31.0 exactly one size, n = W, is sent
# to `swap_in` although it does not fit: that is the crash. Under 0.32.0 (the fix) the
# same batch goes to the all-resident fallback.
#
# Everything here is computed by the pure-Python model `hisparse_model` (no GPU needed);
# notebook 4 checks the model against recorded runs of the real engine.

# %% [markdown]
# ## Where each number comes from
#
# | symbol | meaning | formula | vLLM 0.31.0 line |
# |---|---|---|---|
# | B | tokens per engine step | `max_num_batched_tokens`; unset: `min(max_num_seqs * max_model_len, 16384)` | `vllm/engine/arg_utils.py:3102-3105` |
# | q | tokens per decode request | `1 + num_speculative_tokens` | `vllm/v1/attention/backend.py:579-596` `max_decode_query_len` |
# | **C** | rows `swap_in` may use in one forward | `min(B, max_num_seqs * q)` | `vllm/v1/hisparse/runtime.py:51-57` `_get_max_swap_rows` |
# | **W** | rows of the index-group workspace `physical_topk_indices` | `C + 1` | `vllm/v1/attention/backends/mla/index_group.py:365-376` `workspace_rows + 1` |
#
# The routing in `convert_logical_to_physical_topk` (`index_group.py:236`) sends a batch of
# n routed tokens to the all-resident path when `n > physical_topk_indices.shape[0]`, i.e.
# when n > W, and to `swap_in` otherwise. `swap_in` writes into the runtime's shared swap
# rows, of which there are only C; `_step_rows` (`vllm/v1/hisparse/runtime.py:897-907`)
# raises as soon as `stop = n > C`. So n ≤ C is fine, n ≥ W + 1 is fine, and **n = W crashes**.
# 0.32.0 compares with `cache.runtime.max_swap_rows` = C instead (`index_group.py:236`).

# %%
from IPython.display import display

from hisparse_model import explain, plots, widgets
from hisparse_model.knobs import Knobs
from hisparse_model.predict import predict

# %% [markdown]
# The fix PR's reproduction uses `max_num_seqs=2`, no speculative decoding and the default
# `max_num_batched_tokens`. Its numbers, each with its formula and vLLM line:

# %%
pred = predict(Knobs(vllm_version="0.31.0", max_num_seqs=2))
for name, formula, where in explain.formulas(pred):
    print(f"{formula:<62} {where}")

# %% [markdown]
# What the two routing rules do with batches just below, at and just above W:

# %%
c = pred.sizes.swap_capacity
print(explain.routes_text(c, [c, c + 1, c + 2], plots.OFF_BY_ONE_LANES))

# %% [markdown]
# ## Try the knobs
#
# Move the sliders. `max_num_batched_tokens = 0` means "not set" (vLLM's default).
# The chart's x axis is the number of tokens a batch hands to the routing; each lane is one
# routing rule; green = `swap_in` that fits, blue = all-resident, red = `swap_in` past C
# (the crash). The dashed line is C, the dotted line W. An invalid combination (for example
# `max_num_batched_tokens` below `max_num_seqs`) shows vLLM's error message instead.

# %%
dash = widgets.off_by_one_dashboard(max_num_seqs=2, num_speculative_tokens=0)
display(dash.widget)

# %% [markdown]
# The dashboard's numbers as one line (the tests read this line):

# %%
print(dash.labels["summary"])

# %% [markdown]
# ## Takeaways
#
# 1. The swap rows hold **C = min(B, max_num_seqs · q)** rows; the index-group workspace
#    holds **W = C + 1**. 0.31.0 routes on W, so exactly one batch size, **n = W = C + 1**,
#    passes the routing check and then overflows `swap_in`.
# 2. Every other size is safe: n ≤ C fits the swap rows, n > W goes all-resident.
#    That is why the bug hides until a batch of exactly C + 1 tokens appears.
# 3. The fix (0.32.0) compares with C itself: the same batch takes the all-resident path.
#
# ## Try this
#
# * Set `num_speculative_tokens = 2` with `max_num_seqs = 2`. Predict C and the crashing
#   size before looking (q = 3, so C = min(B, 6) = 6 and W = 7).
# * Set `max_num_batched_tokens = 4` with `max_num_seqs = 4`: now C = B. Which size crashes?
#   Could a real batch of that size ever be scheduled when B = 4? (Notebook 2 answers it.)
