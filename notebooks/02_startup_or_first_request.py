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
# # 2 · Start-up or first request: when does the W-token batch arrive?
#
# > **Run All first** (menu *Run* ▸ *Run All Cells*): the notebook is stored without outputs,
# > so its dashboards appear once it has run. Open the `.ipynb`; the `.py` beside it is the
# > same notebook as text, for review.
#
# New to these words (prefill, decode, KV cache, MTP, C, W, q, B, S, stock, all-resident, the fix PR)?
# Each is defined in [notebook 1's glossary](01_off_by_one.ipynb#Glossary).
#
# Notebook 1 showed that vLLM 0.31.0 crashes on a batch of exactly W = C + 1 routed tokens.
# *When* that batch first appears depends on the batches the engine runs by itself while it
# starts: CUDA-graph captures and warmups. This notebook lists every start-up batch for the
# knobs you choose, and shows why
#
# * `max_num_seqs=1` dies **at start-up** (a 2-token capture is the W-token batch), and
# * `max_num_seqs=2` starts fine but dies on the **first 3-token prompt**.
#
# ## How the engine starts
#
# A few words first:
#
# * **CUDA graph**: a recording of one forward pass for a fixed batch size (a *capture
#   size*), replayed later without Python. vLLM records each size once at start-up, on a
#   made-up (*dummy*) batch of that many tokens.
# * **FULL graph**: the whole forward, attention and HiSparse's routing included, is one
#   recording; replaying it routes nothing anew. **PIECEWISE graph**: only the parts
#   between attention layers are recorded; attention and the routing run as ordinary code
#   on each forward, so a PIECEWISE forward reaches the routing like an uncaptured one.
# * **JIT warmup**: before capturing, vLLM runs a few real-shaped batches once so that
#   kernels compiled just in time are built before serving (`_warmup_kernels`).
# * **Dummy-batch spreading**: a capture of T tokens is not one request of T tokens: vLLM
#   spreads the T tokens over R = min(T, max_num_seqs) requests, T // R tokens each and the
#   last T mod R requests one more. A request of at most q tokens counts as a decode, a longer
#   one as a prefill.
# * **`B // (q+1)`**: B divided by q + 1, rounded down (Python's `//`): how many requests of
#   q + 1 tokens fit in one step of B tokens.
#
# HiSparse forces vLLM's V2 model runner. Its start-up runs, in order: a memory-profiling
# pass that captures CUDA graphs, a JIT warmup (one prefill of min(max_num_seqs, B // (q+1))
# requests of q + 1 tokens, then a few decode steps), and the real CUDA-graph captures
# (PIECEWISE graphs largest first, then FULL decode graphs). A capture's dummy batch of T
# tokens is spread over min(T, max_num_seqs) requests; a request of more than q tokens is a
# prefill, and FLASH_ATTN_MLA_SPARSE hands a batch with no decode token to the routing whole.
# The default capture sizes are 1, 2, 4, then multiples of 8, up to min(2 · max_num_seqs · q,
# 512) and B, plus max_num_seqs itself. The tables below cite the vLLM lines for each step.
#
# ### max_num_seqs = 1: C = 1, W = 2, captures [1, 2]
#
# The 2-token PIECEWISE capture is one request of 2 tokens: 2 > q = 1, so it is a prefill,
# handed to the routing whole: n = 2 = W → `swap_in` → 2 > C = 1 → the engine dies while it
# profiles memory, before serving anything. The prompts never run.

# %%
from IPython.display import HTML, display

from hisparse_model import Knobs, predict
from hisparse_model.views import startup_dashboard
from hisparse_model.views.first_request import static_report

display(HTML(static_report(predict(Knobs(max_num_seqs=1), [2, 3, 200]))))

# %% [markdown]
# ### max_num_seqs = 2: C = 2, W = 3, captures [1, 2, 4]
#
# No start-up batch routes 3 tokens: the captures are 4 (all-resident), 2 and 1 (fit C), the
# warmup prefill is 2 requests × 2 tokens = 4. Start-up survives, and the first prompt of
# exactly 3 tokens is the W-token batch:

# %%
display(HTML(static_report(predict(Knobs(max_num_seqs=2), [2, 3, 200]))))

# %% [markdown]
# ## Try the knobs
#
# The dashboard lists every start-up batch in engine order (the batch that crashes is the
# red row, pinned at the bottom of the table: the engine stops there), then each prompt of
# the workload (`prompt_lens`, comma-separated). The strip below it shows, for every
# max_num_seqs from 1 to 256 with your other knobs, whether 0.31.0 dies **at start-up**
# (red), starts but dies on its **first request** of W tokens (orange), or is **safe**
# (green: no batch can ever route W tokens to `swap_in`); grey means vLLM refuses the knobs,
# brown that start-up dies of something other than the overflow (the MTP warmup's
# `IndexError` when B < K + 2: it never starts). Prompts after a crash are not run.
# The lower strip zooms on 32 values around your max_num_seqs (boxed).

# %%
dash = startup_dashboard(max_num_seqs=2, prompt_lens="2, 3, 200")
display(dash.widget)

# %% [markdown]
# ## Takeaways
#
# 1. Whether 0.31.0 dies at start-up or at runtime depends only on whether a **start-up
#    batch routes exactly W = C + 1 tokens**: with `max_num_seqs=1` the 2-token capture does;
#    with `max_num_seqs=2` the captures [1, 2, 4] skip 3, so the first 3-token prompt crashes.
# 2. For every larger `max_num_seqs` (with default B) start-up survives and a prompt of
#    exactly W tokens crashes at runtime. Only when B caps C (C = B, W = B + 1) does no batch
#    ever route W tokens: prefills are chunked to at most B tokens.
# 3. `enforce_eager=True` removes the captures and the warmup (the start-up table is empty),
#    which moves a start-up crash to the first W-token prompt; it does not remove the bug.
#
# ## Try this
#
# Predict each answer before you open it. Every answer is computed by the model when this
# cell runs, and a test recomputes it another way, so none can go stale.

# %%
from IPython.display import HTML, display

from hisparse_model.views.exercises import try_this_html

display(HTML(try_this_html("startup")))
