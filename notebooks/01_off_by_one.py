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
# # 1 · The off-by-one: W = C + 1 workspace rows, C swap rows
#
# > **Run All first** (menu *Run* ▸ *Run All Cells*): the notebook is stored without outputs,
# > so its dashboards appear once it has run. Open the `.ipynb`; the `.py` beside it is the
# > same notebook as text, for review.
#
# vLLM 0.31.0 with HiSparse crashes on a batch of exactly `C + 1` routed tokens:
#
# ```
# ValueError: HiSparse swap rows exceed the configured speculative decode capacity: stop=C+1, capacity=C.
# ```
#
# This notebook explains what HiSparse does, draws the two buffers behind that message, and
# lets you move the knobs that size them. Everything is computed by `hisparse_model`, an
# exact pure-Python model of vLLM's code (no GPU needed); notebook 4 checks it against
# recorded runs of the real engine.
#
# ## Glossary
#
# The words every notebook uses, in the order they build on each other:
#
# | word | what it means here |
# |---|---|
# | **request**, **prompt** | one generation job sent to vLLM; its prompt is the input text, counted in tokens |
# | **engine step** | one pass of vLLM's scheduler and one forward of the model over the tokens it picked |
# | **prefill** | the step(s) that run a request's prompt tokens (a long prompt is split into *chunks* of at most B tokens) |
# | **decode** | every later step of that request: 1 new token each (1 + K under MTP) |
# | **KV cache** | the per-token keys and values attention reads; HiSparse keeps part of it in host memory |
# | **MTP** | multi-token prediction, DeepSeek's speculative decoding: `num_speculative_tokens` = K extra draft tokens per decode |
# | **S** | `max_num_seqs`: the most requests in one step |
# | **B** | `max_num_batched_tokens`: the most tokens in one step (default min(S · max_model_len, 16384)) |
# | **q** | tokens of one decode request: 1 + K |
# | **C** | the swap rows `swap_in` has: min(B, S · q), one per decode token a step can hold |
# | **W** | the index-group workspace's rows: C + 1 |
# | **routed tokens (n)** | the tokens of a forward the attention backend hands to HiSparse's routing |
# | **swap_in** | the path that copies a batch's missing KV pages onto the GPU, one swap row per routed token |
# | **all-resident** | the other path: every page is on the GPU already, so no swap row is needed |
# | **stock** | `routing = stock`: the version's own routing rule (0.31.0: swap_in when n ≤ W) |
# | **the fix PR** | the upstream change that routes on n ≤ C (`routing = fix`; vLLM 0.32.0 has it); its reproduction: S = 2, max_model_len = 320 |
# | **ignore_eos** | a sampling setting that makes each request produce exactly `max_tokens` output tokens (the traffic notebook uses it) |
# | **why W has one row more than C** | vLLM's index-group builder allocates `max_decode_rows + 1` rows (`workspace_rows + 1` in `vllm/v1/attention/backends/mla/index_group.py`); its source gives no reason for the extra row, and that row is what lets n = C + 1 pass 0.31.0's check |
# | **why a batch larger than W goes all-resident** | such a batch is prefill-sized; vLLM stages a prefill's missing pages onto the GPU *before* the routing, so by then its pages are resident (the source asserts it: "Prefill-sized batches do not fit the decode residency workspace. Non-resident prefills are staged before reaching this path.") |
# | **TP / DP** | tensor parallelism (one model split over N GPUs, every rank runs every step) / data parallelism (N copies of the engine, each serving its own requests, stepping together) |
# | **EngineDeadError** | what vLLM raises to the caller for every request once its engine core has died (the HiSparse `ValueError` is in the engine's log) |
# | **-O2** | vLLM's default compilation level; for this model it means breakable CUDA graphs and no torch.compile |
# | **Model Runner V2** | vLLM's newer GPU model runner (`vllm/v1/worker/gpu/`), which HiSparse requires and turns on |
# | **num_gpu_blocks_override** | an engine argument that fixes the KV cache at that many 64-token blocks instead of what memory profiling finds |
# | **dummy batch** | the batch a data-parallel rank with nothing scheduled runs so that both ranks step together (notebook 6 writes it "dummy 1+1": two requests of 1 token) |
# | **host pool**, **host block** | HiSparse's KV cache in host memory, `host_pool_gib` of it, in 64-token blocks (1 GiB holds 1,820); the *null block* is the one vLLM never hands out, a *copy-on-write tail* one more block per request the model counts |
# | **a recording's name** | its knobs, part by part: `v0.34.0-serve-s64-b8192-l16384` is vLLM 0.34.0 served through AsyncLLM (as `vllm serve` runs it), S 64, B 8192, max_model_len 16,384; `blocks100` a 100-block KV pool; `w-` a workload (notebook 4 lists every part) |
# | **the app** | `hisparse app`: every dashboard of these notebooks on one web page (Voila), without JupyterLab |
#
# ## A primer
#
# * **Sparse attention.** DeepSeek-V3.2 does not attend to every earlier token: for each new
#   token, an *indexer* picks the top-k earlier tokens (the "logical" top-k indices), and
#   attention reads only their KV-cache entries.
# * **HiSparse** is vLLM's tiered KV cache for that model: part of the KV cache lives on the
#   GPU, the rest in host memory. Before attention, each token's top-k list must be turned
#   into GPU locations ("physical" indices). `convert_logical_to_physical_topk` does that for
#   the tokens the attention backend hands it: the **routed tokens** of a batch (n of them).
# * It takes one of two paths. **`swap_in`** copies the pages the tokens need onto the GPU and
#   writes one row per routed token into the runtime's **swap rows**: there are
#   **C = min(B, max_num_seqs · q)** of them, one per decode token the engine can schedule in
#   a step (B = tokens per step, q = tokens per decode request). The **all-resident path**
#   is for batches whose pages are all on the GPU already: it needs no swap rows.
# * Which path? 0.31.0 asks whether the n tokens fit the **index-group workspace**, a buffer
#   of **W = C + 1** rows. A batch of n ≤ C tokens fits both buffers; n > W goes
#   all-resident; and **n = W = C + 1** passes the check, goes to `swap_in`, and finds no
#   row for its last token.
#
# The dashboard below draws exactly that, for the knobs you set: the batch's routed tokens
# (top row), the W workspace rows (middle) and the C swap rows (bottom); a red token with a
# dashed "no row" under it is the one `swap_in` has no row for. The fix (vLLM 0.32.0) asks
# `n ≤ C` instead, so that batch takes the all-resident path.

# %%
from IPython.display import HTML, display

from hisparse_model.views import off_by_one_dashboard
from hisparse_model.views.primer import where_in_vllm

dash = off_by_one_dashboard(max_num_seqs=2, num_speculative_tokens=0)
display(dash.widget)

# %% [markdown]
# Every rule above is a line of vLLM's source; open the table for the file and line of each:

# %%
display(HTML(where_in_vllm("0.31.0")))

# %% [markdown]
# ## Try the knobs
#
# One more knob sizes these buffers: **`max_model_len`**, the longest sequence (prompt plus
# output, in tokens) the engine accepts. The fix PR's reproduction sets it to 320. When
# `max_num_batched_tokens` is not set, vLLM derives **B = min(max_num_seqs · max_model_len,
# 16384)** from it; it also bounds the prompts you can give (each must leave room for its
# output) and the prompt lengths notebook 3 draws. Every dashboard has it as a control.
#
# The dashboard above starts at the fix PR's reproduction (`max_num_seqs=2`, no speculative
# decoding, `max_num_batched_tokens` not set, `max_model_len=320`). Drag a slider or type into
# its number box; `max_num_batched_tokens = 0` means "not set" (vLLM's default), and the
# **B = C** / **B = W** buttons set it to the C or W on screen in one click. When B is set
# as low as C, a batch of W = C + 1 tokens would not fit in one step: the chart greys those
# sizes out ("n > B") and the crash cannot happen. The chart's x axis is n,
# the number of tokens one forward hands to the routing, zoomed around C … W; each lane is
# one routing rule: green fits `swap_in`, blue is the all-resident path, red is `swap_in`
# past C rows (the crash, marked ▼). An invalid combination (for example
# `max_num_batched_tokens` below `max_num_seqs`) shows vLLM's error message instead.

# %% [markdown]
# ## Takeaways
#
# 1. The swap rows hold **C = min(B, max_num_seqs · q)** rows; the index-group workspace
#    holds **W = C + 1**. 0.31.0 routes on W, so exactly one batch size, **n = W = C + 1**,
#    passes the routing check and then overflows `swap_in`.
# 2. Every other size is safe: n ≤ C fits the swap rows, n > W goes all-resident.
#    That is why the bug hides until a batch of exactly C + 1 routed tokens appears.
# 3. The fix (0.32.0) compares with C itself: the same batch takes the all-resident path.
#
# ## Try this
#
# Predict each answer before you open it. Every answer is computed by the model when this
# cell runs, and a test recomputes it another way, so none can go stale.

# %%
from IPython.display import HTML, display

from hisparse_model.views.exercises import try_this_html

display(HTML(try_this_html("off_by_one")))
