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
# # 3 · The fix (0.32.0) and the next fix (0.33.0)
#
# **What you will see.** The same knobs and the same workload run through vLLM 0.31.0,
# 0.32.0 and 0.33.0 side by side: the routing rule each version applies, C, W, the capture
# sizes, whether start-up survives and how each prompt ends. The version selector picks
# the version whose per-request batches are listed in full. The attention-backend selector
# shows why **FLASHMLA_SPARSE never crashes**, and the workload box takes any prompt
# lengths (comma-separated).

# %% [markdown]
# ## Three routing rules
#
# `HiSparseMLAIndexGroup.convert_logical_to_physical_topk` decides, for n routed tokens:
#
# | version | rule | vLLM line |
# |---|---|---|
# | 0.31.0 | `swap_in` if n ≤ W = C + 1 (`physical_topk_indices.shape[0]`), else all-resident | `index_group.py:236` |
# | 0.32.0 | `swap_in` if n ≤ C (`cache.runtime.max_swap_rows`), else all-resident | `index_group.py:236` |
# | 0.33.0 | `swap_in` if n ≤ C **and** the batch is decode-only (or not all resident); every all-resident prefill goes all-resident | `index_group.py:239-242` |
#
# C = min(B, max_num_seqs · q) (`vllm/v1/hisparse/runtime.py:51-57` / `53-59` / `56-62`),
# W = C + 1 (`vllm/v1/attention/backends/mla/index_group.py:365-376` / `371-382` / `378-389`),
# and `swap_in` past C rows raises in `_step_rows` (`runtime.py:897-907` in 0.31.0).
#
# ## Which tokens reach the routing (the attention backend)
#
# * **FLASH_ATTN_MLA_SPARSE** (0.31.0 / 0.32.0, `flashattn_mla_sparse.py:204-260`): the decode
#   tokens, if any; a batch with no decode token whose pages are all resident is routed
#   **whole**, so a prefill of exactly W tokens reaches `swap_in` in 0.31.0.
# * **FLASHMLA_SPARSE** (0.31.0 / 0.32.0, `flashmla_sparse.py:815-850`): decode tokens only;
#   prefill tokens are staged (`stage_prefill_rows`). Decode tokens number at most
#   max_num_seqs · q and at most B, so n ≤ C always: it can never crash.
# * **0.33.0**, every backend (`sparse_mla_attention.py:805-812`): the whole batch when it
#   is decode-only or all resident, else the decode part; the new predicate then sends
#   every all-resident prefill to the all-resident path.

# %%
from IPython.display import display

from hisparse_model import widgets
from hisparse_model.knobs import VLLM_VERSIONS, Knobs
from hisparse_model.predict import predict

# %% [markdown]
# The fix PR's workload (prompts of 2, 3 and 200 tokens, `max_num_seqs=2`) in each version:

# %%
for version in VLLM_VERSIONS:
    p = predict(Knobs(vllm_version=version, max_num_seqs=2), [2, 3, 200])
    outcomes = ", ".join(f"{o.n}: {'ok' if o.ok else o.error}" for o in p.prompts)
    print(f"{version}: C={p.sizes.swap_capacity} W={p.sizes.workspace_rows} "
          f"start-up {'ok' if p.startup_ok else p.startup_error}; {outcomes}")

# %% [markdown]
# ## Try the versions, backends and workloads
#
# The table has one column per version (▶ marks the selected one); `routing = fix` applies
# the upstream fix's rule to 0.31.0. Below it, every batch of every request in the selected
# version. The chart shows, for one prompt of n tokens served alone, where its (first)
# prefill batch goes in each version: green `swap_in` that fits, blue all-resident, red
# the crash, grey not routed (staged by the backend).

# %%
dash = widgets.versions_dashboard(vllm_version="0.31.0", attention_backend="FLASH_ATTN_MLA_SPARSE",
                                  max_num_seqs=2, prompt_lens="2, 3, 200")
display(dash.widget)

# %%
print(dash.labels["summary"])

# %% [markdown]
# The same knobs with FLASHMLA_SPARSE (a second dashboard, so the one above keeps your
# settings):

# %%
flashmla = widgets.versions_dashboard(attention_backend="FLASHMLA_SPARSE", max_num_seqs=2,
                                      prompt_lens="2, 3, 200")
print(flashmla.labels["summary"])

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
# * Select 0.31.0 with `routing = fix`: does it now match 0.32.0 for every prompt?
# * Set `num_speculative_tokens = 1` and the workload `2, 4, 5, 6`: which prompt crashes in
#   0.31.0, and why is the 2-token prompt a *decode* (hint: 2 ≤ q)?
