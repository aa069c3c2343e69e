"""The served runner's comparability: a replay's window that saw a kernel compiled (DeepGEMM's
cache grew, or vLLM's jit_monitor warned) is not comparable with the model's clock.

Invariant: ``comparable`` is true exactly when the DeepGEMM cache folder holds as many files
after the replay as when the server was ready and no jit_monitor warning lies between the
replay's two log offsets.
"""

import pytest

from hisparse_model.engine.jit_window import (cache_files, deep_gemm_cache_dir, log_between,
                                              window_verdict)

WARN = ("(EngineCore pid=7) WARNING 12-06 09:03:01 [jit_monitor.py:88] JIT compilation during "
        "inference: fused_moe_kernel\n")


@pytest.mark.parametrize("ready, after, log, grew, warned, comparable", [
    (741, 741, "", 0, 0, True),           # nothing added, nothing warned
    (741, 742, "", 1, 0, False),          # one kernel file written while serving
    (741, 741, WARN, 0, 1, False),        # a Triton kernel compiled while serving
    (None, None, "", None, 0, True),      # no cache counted (no DeepGEMM): the log decides
    (None, None, WARN * 2, None, 2, False),
])
def test_window_verdict(ready, after, log, grew, warned, comparable):
    """Growth is after - ready; warnings are the window's lines."""
    got = window_verdict(ready, after, log)
    assert got == {"deep_gemm_files_grew": grew, "jit_warnings_in_window": warned,
                   "comparable": comparable}


@pytest.mark.parametrize("env, want", [
    ({"DG_JIT_CACHE_DIR": "/c/dg"}, "/c/dg"),                       # DeepGEMM's own variable
    ({"VLLM_CACHE_ROOT": "/v"}, "/v/deep_gemm"),                     # vLLM's root + deep_gemm
    ({"XDG_CACHE_HOME": "/x"}, "/x/vllm/deep_gemm"),                 # vLLM's default root
    ({"DG_JIT_CACHE_DIR": "", "VLLM_CACHE_ROOT": "/v"}, "/v/deep_gemm"),  # empty is unset
])
def test_where_deepgemm_keeps_its_kernels(env, want):
    """vLLM sets DG_JIT_CACHE_DIR to <VLLM_CACHE_ROOT>/deep_gemm where it is unset."""
    assert deep_gemm_cache_dir(env) == want


def test_cache_files_and_log_window(tmp_path):
    """Files are counted under every folder; a missing folder is None; the window is the
    bytes between the offsets."""
    assert cache_files(str(tmp_path / "none")) is None and cache_files(None) is None
    (tmp_path / "k1").mkdir()
    (tmp_path / "k1" / "kernel.cubin").write_bytes(b"x")
    (tmp_path / "k1" / "kernel.cu").write_bytes(b"y")
    (tmp_path / "top").write_bytes(b"z")
    assert cache_files(str(tmp_path)) == 3
    log = tmp_path / "server.log"
    log.write_text("before\n" + WARN + "after\n")
    start = len("before\n")
    assert log_between(str(log), start, start + len(WARN)) == WARN
    assert log_between(str(tmp_path / "gone.log"), 0, 10) == ""
