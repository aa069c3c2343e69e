"""The live workload runner's wiring, offline: a fake engine stands in for vLLM.

``engine/traffic.serve`` adds each request right before the engine step numbered
its ``arrival_step``, records every step's scheduled tokens, labels the routing
rows of a step's forward ``step:<k>``, reads accepted MTP drafts from the
runner's output, and records the first error with its step and, under a batch
queue, which requests' outputs the caller lost.
"""

from collections import deque
from concurrent.futures import Future
from types import SimpleNamespace

from hisparse_model.engine import traffic
from hisparse_model.engine.instrument import RouteLog


class FakeScheduler:
    """Schedules every waiting request's whole prompt, then one token per step."""

    def __init__(self):
        self.waiting, self.running = [], {}

    def schedule(self):
        tokens = {r: 1 for r in self.running}
        for req_id, n, m in self.waiting:
            tokens[req_id] = n
            self.running[req_id] = m
        self.waiting = []
        spec = {r: [0] for r in tokens if r.endswith("-mtp")}
        return SimpleNamespace(num_scheduled_tokens=tokens, finished_req_ids=set(),
                               scheduled_spec_decode_tokens=spec)

    def update_from_output(self, so, mro):
        done = []
        for r in so.num_scheduled_tokens:
            self.running[r] -= 1
            if self.running[r] == 0:
                done.append(r)
                del self.running[r]
        return done


class FakeRunner:
    def __init__(self, log, crash_at=None):
        self.log, self.crash_at = log, crash_at

    def execute_model(self, so):
        n = sum(so.num_scheduled_tokens.values())
        self.log.add({"num_tokens": n, "error": "ValueError: boom" if n == self.crash_at else None})
        if n == self.crash_at:
            raise ValueError("boom")
        return SimpleNamespace(req_ids=list(so.num_scheduled_tokens),
                               sampled_token_ids=[[1, 2] for _ in so.num_scheduled_tokens])


class FakeEngine:
    def __init__(self, sched, runner):
        self.sched, self.runner = sched, runner

    def add_request(self, req_id, prompt, params):
        self.sched.waiting.append((req_id, len(prompt["prompt_token_ids"]), params))

    def has_unfinished_requests(self):
        return bool(self.sched.waiting or self.sched.running)

    def step(self):
        so = self.sched.schedule()
        if not so.num_scheduled_tokens:
            return []
        mro = self.runner.execute_model(so)
        done = self.sched.update_from_output(so, mro)
        return [SimpleNamespace(request_id=r, finished=True) for r in done]


def _serve(workload, crash_at=None):
    # fresh classes per test: serve() wraps their methods in place
    sched_cls = type("S", (FakeScheduler,), {})
    runner_cls = type("R", (FakeRunner,), {})
    log = RouteLog()
    llm = SimpleNamespace(llm_engine=FakeEngine(sched_cls(), runner_cls(log, crash_at)),
                          sampling_params=lambda max_tokens: max_tokens)
    return log, traffic.serve(llm, log, workload, classes=(sched_cls, runner_cls))


def _req(n, arrival, max_tokens=2):
    return {"prompt_token_ids": list(range(100, 100 + n)), "max_tokens": max_tokens,
            "arrival_step": arrival}


def test_arrivals_and_step_labels():
    """Requests join right before their arrival step; rows carry that step's label."""
    # step 0: r0 prefills 3; step 1: r0 decodes 1 (done, 2 outputs); step 2: idle;
    # step 3: r1 arrives and prefills 2; step 4: r1 decodes 1 (done)
    log, rec = _serve([_req(3, 0), _req(2, 3)])
    assert [(s["step"], s["scheduled"]) for s in rec["steps"]] == [
        (0, {"0": 3}), (1, {"0": 1}), (3, {"1": 2}), (4, {"1": 1})]
    assert [r["phase"] for r in log.rows] == ["step:0", "step:1", "step:3", "step:4"]
    assert rec["crash"] is None and rec["finished"] == [0, 1]


def test_concurrent_arrivals_share_a_step():
    """Two requests arriving together are scheduled in one step (3 + 2 = 5 tokens)."""
    _, rec = _serve([_req(3, 0), _req(2, 0)])
    assert rec["steps"][0] == {"step": 0, "scheduled": {"0": 3, "1": 2}, "num_tokens": 5,
                               "finished": []}


def test_crash_is_recorded_with_its_step():
    """The first error stops the run and is recorded with the step that raised it."""
    _, rec = _serve([_req(3, 0), _req(2, 0)], crash_at=5)
    assert rec["crash"] == {"step": 0, "error": "ValueError: boom"}
    assert rec["finished"] == []


class FakeAsyncEngine(FakeEngine):
    """``step_with_batch_queue`` in miniature: schedule and run step N + 1 (raising
    in-line), then hand back step N's output; each output carries the tokens so far."""

    def __init__(self, sched, runner):
        super().__init__(sched, runner)
        self.engine_core = SimpleNamespace(engine_core=SimpleNamespace(batch_queue=deque()))
        self.tokens: dict = {}

    def step(self):
        queue = self.engine_core.engine_core.batch_queue
        so = self.sched.schedule()
        if so.num_scheduled_tokens:
            future = Future()
            future.set_result(self.runner.execute_model(so))  # raises before the pop
            queue.appendleft((future, so, None))
            if len(queue) < 2:
                return []
        if not queue:
            return []
        future, so, _ = queue.pop()
        mro = future.result()
        done = self.sched.update_from_output(so, mro)
        out = []
        for r, ids in zip(mro.req_ids, mro.sampled_token_ids):
            self.tokens[r] = self.tokens.get(r, 0) + len(ids)
            out.append(SimpleNamespace(request_id=r, finished=r in done,
                                       outputs=[SimpleNamespace(token_ids=[0] * self.tokens[r])]))
        return out


class OneTokenRunner(FakeRunner):
    def execute_model(self, so):
        out = super().execute_model(so)
        out.sampled_token_ids = [[7] for _ in out.req_ids]  # one token per request
        return out


def test_a_crash_loses_the_previous_steps_output():
    """A request whose last token ran in the step before the crash is lost, not finished."""
    sched_cls = type("S", (FakeScheduler,), {})
    runner_cls = type("R", (OneTokenRunner,), {})
    log = RouteLog()
    llm = SimpleNamespace(llm_engine=FakeAsyncEngine(sched_cls(), runner_cls(log, 6)),
                          sampling_params=lambda max_tokens: max_tokens)
    # step 0: r0 prefills 3 (token 1, handed back in step 1); step 1: r0 decodes 1 (token
    # 2 = max_tokens, handed back in step 2); step 2: r1 arrives, r0 1 + r1 5 = 6 tokens:
    # the forward raises before step 1's output is popped
    rec = traffic.serve(llm, log, [_req(3, 0), _req(5, 2)], classes=(sched_cls, runner_cls))
    assert rec["crash"] == {"step": 2, "error": "ValueError: boom"}
    assert rec["finished"] == []
    assert rec["lost"] == [
        {"request": 0, "tokens_returned": 1, "why": "computed but never returned",
         "tokens_unreturned": 1},  # 1 returned + 1 in the unpopped output = max_tokens 2
        {"request": 1, "tokens_returned": 0, "why": "still running", "tokens_unreturned": 0},
    ]
