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
# # 2 · Start-up or first request: when does the W-token batch arrive?
#
# **What you will see.** Notebook 1 showed that vLLM 0.31.0 crashes on a batch of exactly
# W = C + 1 routed tokens. *When* that batch first appears depends on the batches the
# engine runs by itself while it starts: CUDA-graph captures and warmups. This notebook lists
# every start-up batch for the knobs you choose, and shows why
#
# * `max_num_seqs=1` dies **at start-up** (a 2-token capture is the W-token batch), and
# * `max_num_seqs=2` starts fine but dies on the **first 3-token prompt**.
#
# A chart then sweeps `max_num_seqs` from 1 to 256 and marks each value as start-up crash,
# runtime crash (a prompt of W tokens) or safe.

# %% [markdown]
# ## The numbers and their vLLM lines
#
# * **Capture sizes** (`vllm/config/vllm.py:2388-2656` `_set_cudagraph_sizes`, 0.31.0): with
#   q = 1 + num_speculative_tokens, cap = min(2 · max_num_seqs · q, 512), then min(B, cap);
#   sizes are [1, 2, 4] ≤ cap, multiples of 8 up to cap, plus the uniform-decode size
#   max_num_seqs (q = 1). So `max_num_seqs=1` → cap 2 → **[1, 2]**; `max_num_seqs=2` → cap 4 → **[1, 2, 4]**.
# * **Start-up batches** (`vllm/v1/worker/gpu_worker.py:571-660, 829-890`): a profile run
#   (attention skipped), CUDA-graph memory profiling (captures), compile warmups,
#   `warmup_kernels` (one prefill of min(max_num_seqs, B // (q+1)) requests of q+1 tokens, then
#   decode steps; `v1/worker/gpu/warmup.py:243-450`) and `capture_model` (PIECEWISE
#   captures largest first, then FULL decode graphs). A dummy capture batch of T tokens is
#   spread over min(T, max_num_seqs) requests (`v1/worker/gpu/input_batch.py:127-153`).
# * **Which tokens are routed**: FLASH_ATTN_MLA_SPARSE hands a batch without decode tokens
#   whose pages are all resident to the routing whole
#   (`v1/attention/backends/mla/flashattn_mla_sparse.py:204-260`); dummy batches always have
#   all pages resident. A request is a decode when its query length is ≤ q.
# * **C, W, the routing and the error**: as in notebook 1: C from `runtime.py:51-57`,
#   W = C + 1 from `index_group.py:365-376`, the check at `index_group.py:236`, the
#   `ValueError` from `runtime.py:897-907` `_step_rows`.

# %%
from IPython.display import display

from hisparse_model import explain, widgets
from hisparse_model.knobs import Knobs
from hisparse_model.predict import predict

# %% [markdown]
# ### max_num_seqs = 1: C = 1, W = 2, captures [1, 2]
#
# The 2-token PIECEWISE capture is one request of 2 tokens: 2 > q = 1, so it is a prefill,
# handed to the routing whole: n = 2 = W → `swap_in` → 2 > C = 1 → the engine dies while it
# profiles CUDA-graph memory, before serving anything.

# %%
print(explain.startup_text(predict(Knobs(max_num_seqs=1)), routed_only=True))

# %% [markdown]
# ### max_num_seqs = 2: C = 2, W = 3, captures [1, 2, 4]
#
# No start-up batch has 3 tokens: the captures are 4 (all-resident), 2 and 1 (fit C), the
# warmup prefill is 2 requests × 2 tokens = 4. Start-up survives, and the first prompt of
# exactly 3 tokens is the W-token batch:

# %%
pred2 = predict(Knobs(max_num_seqs=2), [2, 3, 200])
print(explain.startup_text(pred2, routed_only=True))
print(explain.prompts_text(pred2))

# %% [markdown]
# ## Try the knobs
#
# The table lists every start-up batch in engine order (the crashing one in red), then each
# prompt of the workload. The chart sweeps max_num_seqs = 1…256 with the other knobs fixed:
# **×** start-up crash, **○** runtime crash on a W-token prompt, **■** safe (no batch can
# route W tokens to `swap_in`), grey = vLLM rejects the knobs. The dashed line is your
# current max_num_seqs.

# %%
dash = widgets.startup_dashboard(max_num_seqs=2, prompt_lens="2, 3, 200")
display(dash.widget)

# %%
print(dash.labels["summary"])
print(dash.labels["sweep_summary"])

# %% [markdown]
# ## Takeaways
#
# 1. Whether 0.31.0 dies at start-up or at runtime depends only on whether a **start-up
#    batch routes exactly W = C + 1 tokens**: with `max_num_seqs=1` the 2-token capture does;
#    with `max_num_seqs=2` the captures [1, 2, 4] skip 3, so the first 3-token prompt crashes.
# 2. For every larger `max_num_seqs` (with default B) start-up survives and a prompt of
#    exactly W tokens crashes at runtime. Only when B caps C (C = B, W = B + 1) does no batch
#    ever route W tokens: prefills are chunked to at most B tokens.
# 3. `enforce_eager=True` removes the captures (capture sizes []), which moves a start-up
#    crash to the first W-token prompt; it does not remove the bug.
#
# ## Try this
#
# * Set `max_num_seqs=1` and tick `enforce_eager`. Which prompt of the workload crashes now, and why?
# * Set `max_num_batched_tokens=64`: which max_num_seqs values become safe, which start-up
#   crash (hint: look at 63 and 64 in the chart), and which are invalid?
