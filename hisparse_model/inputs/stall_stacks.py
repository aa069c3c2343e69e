"""Why a served replay's engine stalled, read from the stacks its server log holds.

The served-replay runner (``engine/serve_run.py``) asks the server's Python processes for
their stacks (SIGUSR2, ``engine/stack_dump``) when requests are in flight and none finishes;
each dump is Python's faulthandler listing, one ``Current thread ...`` block per process, its
innermost frame first.  :func:`stall_causes` classifies each dumped thread that was running
model code, by its innermost frames:

* ``compilation``: DeepGEMM compiling a kernel for a token count it had not seen
  (vllm/utils/deep_gemm.py:547 `fp8_gemm_nt` and its JIT, or vLLM's ``jit_monitor``):
  ``VLLM_DEEP_GEMM_WARMUP=skip`` moves that compilation into serving;
* ``hisparse``: inside vLLM's HiSparse code (``vllm/v1/hisparse/``);
* ``other``: anything else.

A replay whose stall was a compilation is not comparable with the model's clock
(:func:`compiled_while_serving`).  vLLM's ``jit_monitor`` warnings (Triton kernels compiled
on first use) are listed with their times by :func:`jit_warnings`; every recorded run logged
them during its warm-up, before the replay.
"""

from __future__ import annotations

import re

COMPILATION, HISPARSE, OTHER = "compilation", "hisparse", "other"
_BLOCK = re.compile(r"^(?:\(\w+ pid=\d+\) )?Current thread 0x[0-9a-f]+ \(most recent call "
                    r"first\):\n((?:(?:\(\w+ pid=\d+\) )?  File .*\n)+)", re.M)
_COMPILING = ("vllm/utils/deep_gemm.py", "deep_gemm/_C.py", "deep_jit", "jit_monitor")
# vLLM's own warning when a kernel is compiled while serving (vllm/utils/jit_monitor.py): its
# source stamp, then its text later on the line (found by str.find, then the stamp before it:
# linear in the line, where ``stamp.*text`` rescans the line from every stamp in it)
_JIT_STAMP = re.compile(r"jit_monitor\.py:\d+\]")
_JIT_TEXT = "JIT compilation during inference"


def stall_causes(log: str) -> list[dict]:
    """Each dumped running thread: its kind and innermost frame (file:line in function)."""
    out = []
    for block in _BLOCK.finditer(log):
        frames = [ln.split("File ", 1)[1].strip() for ln in block.group(1).splitlines()]
        top = frames[0] if frames else ""
        kind = (COMPILATION if any(m in f for f in frames[:3] for m in _COMPILING) else
                HISPARSE if any("vllm/v1/hisparse/" in f for f in frames[:6]) else OTHER)
        out.append({"kind": kind, "innermost": top})
    return out


def compiled_while_serving(log: str) -> bool:
    """Whether a stall's stacks were in a compiler (DeepGEMM's JIT): the replay's clock then
    measured compilation, not serving."""
    return any(c["kind"] == COMPILATION for c in stall_causes(log))


def stall_cause(log: str) -> str | None:
    """The stall's one word: compilation if any dumped thread compiled, else HiSparse if any
    was in its code, else other; None where no stack was dumped."""
    kinds = {c["kind"] for c in stall_causes(log)}
    return next((k for k in (COMPILATION, HISPARSE, OTHER) if k in kinds), None)


COMPILED_NOTE = ("its first minutes are not its steady state; VLLM_DEEP_GEMM_WARMUP=skip moves "
                 "DeepGEMM's compilation from start-up into serving")


def compiled_note(log: str) -> str | None:
    """What a reader of the log must know when the server compiled while serving, or None."""
    warned, stalled = len(jit_warnings(log)), compiled_while_serving(log)
    if not (warned or stalled):
        return None
    what = ", ".join(filter(None, (
        f"{warned} jit_monitor warning{'s' * (warned != 1)} of a kernel compiled during "
        "inference" if warned else "",
        "a stall whose stacks sit in DeepGEMM's compiler" if stalled else "")))
    return f"this server compiled kernels while serving ({what}): {COMPILED_NOTE}"


def jit_warnings(log: str) -> list[str]:
    """vLLM's warnings of a kernel compiled while serving (the log's lines, as written)."""
    return [ln.strip() for ln in log.splitlines() if _jit_warning(ln)]


def _jit_warning(line: str) -> bool:
    """Whether ``line`` is a jit_monitor warning: its stamp before its text."""
    at = line.find(_JIT_TEXT)
    return at >= 0 and _JIT_STAMP.search(line, 0, at) is not None
