"""The start-up driver's recorder: attention metadata in, one row per forward out.

``_Recorder`` stands in for ``set_forward_context`` and the drafter's
``build_attn_metadata``; each forward it sees runs the split, hand-off and
routing of ``startup_attention._Attention`` and becomes one row;
``_group_rows`` folds the rows of one engine step or captured graph into
batches.  A routing error raises ``_EngineError``: vLLM's start-up dies there.
"""

from __future__ import annotations

import contextlib


class _Meta:
    """What the stand-in ``prepare_attn`` / ``build_attn_metadata`` hand to a forward."""

    __slots__ = ("query_lens", "num_tokens")

    def __init__(self, query_lens, num_tokens):
        tolist = getattr(query_lens, "tolist", None)
        self.query_lens = tuple(tolist() if tolist else query_lens)
        self.num_tokens = int(num_tokens)


class _Recorder:
    def __init__(self):
        self.rows: list[dict] = []
        self.phase = "?"
        self.attn = None  # _Attention of the current knob set
        self._meta = None  # metadata of the forward context being entered
        self.cg_mode = None  # the graph mode of the capture pass running now
        self.unit = 0  # one engine step or one captured graph: forwards grouped within it

    # set_forward_context stand-in (the target's capture forwards)
    @contextlib.contextmanager
    def forward_context(self, attn_metadata, vllm_config, **kw):
        prev = self._meta
        self._meta = attn_metadata
        try:
            yield
        finally:
            self._meta = prev

    # build_attn_metadata stand-in (the drafter's uniform decode metadata)
    def build_attn_metadata(self, *, num_reqs, num_tokens, query_start_loc_cpu, **kw):
        qsl = [int(x) for x in query_start_loc_cpu[: num_reqs + 1]]
        return _Meta([b - a for a, b in zip(qsl, qsl[1:])], num_tokens)

    def forward(self, runner: str, meta, cg_mode) -> None:
        """One forward of ``runner`` over ``meta``: split, hand off, route (raises like vLLM)."""
        name = getattr(cg_mode, "name", str(cg_mode))
        row = self.attn.run(meta)
        self.rows.append({"phase": self.phase, "runner": runner, "cudagraph_mode": name,
                          "_unit": self.unit, **row})
        if row["error"] is not None:
            raise _EngineError(row["error"])


class _EngineError(Exception):
    """The routing raised: vLLM's start-up dies here."""


def _group_rows(rows: list[dict]) -> list[dict]:
    """Consecutive forwards of one step: one batch each.

    * the same (phase, runner, shape, mode) in a row -> one batch, ``forwards`` counted;
    * a target forward immediately followed by the drafter's prefill over the very
      same batch (warmup steps) -> one batch with runner ``both``.
    """
    out: list[dict] = []
    for row in rows:
        prev = out[-1] if out else None
        same = prev is not None and all(
            prev[k] == row[k] for k in ("_unit", "phase", "query_lens", "cudagraph_mode",
                                        "routed", "route", "error"))
        if same and prev["runner"] == row["runner"] and not prev.get("_closed"):
            prev["forwards"] += 1
            continue
        if (same and prev["runner"] == "target" and row["runner"] == "drafter"
                and row["phase"] in ("jit_warmup", "kv_cache_sizing_warmup", "sampler_warmup",
                                     "serving")):
            prev["runner"] = "both"
            prev["_closed"] = True
            continue
        out.append({"forwards": 1, **row})
    for b in out:
        b.pop("_closed", None)
        b.pop("_unit", None)
        if b["runner"] == "drafter_decode":
            b["runner"] = "drafter"
            b["label"] = "draft decode"
    return out
