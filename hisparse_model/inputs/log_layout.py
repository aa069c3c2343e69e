"""A start-up log's own word on the model's config: what vLLM laid out must be the model's.

The arguments line may not spell the config out (``hf_overrides`` given as a function), so
two lines vLLM prints are checked against the config the answer is for:

* ``HiSparse HMA: X GiB host source (N blocks)`` (vllm/v1/hisparse/layout.py:357-364
  `HiSparse HMA: %.1f GiB host source (%d blocks)`): the host blocks of the read pool with the
  config's layout (``kv_layout.py``);
* the hot cache's ``top_k=N`` (vllm/v1/hisparse/runtime.py:1320-1321 `Enabled experimental HiSparse HMA hot cache`):
  the config's ``index_topk``.

A log that disagrees is refused in one line: the model would answer for another engine.
"""

from __future__ import annotations

import re

from ..model.host_pool import host_blocks
from ..model.kv_layout import layout
from ..model.kv_pool import pool_line
from ..model.served_model import model_of
from .log_lines import HOST, WHOLE

ADVICE = ("the log's model config differs from the one the model would answer for (give "
          "check the command with its --hf-overrides, or the model's directory)")


def function_overrides(line, runner: bool) -> str:
    """How the answer reads a log whose ``hf_overrides`` is a function it does not spell out."""
    return (f"line {line.number}'s hf_overrides is a function the log does not spell out: "
            + ("the project's runner's, the fix PR's tiny config (model reproduction)"
               if runner else "the model's config without it, checked against the log's "
               "host blocks and top_k"))


def logged_gpu_pool(knobs, found: dict) -> str | None:
    """The GPU KV pool the log's last layout line reports, in words (None: no such line; an
    earlier one may be the memory profile's minimal pool, e.g. 143 blocks for S 143)."""
    host = found[HOST][-1] if found[HOST] else None
    m = WHOLE[HOST].match(host.text) if host is not None else None
    if m is None or m.group("gpu") is None:
        return None
    plan_b = knobs.max_num_batched_tokens or 0
    return (f"GPU KV pool (line {host.number}): "
            + pool_line(knobs, plan_b, int(m.group("gpu"))))


def logged_layout_agrees(knobs, found: dict, hot) -> None:
    """ValueError (naming ``model`` and the line) where the log's layout is not the model's."""
    host = found[HOST][0] if found[HOST] else None
    m = WHOLE[HOST].match(host.text) if host is not None else None
    if m is not None:
        logged, laid = int(m.group("value")), host_blocks(knobs.host_pool_gib, layout(knobs))
        if logged != laid:
            raise ValueError(f"model: line {host.number}: vLLM laid out {logged} host blocks, "
                             f"the model {laid} for {layout(knobs).describe()}: {ADVICE}")
    top_k = re.search(r"\btop_k=(\d+)", hot[0].text) if hot else None
    served = model_of(knobs)
    if top_k is not None and int(top_k.group(1)) != served.index_topk:
        raise ValueError(f"model: line {hot[0].number}: the hot cache's top_k={top_k.group(1)} "
                         f"is not index_topk {served.index_topk} of {served.label}: {ADVICE}")
