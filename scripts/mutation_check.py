"""Mutation check: deliberate small bugs in the model must each fail a test.

    python scripts/mutation_check.py [--only WORD ...] [--list] [--jobs N]

Each row of :data:`MUTATIONS` names one rule of the model, the file that states it,
an exact text that must occur in that file exactly once, what replaces it (a wrong
model), and the tests that can catch it (files or node ids: only they run for the
row).  The script makes ``--jobs`` temporary copies of the repository (the tracked and
untracked-but-not-ignored files, with ``.vllm`` linked to the installed vLLM trees;
the working tree itself is never edited, so nothing else sees a mutant) and, for each
row, on a free copy:

1. writes the mutated file;
2. runs the row's tests with ``-x``; only if none fails, the whole fast suite
   (``-m "not vllm_cpu and not browser and not gpu"``) with ``-x``, and names the row
   as one whose tests should be updated;
3. puts the original file back.

It prints a table, mutation -> the first failing test, and exits 1 if a mutation
survives (no test failed), if a row's text is not found exactly once (a refactor
moved the rule: update the row), or if a run ends in anything but passed/failed
(an import or collection error proves nothing).  Before the mutants, the union of
the rows' tests runs on an unmutated copy (``pytest -n``) and must pass, so that a
failure counts only when the mutant caused it; ``--passed-in JUNIT.xml ...`` (what
``scripts/run_tests.py`` passes after its suite ran on the same tree) takes that run
instead: each row's tests must have passed there, and a copy must collect them.

Adding a rule (e.g. another branch's): append a :class:`Mutation`; nothing else
changes.  ``scripts/run_tests.py`` prints the measured time.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import re
import shutil
import subprocess
import queue
import sys
import tempfile
import time
from typing import NamedTuple

REPO = pathlib.Path(__file__).resolve().parents[1]
FAST = "not vllm_cpu and not browser and not gpu"  # the fast suite's marker expression
RUN_TIMEOUT_S = 600  # one pytest run; a hang past it counts as a failure to report
JOBS = min(2, os.cpu_count() or 1)  # mutants at once, one copy of the repository each


class Mutation(NamedTuple):
    name: str  # what is made wrong, in a few words
    path: str  # file, relative to the repository root
    old: str  # exact text, must occur exactly once in the file
    new: str  # the wrong model
    tests: tuple[str, ...]  # pytest node ids or files to run first (may include vllm_cpu tests)


M = Mutation
_V = "hisparse_model/model/versions.py"
_P = "hisparse_model/model/plan.py"
_S = "hisparse_model/schedule/scheduler.py"
_T = "hisparse_model/answers/traffic_risk.py"
_XC_ROUTING = "tests/test_vllm_crosscheck.py::test_routing_matches_vllm[0.31.0]"  # one driver run

MUTATIONS: list[Mutation] = [
    # -- the routing (VersionRules.router: the one routing declaration) ----------------
    M("predicate 0.31.0: swap_in up to C, not W = C + 1",
      _V, "limit = capacity + 1 if self.routes_on_workspace else capacity",
      "limit = capacity if self.routes_on_workspace else capacity",
      (_XC_ROUTING,)),
    M("predicate 0.32.0/fix: swap_in up to C + 1, not C",
      _V, "limit = capacity + 1 if self.routes_on_workspace else capacity",
      "limit = capacity + 1 if self.routes_on_workspace else capacity + 1",
      ("tests/test_model_tables.py", "tests/test_properties.py")),
    M("predicate 0.33.0: all-resident prefills go to swap_in",
      _V, "return lambda n, has_prefill: not has_prefill and n <= limit",
      "return lambda n, has_prefill: n <= limit",
      ("tests/test_model_tables.py", "tests/test_recordings.py")),
    M("error condition: swap_in raises at n >= C, not n > C",
      _V, "if routed > capacity else None", "if routed >= capacity else None",
      (_XC_ROUTING,)),
    M("hand-off 0.31.0/0.32.0: a mixed batch hands over all its tokens",
      _V, "return lambda n, decode: n if decode == 0 else decode",
      "return lambda n, decode: n",
      ("tests/test_recordings.py", "tests/test_workload_recordings.py")),
    M("hand-off 0.33.0, pages not all resident: the whole mixed batch",
      _V, "return lambda n, decode: n if decode == n else decode",
      "return lambda n, decode: n",
      ("tests/test_model_tables.py",)),
    M("hand-off FLASHMLA_SPARSE: the whole batch, like FLASH_ATTN_MLA_SPARSE",
      _V, 'if backend == "FLASHMLA_SPARSE" or not all_resident:',
      "if not all_resident:",
      ("tests/test_model_tables.py", "tests/test_properties.py")),
    # -- sizes ----------------------------------------------------------------------------
    M("C ignores B: C = S * q",
      _P, "c = min(b, s * q)", "c = s * q",
      ("tests/test_model_tables.py",)),
    M("W = C + 2",
      _P, "return Plan(knobs, rules, b, q, c, c + 1,", "return Plan(knobs, rules, b, q, c, c + 2,",
      ("tests/test_model_tables.py",)),
    M("q = max(1, K): the verified token not counted under MTP",
      _P, "q = 1 + k\n", "q = max(1, k)\n",
      ("tests/test_model_tables.py",)),
    M("default B not capped at 16384",
      _P, "return min(max_num_seqs * max_model_len, LLM_CLASS_MAX_BATCHED_TOKENS)",
      "return max_num_seqs * max_model_len",
      ("tests/test_model_tables.py", "tests/test_cli.py")),
    M("capture sizes: B itself only when below the cap",
      _P, "if b <= cap:\n        sizes.add(b)", "if b < cap:\n        sizes.add(b)",
      ("tests/test_plan_table.py",)),
    # -- 0.34.0's start-up and capture sizes (sizing_warmup.py, plan._split_sizes) -----------
    M("0.34.0: the CUDA-graph memory profile captures though the extensible KV cache is on",
      "hisparse_model/model/startup.py", "out = [] if extensible else _capture_phase(",
      "out = _capture_phase(", ("tests/test_recordings.py::test_recording_matches_model",)),
    M("0.34.0 sizing warmup: the decode request takes a slot the prefills need",
      "hisparse_model/model/sizing_warmup.py",
      "with_decode = s >= 2 and _cdiv(num_tokens - q, max_prefill) < s", "with_decode = s >= 2",
      ("tests/test_recordings.py::test_recording_matches_model",)),
    M("0.34.0 capture sizes: the drafter's graphs from the shared sizes, not the request grid",
      _P, "drafts = shapes(_walk_grid(s), min(s, b))",
      "drafts = shapes([t for t in shared if t <= s], min(s, b))",
      ("tests/test_plan_table.py",)),
    M("0.34.0 sampler warmup: a PIECEWISE graph routes the real count, not its padded size",
      "hisparse_model/model/sizing_warmup.py", "padded, reqs, dec, mode,", "n, reqs, n, mode,",
      ("tests/test_workload_recordings.py::test_workload_recording_matches_simulate",)),
    M("0.34.0 sampler warmup: the padded dummy batch counted as all decode tokens",
      "hisparse_model/model/sizing_warmup.py",
      "dec = spread_decode_tokens(padded, reqs, plan.max_decode_query_len, uniform)",
      "dec = padded", ("tests/test_sizing_warmup.py",)),
    M("0.34.0 sizing warmup: a short prefill remainder left behind the long prefills",
      "hisparse_model/model/sizing_warmup.py",
      "dec = decode_tokens(runner_order(lens, q, drafted), q, uniform)",
      "dec = decode_tokens(lens, q, uniform)", ("tests/test_sizing_warmup.py",)),
    # -- start-up batches -------------------------------------------------------------------
    M("decode split: a request of exactly q tokens counts as a prefill",
      "hisparse_model/model/routing.py", "if (qlen not in (first, 0)) if uniform else (qlen > threshold):",
      "if (qlen not in (first, 0)) if uniform else (qlen >= threshold):",
      ("tests/test_batch_shapes.py",)),
    M("dummy spread: the longer requests counted as decodes at q",
      "hisparse_model/model/batches.py", "if base + 1 > threshold or", "if base + 1 > threshold + 1 or",
      ("tests/test_batch_shapes.py",)),
    M("JIT warmup: min(S, B // q) requests instead of B // (q + 1)",
      "hisparse_model/model/startup.py", "num_reqs = min(s, b // prompt_len)",
      "num_reqs = min(s, b // q)",
      ("tests/test_model_tables.py", "tests/test_recordings.py")),
    M("0.33.0 warms up once under MTP, not twice",
      _V, "spec_warmups=2,\n                     newer=True),",
      "spec_warmups=1,\n                     newer=True),",
      ("tests/test_recordings.py",)),
    M("0.34.0 warms up once under MTP, not twice",
      _V, "spec_warmups=2,\n                     newer=True, extensible=True),",
      "spec_warmups=1,\n                     newer=True, extensible=True),",
      ("tests/test_recordings.py",)),
    M("speculative slots: B = K accepted in 0.33.0",
      _V, "        if b <= limit:\n", "        if b < limit:\n",
      ("tests/test_plan_table.py",)),
    M("MTP drafter: fused draft steps run 2 forwards, not 2 (K - 1)",
      "hisparse_model/model/startup.py", "forwards = 2 * (k - 1) if fused else 2", "forwards = 2",
      ("tests/test_model_tables.py",)),
    # -- serving-time dispatch ----------------------------------------------------------------
    M("dispatch: a FULL decode graph replays a batch that is not a uniform decode",
      "hisparse_model/model/dispatch.py", "if uniform == q and reqs >= num_reqs:",
      "if reqs >= num_reqs:",
      ("tests/test_workload_recordings.py", "tests/test_recordings.py")),
    M("dispatch: a step replays the largest PIECEWISE graph, not the smallest that holds it",
      "hisparse_model/model/dispatch.py", "for tokens, _, _ in reversed(plan.piecewise):",
      "for tokens, _, _ in plan.piecewise:",
      ("tests/test_cli_simulate.py",)),
    # -- the scheduler (simulate, predict's prefix hits) --------------------------------------
    M("chunked prefill: a new request may take one token past the budget",
      _S, "n = min(n, budget)  #", "n = min(n, budget + 1)  #",
      ("tests/test_scheduler.py", "tests/test_workload_recordings.py")),
    M("chunked prefill: a running request's chunk is not capped by the budget",
      _S, "n = n if n < budget else budget", "n = n",
      ("tests/test_scheduler.py", "tests/test_workload_recordings.py")),
    M("async scheduling: one placeholder per step, drafts not counted",
      _S, "r.ph += 1 + d", "r.ph += 1",
      ("tests/test_scheduler.py", "tests/test_workload_recordings.py")),
    M("prefix cache: a hit may cover the prompt's last full block (no num_tokens - 1)",
      _S, "cap = r.P >> 6 if self.hit_cap_full else (r.P - 1) >> 6",
      "cap = r.P >> 6",
      ("tests/test_scheduler.py", "tests/test_workload_recordings.py")),
    M("prefix cache under MTP: the last hit block is not dropped",
      _S, "m -= 1 if self.K and m else 0", "m -= 0",
      ("tests/test_scheduler.py", "tests/test_workload_recordings.py")),
    # -- the KV pool ----------------------------------------------------------------------------
    M("KV pool: the warmup cap counts the null block as usable",
      "hisparse_model/model/kv_pool.py", "return max(1, (n - 1) // per_request)",
      "return max(1, n // per_request)",
      ("tests/test_kv_pool.py",)),
    M("KV pool: admission counts the null block as usable",
      "hisparse_model/model/kv_pool.py", "if n - 1 >= need:", "if n >= need:",
      ("tests/test_kv_pool.py",)),
    M("host pool: vLLM's refusal forgets the null block and the copy-on-write tail",
      "hisparse_model/model/host_pool.py", "SPARE_BLOCKS = 2  #", "SPARE_BLOCKS = 0  #",
      ("tests/test_host_pool.py",)),
    M("host pool: a block counted without the MTP layer",
      "hisparse_model/model/kv_layout.py",
      "return m.num_hidden_layers + (m.num_nextn_predict_layers if self.k else 0)",
      "return m.num_hidden_layers", ("tests/test_host_pool.py",)),
    M("layout: one layer a hot group whatever the indexer's page",
      "hisparse_model/model/kv_layout.py",
      "return max(1, self.indexer_page_bytes // self.page_bytes)", "return 1",
      ("tests/test_layout_recordings.py",)),
    M("layout: fp8_ds_mla rows counted as bf16 rows",
      "hisparse_model/model/kv_layout.py", 'if self.cache_format == "fp8_ds_mla":',
      'if self.cache_format == "fp8_ds_mla!":', ("tests/test_layout_recordings.py",)),
    M("layout: a shared tensor-parallel pool's stride not rounded to the OS page",
      "hisparse_model/model/kv_layout.py",
      "return _cdiv(page, OS_PAGE) * OS_PAGE if self.shared_host_pool else page",
      "return page", ("tests/test_served_model.py",)),
    M("layout: no int16 refusal of a hot buffer past 32,768 rows",
      "hisparse_model/model/kv_layout.py", "if size <= HOT_SLOT_LIMIT:",
      "if True:", ("tests/test_layout_recordings.py",)),
    M("host pool: a finished request's blocks freed at once, not two steps later",
      "hisparse_model/model/host_pool.py", "self.until[i] = st.index + 2",
      "self.until[i] = st.index", ("tests/test_host_pool.py",)),
    M("host pool: an admitted request holds only its first chunk's blocks",
      "hisparse_model/model/host_pool.py",
      "holds[i] = now = blocks if blocks > prompt else prompt", "holds[i] = now = blocks",
      ("tests/test_host_pool.py",)),
    M("check: a HiSparseConnector without host_pool_gib is taken (the knob's 1 GiB)",
      "hisparse_model/inputs/launch.py", '    if "host_pool_gib" in values:\n        return',
      '    if True:\n        return', ("tests/test_check.py", "tests/test_bad_input.py")),
    # -- data parallel: the per-step sync across ranks (data_parallel.py) ------------------
    M("DP: ranks pad to the smallest rank's count, not the largest",
      "hisparse_model/schedule/data_parallel.py", "    top = max(w[0] for w in wants)",
      "    top = min(w[0] for w in wants)",
      ("tests/test_parallel.py", "tests/test_two_gpu_sweep.py")),
    M("DP: ranks agree on the highest CUDA-graph mode, not the lowest",
      "hisparse_model/schedule/data_parallel.py",
      "    agreed = min((w[3][0] for w in wants), key=MODE_ORDER.__getitem__)",
      "    agreed = max((w[3][0] for w in wants), key=MODE_ORDER.__getitem__)",
      ("tests/test_parallel.py", "tests/test_two_gpu_sweep.py")),
    M("DP: each rank pads to its own count (no sync)",
      "hisparse_model/schedule/data_parallel.py", "else graph(p, top, reqs, uniform)",
      "else graph(p, n, reqs, uniform)",
      ("tests/test_parallel.py", "tests/test_two_gpu_sweep.py")),
    M("DP: an idle rank's dummy batch is all resident even after a real step",
      "hisparse_model/schedule/data_parallel.py",
      "        resident[rank] = st.resident  # the connector is off for dummy runs",
      "        pass  # the connector is off for dummy runs",
      ("tests/test_parallel.py", "tests/test_two_gpu_sweep.py", "tests/test_rank_recordings.py")),
    # -- tensor parallel: what the caller sees (parallel.py) --------------------------------
    M("TP in process: the caller sees the bare ValueError, not the workers' wrap",
      "hisparse_model/model/parallel.py", "return error if tp == 1 else worker_failed(error)",
      "return error",
      ("tests/test_parallel.py",)),
    # -- outputs lost at a crash (lost.py) and the drafter's uncaptured steps ---------------
    M("lost: the step before the crash counts as handed back",
      "hisparse_model/answers/lost.py", "st.returned_at < crash_step", "st.returned_at <= crash_step",
      ("tests/test_lost_and_drafts.py", "tests/test_workload_recordings.py")),
    M("advice's fast verdict: a step of C + 1 tokens skipped as if it could not crash",
      "hisparse_model/answers/verdict.py", "            if self.tokens[i] <= c:",
      "            if self.tokens[i] <= c + 1:",
      ("tests/test_verdict.py",)),
    M("advice's fast verdict: a met schedule's later steps over the new B taken as shared",
      "hisparse_model/answers/verdict.py",
      "steps_over.extend(i for i in range(over[1], len(tokens)) if tokens[i] > b)",
      "steps_over.extend(i for i in range(over[1], len(tokens)) if False)",
      ("tests/test_verdict.py",)),
    M("advice's fast verdict: two states taken as met whatever their published host blocks",
      "hisparse_model/answers/verdict.py",
      "tuple(_REQ_STATE(reached[i]) for i in sorted(reached)), dict(sim.published),",
      "tuple(_REQ_STATE(reached[i]) for i in sorted(reached)), None,",
      ("tests/test_verdict.py",)),
    M("draft steps: replayed from a graph whatever the request count",
      _P, "drafts = tuple(t for t in sizes if t <= s) if", "drafts = tuple(sizes) if",
      ("tests/test_lost_and_drafts.py", "tests/test_workload_recordings.py")),
    # -- the dashboards' digest (views/digest.py: the one writer every reader follows) -------
    M("digest writer: the old markup (<code>, not hidden) that no reader reads",
      "hisparse_model/views/digest.py",
      "return f\"<span class='{CLASS}' data-dashboard='{name}' hidden>{esc(summary)}</span>\"",
      "return f\"<code class='{CLASS}' data-dashboard='{name}'>{esc(summary)}</code>\"",
      ("tests/test_notebook_live_replay.py",)),
    # -- the exposure analysis (exposure.py) and its fast advice paths ---------------------
    M("exposure: B does not bound a step (C + 1 asked even when B <= C)",
      "hisparse_model/answers/exposure.py", "range(c + 1, min(b, c + SCAN) + 1), b}",
      "range(c + 1, c + SCAN + 1), b}", ("tests/test_exposure.py",)),
    M("exposure: a step that routes taken for a FULL replay (routes nothing)",
      "hisparse_model/answers/exposure.py", 'if dispatch(p, n, m, -(-n // m), False).mode == "FULL":',
      'if dispatch(p, n, m, -(-n // m), False).mode != "FULL":', ("tests/test_exposure.py",)),
    M("exposure: a prompt of max_model_len tokens counted as servable",
      "hisparse_model/answers/exposure.py", "top = max_len - 1  # the longest prompt vLLM accepts",
      "top = max_len  # the longest prompt vLLM accepts", ("tests/test_exposure.py",)),
    M("exposure: a staged cached prefix taken as resident",
      "hisparse_model/answers/exposure.py", "resident, staged = router(p, True), router(p, False)",
      "resident, staged = router(p, True), router(p, True)", ("tests/test_exposure.py",)),
    M("exposure -dp N: an idle rank's dummy padded only by a step of its own size",
      "hisparse_model/answers/exposure_dp.py", "while t >= 1 and graph(p, t, 1, None)[1] == n:",
      "while t >= 1 and t == n:", ("tests/test_exposure.py",)),
    M("exposure -dp N: the examples arrive before the idle ranks' placeholders are done",
      "hisparse_model/answers/exposed_steps.py", "IDLE_FROM = MAX_TOKENS\n", "IDLE_FROM = 0\n",
      ("tests/test_exposure.py",)),
    M("predict advice: a prompt's predecessor done one step earlier (the one run gives up)",
      "hisparse_model/schedule/serving.py", "return steps[j].index + 2", "return steps[j].index + 1",
      ("tests/test_advice_speed.py",)),
    M("notebooks 2 and 3: a lone prompt's last chunk miscounted at a multiple of B",
      "hisparse_model/schedule/serving.py", "full = (n - 1) // b", "full = n // b",
      ("tests/test_prompt_walk.py",)),
    # -- simulate --traffic (traffic_risk.py) ------------------------------------------------
    # every serving loop's crash test (first_crash, serve_stream, serve_on_clock): one rule
    M("serving: a step of C + 1 tokens skipped as one that cannot raise",
      "hisparse_model/model/step_record.py", "st.num_tokens <= p.swap_capacity:",
      "st.num_tokens <= p.swap_capacity + 1:",
      ("tests/test_served_warm.py", "tests/test_docs.py", "tests/test_traffic_risk.py",
       "tests/test_stream_replay.py")),
    M("traffic: a request joins one engine step after it arrives",
      _T, "out = [(int(t / per_step), n, m) for t, n, m, _ in rows]",
      "out = [(int(t / per_step) + 1, n, m) for t, n, m, _ in rows]",
      ("tests/test_docs.py",)),
    # the same rule where Poisson traffic and long traces are served (stream_replay.py)
    M("streamed traffic: the crash test's answer not read (every step served on)",
      "hisparse_model/answers/stream_replay.py", "            if error := step_error(p, st):",
      "            if (error := step_error(p, st)) and False:",
      ("tests/test_traffic_risk.py", "tests/test_stream_replay.py")),
    M("clock: a batch scheduled as it starts, not as the one before it starts (async)",
      "hisparse_model/schedule/clock.py", "        self.ahead = sim.asyn\n",
      "        self.ahead = False\n", ("tests/test_clock.py",)),
    M("host pool: a step's finished requests read as it is handed over (async: never freed)",
      "hisparse_model/model/host_pool.py", "            self.open.append(st)\n",
      "            pass\n", ("tests/test_host_pool.py",)),
    M("clock: launching an eager batch charged at the PIECEWISE price and back",
      "hisparse_model/schedule/clock.py",
      "(self.launch_eager_ms if mode == \"NONE\" else self.launch_piecewise_ms)",
      "(self.launch_piecewise_ms if mode == \"NONE\" else self.launch_eager_ms)",
      ("tests/test_clock.py", "tests/test_served_timed.py")),
    M("clock: a batch after an idle engine does not pay its own launch",
      "hisparse_model/schedule/clock.py", "            self.now_s += ms / 1000.0\n",
      "            pass\n", ("tests/test_clock.py", "tests/test_served_timed.py")),
    M("clock: the launch charged to the batch itself, not to the one before it",
      "hisparse_model/schedule/clock.py",
      "            self._before[1] += ms / 1000.0\n            self.now_s = self._before[1]\n",
      "            self.now_s += ms / 1000.0\n",
      ("tests/test_clock.py", "tests/test_served_timed.py")),
    M("clock fit: a period charged for launching its own batch, not the next",
      "hisparse_model/answers/clock_fit.py", "        mode = _mode(plan, n)\n",
      "        mode = _mode(plan, r)\n", ("tests/test_clock.py", "tests/test_served_timed.py")),
    M("clock fit: a run folder's batches classed with the knobs given, not its run.json's",
      "hisparse_model/answers/clock_fit.py", "        plan, graphs = _run_plan(path, plan)\n",
      "        graphs = None\n", ("tests/test_clock.py",)),
    M("streamed traffic: the rows the replay serves not counted as replayed",
      "hisparse_model/answers/stream_replay.py", "            self._served(self.next_s, n, m)\n",
      "", ("tests/test_stream_replay.py",)),
    M("host cache: the most recently freed cached block evicted first, not the least",
      "hisparse_model/schedule/host_cache.py", "key = next(iter(free), None)",
      "key = next(reversed(free), None)", ("tests/test_host_cache.py",)),
    M("host cache: a freed request's blocks queued head page first, not tail first",
      "hisparse_model/schedule/host_cache.py", "for key in reversed(keys):",
      "for key in keys:", ("tests/test_host_cache.py",)),
    M("host cache: a hit leaves its block in the eviction queue (no touch)",
      "hisparse_model/schedule/scheduler.py",
      "        if self.cache is not None:\n            self.cache.hold(r.keys[:m])\n",
      "", ("tests/test_host_cache.py",)),
    M("streamed traffic: a request joins one engine step after it arrives",
      "hisparse_model/answers/stream_replay.py",
      "self.next, self.next_s = (int(t / self.per_step), n, m, b), t",
      "self.next, self.next_s = (int(t / self.per_step) + 1, n, m, b), t",
      ("tests/test_traffic_risk.py", "tests/test_stream_replay.py")),
    M("serve comparison: the step time over the first five seconds, not up to the end",
      "hisparse_model/recorded/serve_recordings.py", "first, last = times[0], times[-1]",
      "first, last = times[0], times[1]", ("tests/test_serve_compare.py",)),
    M("serve comparison: an input dump read as a crash without the HiSparse error",
      "hisparse_model/recorded/serve_recordings.py",
      "dump = dump_of(run.log) if error else None", "dump = dump_of(run.log)",
      ("tests/test_serve_compare.py",)),
    M("traffic: the crash workload leaves out the requests of the crash step",
      "hisparse_model/answers/seed_run.py", "for i, ((a, n, m), b) in enumerate(zip(self.requests, blocks)) if a <= cut))",
      "for i, ((a, n, m), b) in enumerate(zip(self.requests, blocks)) if a < cut))",
      ("tests/test_traffic_risk.py",)),
    M("traffic: the server's door refuses only prompts not shorter than max_model_len",
      "hisparse_model/answers/arrivals.py",
      "return prompt_len + max_tokens > max_model_len or prompt_len >= max_model_len",
      "return prompt_len >= max_model_len",
      ("tests/test_traffic_risk.py", "tests/test_served_warm.py")),
    M("served replay: a DeepGEMM kernel compiled in the window left comparable",
      "hisparse_model/engine/jit_window.py", '"comparable": not grew and not warnings}',
      '"comparable": not warnings}', ("tests/test_jit_window.py",)),
    M("clock: a request finishes when its last batch starts, not when it ends",
      "hisparse_model/schedule/clock.py", "self._open.append([st, self.now_s])",
      "self._open.append([st, start])", ("tests/test_clock.py",)),
    M("clock: a batch's context leaves out the tokens computed before it",
      "hisparse_model/schedule/clock.py", "context += step.num_computed_before.get(r, 0) + n",
      "context += n", ("tests/test_clock.py",)),
    M("clock fit: a second at the edge of a busy stretch taken for a busy one",
      "hisparse_model/inputs/iteration_log.py",
      "if (key - 1) % day in per and (key + 1) % day in per]", "if (key - 1) % day in per]",
      ("tests/test_clock.py",)),
    M("traffic: a waiting request keyed when it arrives, not when first admitted",
      "hisparse_model/answers/stream_replay.py", "self._req, self._keys = _Req, LazyKeys",
      "self._req, self._keys = _Req, prompt_keys",
      ("tests/test_boundary.py::test_an_overloaded_servers_queue_costs_its_prompts_not_their_keys",)),
    M("traffic: Poisson requests all made before the first step",
      "hisparse_model/answers/traffic_risk.py",
      "if not traffic.replayed and not startup and not never:", "if False:",
      ("tests/test_boundary.py::test_an_overloaded_servers_queue_costs_its_prompts_not_their_keys",)),
    M("outputs: a symbolic link written through (the rename replaces the link)",
      "hisparse_model/boundary/outputs.py", '(stat.S_ISLNK, "a symbolic link"), ', "",
      ("tests/test_outputs.py", "tests/test_traffic_risk.py")),
    # -- the input boundary (hisparse_model/boundary/, issue 51) ------------------------------
    M("replay: sized by its mean rate x --minutes, not by its own rows",
      _T, "arrivals = (bisect.bisect_left(traffic.arrivals_s, minutes * 60) if traffic.replayed",
      "arrivals = (traffic.rate_per_s * minutes * 60 if traffic.replayed",
      ("tests/test_boundary.py::test_a_replay_is_sized_by_its_own_rows_not_its_rate",)),
    M("check: a connector without kv_role taken, where vLLM's KVTransferConfig refuses it",
      "hisparse_model/inputs/launch.py",
      "if config.get(\"kv_connector\") is not None and role is None:",
      "if False:", ("tests/test_check.py",)),
    M("--from-log: two DP ranks' engine lines read as two start-ups",
      "hisparse_model/inputs/log_lines.py", "engine_seen and (rank is None or rank in ranks)))):",
      "engine_seen))):", ("tests/test_from_log.py",)),
    M("boundary: a log's line count unbounded",
      "hisparse_model/boundary/files.py", "if bound.lines and count > bound.lines:",
      "if False:", ("tests/test_boundary.py::"
                    "test_every_reader_refuses_past_its_bound_in_bounded_memory_and_time",)),
    M("boundary: a /metrics redirect answered as any other HTTP error",
      "hisparse_model/boundary/http.py", "if 300 <= response.status < 400:",
      "if 300 <= response.status < 300:",
      ("tests/test_boundary.py::test_a_redirect_is_not_followed_and_names_where_it_points",)),
    M("boundary: a refusal's newline (a path the user gave) printed as a second line",
      "hisparse_model/exits.py", "c if c.isprintable() else repr(c)[1:-1]", "c",
      ("tests/test_fuzz_flags.py::test_every_flag_takes_hostile_values_in_one_line",)),
]


def _copy_repo(dest: pathlib.Path) -> None:
    """The repository's files as git sees them (tracked + untracked not ignored), and .vllm."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, check=True, capture_output=True).stdout
    for rel in filter(None, out.decode().split("\0")):
        src = REPO / rel
        if not src.is_file() or src.is_symlink():
            continue  # deleted in the working tree, or a link (recreated below if needed)
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def _vllm_root() -> pathlib.Path:
    return pathlib.Path(os.environ.get("VLLM_TARGET_ROOT") or REPO / ".vllm").resolve()


def _env(copy: pathlib.Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(copy)  # the copy's package, never the working tree's
    env["VLLM_TARGET_ROOT"] = str(_vllm_root())
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no stale .pyc of a mutant (same size, same second)
    return env


def _pytest(copy: pathlib.Path, tests, marks: str, workers: int = 1) -> tuple[str, float, str]:
    """('passed' | 'failed' | 'error: ...', seconds, first failing test or '')."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-rfE",
           "-m", marks, *tests]
    if workers > 1:  # pytest-xdist; the CPU cross-checks stay on one worker (tests/conftest.py)
        cmd[3:3] = ["-n", str(workers), "--dist", "loadgroup"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=copy, env=_env(copy), capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"error: timed out after {RUN_TIMEOUT_S} s", time.perf_counter() - t0, ""
    dt = time.perf_counter() - t0
    # "FAILED <node id> - <message>"; a node id may hold spaces (parametrize ids)
    first = next((m.group(1) for m in re.finditer(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$",
                                                   proc.stdout, re.M)), "")
    if proc.returncode == 0:
        return "passed", dt, ""
    if proc.returncode == 1 and first:
        return "failed", dt, first
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
    return f"error: pytest exit {proc.returncode}: {' | '.join(tail)}", dt, first


def _check_rows(rows) -> list[str]:
    problems = []
    names = [m.name for m in rows]
    for m in rows:
        if names.count(m.name) > 1:
            problems.append(f"{m.name}: the name is used twice")
        count = (REPO / m.path).read_text().count(m.old)
        if count != 1:
            problems.append(f"{m.name}: {m.path} holds the text {count} times, not once: "
                            f"{m.old!r}")
        if m.old == m.new:
            problems.append(f"{m.name}: the mutation changes nothing")
    return problems


def _junit_cases(paths: list[str]) -> dict[str, str]:
    """``file.py::name`` -> 'passed' / 'failed' / 'skipped' of these JUnit XML files (an
    xdist group's ``@name`` taken off the name)."""
    import xml.etree.ElementTree as ET

    out = {}
    for path in paths:
        for case in ET.parse(path).iter("testcase"):
            name = re.sub(r"@[\w-]+$", "", case.get("name", ""))
            node = f"{case.get('classname', '').replace('.', '/')}.py::{name}"
            bad = case.find("failure") is not None or case.find("error") is not None
            out[node] = ("failed" if bad else
                         "skipped" if case.find("skipped") is not None else "passed")
    return out


def _passed_in(tests: list[str], junit: list[str]) -> str:
    """'' if every test (a file or a node id) ran and passed in ``junit``, else what did not."""
    cases = _junit_cases(junit)
    for test in tests:
        hit = [st for node, st in cases.items()
               if node == test or node.startswith(test + "::") or node.startswith(test + "[")]
        if not hit:
            return f"{test} did not run there"
        if "failed" in hit or all(st == "skipped" for st in hit):
            return f"{test} did not pass there"
    return ""


def _prepare_copy(dest: pathlib.Path) -> str:
    """A copy of the repository at ``dest`` with ``.vllm`` linked; '' or why it is unusable."""
    dest.mkdir()
    _copy_repo(dest)
    (dest / ".vllm").symlink_to(_vllm_root(), target_is_directory=True)
    probe = subprocess.run([sys.executable, "-c", "import hisparse_model; "
                            "print(hisparse_model.__file__)"], cwd=dest, env=_env(dest),
                           capture_output=True, text=True)
    if not probe.stdout.strip().startswith(str(dest)):
        return f"the copy imports hisparse_model from {probe.stdout!r}{probe.stderr[-500:]}"
    return ""


def _run_row(m: Mutation, copies: "queue.Queue[pathlib.Path]"):
    """Mutate one free copy, run the row's tests (then the fast suite if they pass), restore."""
    copy = copies.get()
    try:
        path = copy / m.path
        original = path.read_text()
        path.write_text(original.replace(m.old, m.new, 1))
        try:
            status, dt, first = _pytest(copy, m.tests, "not browser and not gpu")
            where = "its tests"
            if status == "passed":
                s2, dt2, first = _pytest(copy, [], FAST)
                status, dt, where = s2, dt + dt2, "fast suite"
        finally:
            path.write_text(original)
    finally:
        copies.put(copy)
    verdict = ("killed" if status == "failed" else
               "SURVIVED" if status == "passed" else status)
    return m, verdict, where, first, dt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None, help="run the rows whose name holds any "
                    "of these words")
    ap.add_argument("--list", action="store_true", help="list the rows and exit")
    ap.add_argument("--passed-in", nargs="+", metavar="JUNIT.xml", default=None,
                    help="the unmutated run of the rows' tests is these JUnit files' (the "
                    "suite run just before on this tree, as run_tests.py passes them): each "
                    "row test must have passed there, and the copies only collect them")
    ap.add_argument("--jobs", type=int, default=JOBS, help=f"mutants tested at once, each in "
                    f"its own copy of the repository (default {JOBS}: the cores, at most 2)")
    args = ap.parse_args(argv)
    rows = MUTATIONS
    if args.only:
        rows = [m for m in rows if any(w in m.name for w in args.only)]
        if not rows:
            print(f"mutation_check: no mutation's name holds any of {args.only}", file=sys.stderr)
            return 2
    if args.list:
        for m in rows:
            print(f"{m.name}  [{m.path}]  {' '.join(m.tests)}")
        return 0
    problems = _check_rows(rows)
    for p in problems:
        print(f"mutation_check: {p}", file=sys.stderr)
    if problems:
        return 1
    jobs = max(1, min(args.jobs, len(rows)))
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hisparse-mutants-") as tmp:
        copies: queue.Queue[pathlib.Path] = queue.Queue()
        for i in range(jobs):
            why = _prepare_copy(pathlib.Path(tmp) / f"copy{i}")
            if why:
                print(f"mutation_check: {why}", file=sys.stderr)
                return 1
            copies.put(pathlib.Path(tmp) / f"copy{i}")
        first_tests = list(dict.fromkeys(t for m in rows for t in m.tests))
        copy0 = pathlib.Path(tmp) / "copy0"
        if args.passed_in:  # the suite just ran them on this tree: the copies collect them
            why = _passed_in(first_tests, args.passed_in)
            status, dt, first = ("passed", 0.0, "") if why else _pytest(
                copy0, ["--collect-only", *first_tests], "not browser and not gpu")
            status = f"error: {why}" if why else status
            what = f"passed in {', '.join(args.passed_in)}; the copy collects them"
        else:
            status, dt, first = _pytest(copy0, first_tests, "not browser and not gpu",
                                        workers=jobs)
            what = status
        print(f"unmutated copy: the rows' tests {what} ({dt:.0f} s)"
              + (f" ({first})" if first else ""), flush=True)
        if status != "passed":
            print(f"mutation_check: unmutated, the rows' tests {status}", file=sys.stderr)
            return 1
        results = {}
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            for m, verdict, where, first, dt in map(
                    concurrent.futures.Future.result,
                    concurrent.futures.as_completed(
                        [pool.submit(_run_row, m, copies) for m in rows])):
                results[m.name] = (m, verdict, where, first, dt)
                print(f"  {verdict:8} {dt:5.0f} s  {m.name}"
                      + (f"  <- {first} ({where})" if first else ""), flush=True)
    results = [results[m.name] for m in rows]  # the table in the rows' order
    total = time.perf_counter() - t_start
    w = max(len(m.name) for m, *_ in results)
    print(f"\n{'mutation':{w}}  {'result':8}  first failing test")
    for m, verdict, where, first, dt in results:
        print(f"{m.name:{w}}  {verdict:8}  {first or '-'}"
              + (" (fast suite)" if first and where == "fast suite" else ""))
    bad = [m.name for m, verdict, *_ in results if verdict != "killed"]
    slow = [m.name for m, verdict, where, *_ in results if where == "fast suite"]
    print(f"\n{len(results) - len(bad)} of {len(results)} mutations killed in {total:.0f} s"
          f" ({jobs} at a time, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f})")
    if slow:
        print("killed only by the fast suite (name the test that kills it in the row): "
              + "; ".join(slow), file=sys.stderr)
    if bad:
        print("not killed: " + "; ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
