"""The served replay's command line (``python -m hisparse_model.engine.serve_run``)."""

from __future__ import annotations

import argparse


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m hisparse_model.engine.serve_run")
    p.add_argument("--trace", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--vllm-version", default="0.31.0")
    p.add_argument("--max-num-seqs", type=int, required=True)
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--metrics-every", type=float, default=5.0)
    p.add_argument("--seconds", type=float, default=240.0, help="longest replay")
    p.add_argument("--start-timeout", type=float, default=420.0)
    p.add_argument("--linger", type=float, default=3.0)
    p.add_argument("--stall", type=float, default=8.0,
                   help="seconds with requests in flight and none finished: the stacks of "
                        "the server's processes are dumped into server.log, again every "
                        "--stall seconds while it lasts (at most --stall-dumps times); the "
                        "replay goes on")
    p.add_argument("--stall-dumps", type=int, default=3)
    p.add_argument("--host-pool-gib", type=float, default=None,
                   help="HiSparse host pool; default: enough for the whole replay at once")
    p.add_argument("--deep-gemm-warmup", default=None, choices=("skip", "full", "relax"),
                   help="VLLM_DEEP_GEMM_WARMUP for the server (default: vLLM's own, which "
                        "compiles DeepGEMM's kernels at start-up; skip moves that compilation "
                        "into serving)")
    p.add_argument("--deep-gemm-cache", default=None,
                   help="DeepGEMM's kernel cache folder for the server (DG_JIT_CACHE_DIR; "
                        "default: where vLLM puts it, <VLLM_CACHE_ROOT>/deep_gemm); its files "
                        "are counted when the server is ready and after the replay")
    p.add_argument("--no-iteration-log", action="store_true",
                   help="leave out vLLM's --enable-logging-iteration-details (each engine "
                        "step's composition and wall time in server.log, the clock's "
                        "calibration)")
    p.add_argument("--time-steps", action="store_true",
                   help="time each engine batch inside the server's engine core "
                        "(engine/step_timer.py through the server's sitecustomize): "
                        "steps/steps-<pid>.jsonl, each batch's composition and period")
    p.add_argument("--warm-passes", type=int, default=2,
                   help="passes of the warm-up waves before the replay; /metrics is read "
                        "before the last pass (metrics-warm.txt), so the last pass alone "
                        "is a measured interval")
    return p.parse_args(argv)
