"""One engine step's record: which requests it scheduled, how many tokens each computes,
and the order Model Runner V2 puts them in (``scheduler.py`` makes these, step by step)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Step:
    """One engine step that scheduled tokens (a ``SchedulerOutput`` with total > 0)."""

    index: int  # engine step number
    scheduled: dict[int, int]  # request -> tokens computed incl. drafts, in schedule order
    kinds: dict[int, str]  # "prefill" (prompt chunk) / "decode" / "verify" (with drafts)
    num_computed_before: dict[int, int]  # the scheduler's (optimistic) num_computed_tokens
    spec: dict[int, int] = field(default_factory=dict)  # draft tokens scheduled
    finished: list[int] = field(default_factory=list)  # finish when this output is processed
    resident: bool = True  # HiSparse all_context_pages_resident
    num_speculative_tokens: int = 0
    returned_at: int | None = None  # engine step (call) whose step_fn hands this output back
    drafts: bool = True  # the runner drafts after this step (0.33.0 may skip: skip_drafts)

    num_tokens = property(lambda self: sum(self.scheduled.values()))

    def runner_order(self) -> list[int]:
        """Model Runner V2's batch order (vllm/v1/worker/gpu/model_runner.py:2398-2410
        `def sort_batch_req_ids`): with drafts first, then query length == 1 + K,
        then by length, stable -- so every query <= 1 + K precedes every longer one."""
        q, sp, sc = 1 + self.num_speculative_tokens, self.spec, self.scheduled
        return sorted(sc, key=lambda r: (not sp.get(r), sc[r] != q, sc[r]))

    def runner_query_lens(self) -> list[int]:  # what the attention metadata sees, in order
        if not self.spec and not self.num_speculative_tokens:  # q = 1: by length alone
            return sorted(self.scheduled.values())
        return [self.scheduled[r] for r in self.runner_order()]
