"""vLLM's V1 engine loop and scheduler for one workload, step by step (pure Python).

``schedule(config, workload, accepted)`` lists every engine step that schedules
tokens, and how many each request computes, for the fix PR's offline ``vllm.LLM``
(tiny DeepSeek-V3.2, block 64, HiSparse, Model Runner V2, ``ignore_eos``) on vLLM
0.31.0 / 0.32.0 / 0.33.0.  Citations are 0.31.0 lines (``@0.32.0``/``@0.33.0`` for
rules that differ); every rule's 0.32.0 / 0.33.0 lines are listed in
``crosscheck/scheduler_driver.py``, which runs vLLM's own (Async)Scheduler on CPU
against this model, requiring zero disagreements.

Modelled: the engine loop, sync or ``step_with_batch_queue``
(vllm/v1/engine/core.py:670 `def step_with_batch_queue`) with 2 batches in flight
(vllm/config/vllm.py:592 `def max_concurrent_batches`) -- async is the default here
(vllm/config/vllm.py:1635 `async_scheduling = True`; MTP is EAGLE-type), so step
k's output is processed after step k + 1 is scheduled; requests of ``arrival_step``
k join before engine step k (one ``step_fn`` call; idle calls count).  The
scheduler, outputs and async placeholders, cited below.  Prefix caching, on by
default for this model (vllm/engine/arg_utils.py:2957 `= default_prefix_caching`,
vllm/config/model.py:2229 `Generative models support prefix caching.`; HiSparse
leaves it), through the HiSparse host tier, whose pages publish when their page
transfer completes.  ``Step.resident``: HiSparse's ``all_context_pages_resident``.

Assumed: (1) a page transfer carried by one schedule completes in the output of
the next (even an empty one: the worker submits it when the next step starts,
vllm/distributed/kv_transfer/kv_connector/v1/hisparse/worker.py:907
`def _finish_previous_step`, then polls CUDA events: live, it can only be later).
(2) The KV pools never run short (``num_gpu_blocks`` is not otherwise used):
no admission fails (HiSparse reserves the whole prompt, vllm/config/vllm.py:1829
`scheduler_reserve_full_isl`), nothing is preempted, evicted or lost -- true while
fewer blocks were allocated than a pool holds.  Short of blocks, vLLM preempts the
last running request to be recomputed (vllm/v1/core/sched/scheduler.py:771
`self.running[-1]`) unless a HiSparse transfer will free blocks, else waiting ones
wait; HiSparse moves requests to host reads and loses unpinned pages
(vllm/v1/hisparse/coordinator.py:383 `def _lose_page`) on GPU-transfer timing: not
modelled.  (3) Sampled tokens never match a prompt.  (4) MTP acceptance (dummy
weights) is an input, ``accepted(step, request, num_drafts)`` (:func:`acceptance`),
clamped to 0..num_drafts, padded placeholder drafts included.
"""

from __future__ import annotations

from collections import deque
from .prefix_keys import request_keys
from .scheduler_config import VERSIONS, SchedulerConfig, acceptance  # noqa: F401
from .step import Step
from ..model.versions import since
from .workload import Arrivals


class _Req:
    __slots__ = ("i", "P", "M", "ntok", "comp", "ph", "spec", "chunk", "nout", "done", "keys",
                 "infl", "alive", "planned", "ready", "pending", "pub", "pub_pages",
                 "copies_ok", "nsent")

    def __init__(self, i, P, M, keys):
        self.i, self.P, self.M, self.keys = i, P, M, keys
        self.ntok, self.comp, self.ph, self.spec, self.nout, self.infl = P, 0, 0, 0, 0, 0
        self.chunk, self.done, self.copies_ok = True, False, True
        self.alive, self.pub = True, False  # host tier (_HiSparseRequestState)
        self.planned = self.ready = self.pending = self.pub_pages = self.nsent = 0


class _Sim:
    def __init__(self, cfg: SchedulerConfig, workload, accepted, keys=None):
        """``keys``: :func:`request_keys` of ``workload`` (read with prefix caching only)."""
        self.acc = acceptance(accepted)
        self.S, self.B, self.L = cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.max_model_len
        self.K, self.asyn, self.apc = (cfg.num_speculative_tokens, cfg.async_scheduling,
                                       cfg.enable_prefix_caching)
        v = cfg.vllm_version
        # 0.32.0+ plan page transfers once per step, not in cache_blocks:
        # vllm/distributed/kv_transfer/kv_connector/v1/hisparse/connector.py:152@0.32.0 `advance`
        self.plan_on_cache = v == "0.31.0"
        # 0.32.0+: the EAGLE probe may match every full block before the drop,
        # vllm/v1/core/kv_cache_coordinator.py:873-874@0.32.0 `len(block_hashes) *`
        self.hit_cap_full = v != "0.31.0" and self.K > 0
        # 0.33.0 caches after each output at computed - in flight (sync MTP too),
        # vllm/v1/core/sched/scheduler.py:2407-2415@0.33.0 `num_in_flight_tokens`,
        # vllm/v1/core/sched/scheduler.py:2364-2372@0.34.0 `num_in_flight_tokens`
        self.cache_on_update = since(v, "0.33.0")
        # 0.33.0: no drafts after a step whose drafts are sure to go unused (MTP reserves
        # lookahead slots), vllm/v1/core/sched/scheduler.py:319-321@0.33.0 `self.can_skip_drafts = (`;
        # 0.34.0 drops its V2-runner test, always true under HiSparse:
        # vllm/v1/core/sched/scheduler.py:321@0.34.0 `self.can_skip_drafts = self.num_lookahead_tokens > 0`
        self.can_skip_drafts = since(v, "0.33.0") and self.K > 0
        keys = (keys or request_keys(workload)) if self.apc else [()] * len(workload.requests)
        self.reqs = [_Req(i, len(r.prompt_token_ids), r.max_tokens, keys[i])
                     for i, r in enumerate(workload.requests)]
        # the engine loop's batches in flight (verdict.py compares two runs' states)
        self.waiting, self.running, self.steps, self.queue = deque(), [], [], deque()
        self.finished_ids = False  # Scheduler.finished_req_ids is non-empty
        self.published: dict = {}  # host block key -> a GPU copy was recorded
        # coordinator.spills_to_send (a request per page), those the previous
        # step carried, and coordinator.pending_spills
        self.to_send, self.prev_sent, self.inflight = [], [], 0
        # the most requests running after any schedule() so far, and the first engine step
        # whose admission stopped on max_num_seqs with budget and waiting requests left
        self.peak, self.seqs_bound_at = 0, None
        # the host pool's cached blocks and their eviction (host_cache.py), where a serving
        # loop bounds the pool (host_pool.HostUse); None: the pool holds every prefix
        self.cache = None

    # -- HiSparse host tier (tracked with prefix caching only: it feeds hits) --
    def _cache_blocks(self, r, num_tokens):
        """coordinator.cache_blocks: the host group publishes the durable pages
        (vllm/v1/hisparse/coordinator.py:465 `def publish_when_ready`); 0.31.0's
        resident group plans transfers (vllm/v1/core/single_type_kv_cache_manager.py:2563
        `plan_prefix_materialization`)."""
        pages = num_tokens >> 6
        if pages == r.pub_pages and (r.planned >= pages or not self.plan_on_cache):
            return  # nothing new to plan or publish (completions publish themselves)
        if self.plan_on_cache and r.planned < pages:
            self._plan(r, pages)
        r.pub_pages = pages
        upto = pages if pages < r.ready else r.ready
        if upto > r.nsent:
            self._mark(r, upto, r.alive)
        r.pub = r.ready < pages

    def _plan(self, r, pages):
        """Sealed pages without a host copy, in order, at most L // 64 queued per step
        (vllm/v1/hisparse/coordinator.py:447 `budget = max(self.max_spill_pages`)."""
        n = min(pages - r.planned, (self.L >> 6) - len(self.to_send))
        if n > 0:
            self.to_send += [r] * n
            r.planned += n
            r.pending += n

    def _mark(self, r, upto, copy):
        for key in r.keys[r.nsent:upto]:
            self.published[key] = copy or self.published.get(key, False)
        if self.cache is not None and upto > r.nsent:  # its blocks, held until it frees them
            self.cache.hold(r.keys[r.nsent:upto])
        r.nsent = max(r.nsent, upto)

    def _release(self, r):
        """vLLM frees a finished request's host blocks: cached ones join the eviction queue."""
        if self.cache is not None:
            self.cache.release(r.keys[:r.nsent])

    def _complete(self, done):
        """Transfers complete (vllm/v1/hisparse/coordinator.py:735 `def _complete_host_writes`):
        a live writer publishes and records GPU copies (vllm/v1/hisparse/coordinator.py:288
        `def _record_copy`), a finished one publishes without
        (vllm/v1/hisparse/coordinator.py:768 `def _publish_detached_blocks`)."""
        self.inflight -= len(done)
        for r in done:  # a step's transfers complete together, in plan order
            r.pending, r.ready = r.pending - 1, r.ready + 1
            if not r.alive and r.pub and not r.pending:
                self._mark(r, min(r.ready, r.pub_pages), False)
                r.pub = False
                self._release(r)  # the detached publication frees its blocks
        for r in dict.fromkeys(done):
            if r.alive and r.pub:
                self._mark(r, min(r.pub_pages, r.ready), True)
                r.pub = r.ready < r.pub_pages

    def _hit(self, r) -> int:
        """Leading published host blocks, at most num_tokens - 1 tokens
        (vllm/v1/core/kv_cache_manager.py:295 `request.num_tokens - 1`), minus one under
        MTP (vllm/v1/core/single_type_kv_cache_manager.py:834 `if drop_eagle_block`); the
        GPU indexer group caches earlier; one pass
        (vllm/v1/core/kv_cache_coordinator.py:874 `is_simple_hybrid`).  Hit pages are
        host-only unless a GPU copy was recorded (vllm/v1/hisparse/coordinator.py:244
        `def _adopt_copies`): else all_context_pages_resident is False
        (vllm/v1/hisparse/coordinator.py:654-670 `def all_context_pages_resident`)."""
        cap = r.P >> 6 if self.hit_cap_full else (r.P - 1) >> 6
        published, m = self.published, 0
        while m < cap and m < len(r.keys) and r.keys[m] in published:
            m += 1
        m -= 1 if self.K and m else 0
        # vllm/v1/hisparse/coordinator.py:189 `def commit_computed_blocks`
        r.planned = r.ready = r.nsent = m
        if self.cache is not None:
            self.cache.hold(r.keys[:m])
        r.copies_ok = all(published[key] for key in r.keys[:m])
        return m << 6

    def evicting(self):
        """The host pool's cached blocks, followed from now on (``host_cache.py``): a
        serving loop that bounds the pool hands it to ``host_pool.HostUse``, which evicts
        them; None without prefix caching (nothing is cached)."""
        if self.apc and self.cache is None:
            from .host_cache import HostCache

            self.cache = HostCache(self.published)
        return self.cache

    # -- the engine loop ----------------------------------------------------
    def has_requests(self) -> bool:
        """Unfinished, finished since the last schedule, or transfers pending
        (vllm/v1/core/sched/scheduler.py:2757-2772 `def has_requests`)."""
        return bool(self.waiting or self.running or self.finished_ids or self.to_send
                    or self.inflight)

    def run(self, workload) -> list[Step]:
        for _ in self.lazily(workload):
            pass
        return self.steps

    def lazily(self, workload, arrivals=None):
        """The engine loop as a generator: each :class:`Step` as soon as it is scheduled (its
        ``finished`` and ``returned_at`` are filled in later, when its output is processed).
        ``arrivals``: engine step -> requests joining before it, looked up (``.get``) at every
        engine step, and ``next_after(step)``, the next step a request joins at (None: no
        more); default: each request's ``arrival_step`` (:class:`Arrivals`; ``serving.py``
        decides them as the run goes)."""
        if arrivals is None:
            arrivals = Arrivals.of(workload)
        queue, step = self.queue, 0
        while True:
            for i in arrivals.get(step, ()):
                self.waiting.append(self.reqs[i])
            if not queue and not self.has_requests():
                # Nothing waiting, running, finished or in flight: every engine step until the
                # next arrival schedules and processes nothing, so jump to it in O(1) (its
                # number is the one vLLM's loop gives it); none left: the loop ends.
                step = arrivals.next_after(step)
                if step is None:
                    return
                continue
            scheduled = len(self.steps)
            if self.asyn:  # vllm/v1/engine/core.py:670-786 `def step_with_batch_queue`
                pop = bool(queue)
                if self.has_requests():
                    queue.appendleft(self.schedule(step))
                    pop = not (len(queue) < 2 and (queue[0][0] or self.has_requests()))
                if pop:
                    self.update(*queue.pop(), step)
            elif self.has_requests():  # vllm/v1/engine/core.py:630-668 `def step(self)`
                out = self.schedule(step)
                self.update(*out, step)
                # post_step: vllm/v1/core/sched/scheduler.py:2491 `def update_draft_token_ids(`
                for r, _, _, _ in out[2] if self.K and out[0] else ():
                    if not r.done:
                        r.spec = 0 if r.chunk else self.K
            step += 1
            yield from self.steps[scheduled:]  # the step scheduled in this call, if any

    def schedule(self, step):
        """vllm/v1/core/sched/scheduler.py:562 `def schedule`."""
        K, L, apc = self.K, self.L, self.apc
        budget = self.B  # token budget; input_budget moves with it (MTP adds no draft slots)
        rows = []  # (request, tokens, computed before, drafts)
        prefill_scheduled = False
        # vllm/v1/core/sched/scheduler.py:630 `while req_index < len(self.running)`
        for r in self.running:
            if budget <= 0:
                break
            comp, ph = r.comp, r.ph
            # vllm/v1/core/sched/scheduler.py:640-645 `+ 2 - request.num_output_placeholders`
            if ph and comp + 2 - ph >= r.P + r.M:
                continue
            # vllm/v1/core/sched/scheduler.py:674-692 `request.num_tokens_with_spec`
            n = r.ntok + r.spec + ph - comp
            n = n if n < budget else budget
            n = n if n < L - comp - 1 else L - comp - 1
            if n <= 0:  # vllm/v1/core/sched/scheduler.py:724 `if num_new_tokens == 0:`
                continue
            # vllm/v1/core/sched/scheduler.py:831-842 `num_scheduled_spec_tokens`
            d = max(0, min(r.spec, n + comp - r.ntok - ph)) if r.spec else 0
            r.spec = 0
            rows.append((r, n, comp, d))
            prefill_scheduled = prefill_scheduled or r.chunk
            budget -= n
            if apc:  # vllm/v1/core/kv_cache_manager.py:608-612 `num_tokens_to_cache`
                self._cache_blocks(r, comp + n if comp + n < r.ntok else r.ntok)
        ran = bool(rows)
        waiting = self.waiting
        # vllm/v1/core/sched/scheduler.py:891-894 `num_running >= self.max_num_active_reqs`
        while budget > 0 and waiting and len(self.running) < self.S:
            r = waiting[0]
            # vllm/v1/core/sched/scheduler.py:930 `if request.num_computed_tokens == 0:`
            comp = self._hit(r) if apc else 0
            n, d = r.ntok - comp, 0
            # vllm/v1/core/sched/scheduler.py:1088-1109 `padded_num_tokens = 1 + self.num_spec`
            if K and n == 1 and not prefill_scheduled and (ran or comp) and comp + K + 2 <= L:
                if 1 + K > budget:
                    break
                n, d = 1 + K, K
            n = min(n, budget)  # vllm/v1/core/sched/scheduler.py:1123 `request_token_budget)`
            waiting.popleft()
            self.running.append(r)
            rows.append((r, n, comp, d))
            r.comp = comp
            budget -= n
            if apc:
                self._cache_blocks(r, min(comp + n, r.ntok))
        # What S decided (verdict.py reuses this schedule for another S only where S never
        # refused a waiting request and the running count stayed within the other S).
        held = len(self.running)
        if held > self.peak:
            self.peak = held
        if held >= self.S and budget > 0 and waiting and self.seqs_bound_at is None:
            self.seqs_bound_at = step  # the loop above stopped on S alone
        sent = ()
        # vllm/distributed/kv_transfer/kv_connector/v1/hisparse/connector.py:102 `connector_meta`
        if apc:  # drains the plan
            for r, n, b, _ in () if self.plan_on_cache else rows:
                self._plan(r, min(b + n, r.ntok) >> 6)
            sent, self.prev_sent, self.to_send = self.prev_sent, self.to_send, []
            self.inflight += len(self.prev_sent)
        self.finished_ids = False
        if not rows:
            return None, sent, rows
        sc, kinds, before, spec, asyn = {}, {}, {}, {}, self.asyn
        drafts, resident = not self.can_skip_drafts, True
        for r, n, b, d in rows:
            i = r.i
            resident = resident and r.copies_ok
            # vllm/v1/core/sched/scheduler.py:502-544@0.33.0 `def _drafts_unused(`: unused
            # after a partial prefill, or when this step samples the last output token
            drafts = drafts or not (b + n < r.ntok or r.nout + 1 + (r.ph > 0) >= r.M)
            sc[i], before[i] = n, b
            if d:
                spec[i] = d
            kinds[i] = "prefill" if b < r.P else "verify" if d else "decode"
            # vllm/v1/core/sched/scheduler.py:1583 `def _update_after_schedule`
            r.comp, r.infl = r.comp + n, r.infl + n
            r.chunk = r.comp < r.ntok + r.ph
            if asyn and not r.chunk:  # vllm/v1/core/sched/async_scheduler.py:45 `placeholders +=`
                r.ph += 1 + d
                r.spec = K
        st = Step(step, sc, kinds, before, spec, [], resident, K, drafts=drafts)
        self.steps.append(st)
        return st, sent, rows

    def update(self, st, sent, rows, call):
        """vllm/v1/core/sched/scheduler.py:1967 `def update_from_output`, in engine step
        ``call``: the step whose ``step_fn`` hands this output back (``Step.returned_at``)."""
        if st is not None:
            st.returned_at = call
        L, asyn, apc, acc_fn = self.L, self.asyn, self.apc, self.acc
        stopped = False
        for r, n, b, d in rows:
            r.infl -= n
            if r.done or b + n - d < r.P:
                continue  # finished meanwhile, or a partial prefill (samples nothing)
            acc = 0
            if d:  # vllm/v1/core/sched/scheduler.py:2060-2070 `num_rejected = num_draft_tokens`
                acc = min(max(int(acc_fn(st.index, r.i, d)), 0), d)
                if r.comp > 0:
                    r.comp -= d - acc
                if r.ph > 0:
                    r.ph -= d - acc
            ph_before = r.ph
            # vllm/v1/core/sched/utils.py:114-119 `request.num_tokens >= max_model_len`
            kstop = L - r.ntok if L - r.ntok < r.M - r.nout else r.M - r.nout
            stop = kstop <= 1 + acc
            got = kstop if stop else 1 + acc
            r.ntok, r.nout = r.ntok + got, r.nout + got
            if self.cache_on_update:
                r.comp -= (1 + acc - got) if stop else 0
                if r.ph > 0:
                    r.ph -= 1 + acc
                if apc and (ph_before > 0 or self.K):
                    self._cache_blocks(r, r.comp - r.infl)
            elif asyn:  # vllm/v1/core/sched/async_scheduler.py:59-78 `_update_request_with_output`
                r.ph -= got
                if apc:
                    self._cache_blocks(r, r.comp - r.ph)
            if stop:
                r.done = stopped = True
                st.finished.append(r.i)
                if apc:  # vllm/v1/hisparse/coordinator.py:791-818 `def free(self`
                    r.alive, r.pub = False, r.pub and r.pending > 0
                    if not r.pub:  # else its publication holds them until it completes
                        self._release(r)
        if stopped:  # vllm/v1/core/sched/scheduler.py:2236 `remove_all(self.running`
            self.running = [r for r in self.running if not r.done]
            self.finished_ids = True
        if sent:
            self._complete(sent)


def schedule(config: SchedulerConfig, workload, accepted=None) -> list[Step]:
    """Every engine step with scheduled tokens for ``workload`` (a Workload)."""
    return _Sim(config, workload, accepted).run(workload)
