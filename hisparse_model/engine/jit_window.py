"""Whether a served replay's window saw a kernel compiled: what makes its times comparable.

A replay measures serving only if nothing was compiled while it ran.  Two compilers can run
inside a served engine:

* DeepGEMM's JIT, on the first GEMM of a new kernel configuration.  vLLM's start-up warm-up
  (``VLLM_DEEP_GEMM_WARMUP``, default ``relax``) compiles the configurations a token count up
  to ``max_num_batched_tokens`` can pick; ``skip`` leaves them to serving.  Compiled kernels
  land in ``DG_JIT_CACHE_DIR`` (vLLM sets it to ``<VLLM_CACHE_ROOT>/deep_gemm`` when unset,
  vllm/utils/deep_gemm.py:278 `DEEP_GEMM_JIT_CACHE_ENV_NAME`), one folder a kernel: the runner names the folder, counts
  its files when the server is ready and again after the replay, and any growth is a
  compilation inside the window.  DeepGEMM logs nothing when it compiles.
* Triton kernels, which vLLM's ``jit_monitor`` reports with a warning line.  The runner notes
  the server log's length when the replay starts and ends and reads the warnings in between.

Standard library only; the counts are of files, read on the machine that served.
"""

from __future__ import annotations

import os

from ..inputs.stall_stacks import jit_warnings

CACHE_ENV = "DG_JIT_CACHE_DIR"  # DeepGEMM's own variable for its kernel cache


def deep_gemm_cache_dir(env) -> str:
    """Where vLLM's DeepGEMM keeps its kernels for a server started with ``env``."""
    if env.get(CACHE_ENV):
        return env[CACHE_ENV]
    root = env.get("VLLM_CACHE_ROOT") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "vllm")
    return os.path.join(root, "deep_gemm")


def cache_files(folder: str | None) -> int | None:
    """Files under DeepGEMM's cache folder (None: no folder named, or none there yet)."""
    if not folder or not os.path.isdir(folder):
        return None
    return sum(len(files) for _, _, files in os.walk(folder))


def log_size(path: str) -> int:
    """The server log's length in bytes now (0 if it is not there)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def log_between(path: str, start: int, end: int) -> str:
    """The server log's text from byte ``start`` to byte ``end``."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(max(0, end - start)).decode(errors="replace")
    except OSError:
        return ""


def window_verdict(files_ready: int | None, files_after: int | None,
                   window_log: str) -> dict:
    """What the replay's window saw: ``deep_gemm_kernels_compiled`` (cache growth; None where
    no cache was counted), ``jit_warnings`` (vLLM's lines in the window) and ``comparable``
    (neither compiled)."""
    grew = (None if files_ready is None or files_after is None
            else files_after - files_ready)
    warnings = jit_warnings(window_log)
    return {"deep_gemm_files_grew": grew, "jit_warnings_in_window": len(warnings),
            "comparable": not grew and not warnings}
