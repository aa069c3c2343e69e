"""The clock's calibration sweep on the GPU: the served replays' engine (tiny DeepSeek-V3.2,
HiSparse, dummy weights, S 143, max_model_len 8,192, 8,192-token batches, prefix caching on,
async scheduling) given batches of known shape, each batch's wall time and composition measured
inside the engine (``engine/step_timer.py``), written to one JSON file with its provenance::

    python -m hisparse_model.engine.calibrate --vllm-version 0.34.0 --out cal.json

Each phase of :data:`SWEEP` is one ``LLM.generate`` call of ``n`` distinct prompts of ``prompt``
tokens asking ``max_tokens`` tokens each (``ignore_eos``), run twice with fresh prompts (no
prefix-cache hit): the first pass compiles what the GPU has not seen (DeepGEMM's kernels are
compiled on first use here, ``VLLM_DEEP_GEMM_WARMUP=skip``, as the live runner starts), the
second is the measurement (``pass`` 2 in each row). Each row also carries the batch's launch
(``launch_ms``) and the CUDA-graph modes the runner dispatched for it (``modes``): the engine core
runs in this process, so all three of the step timer's wrappers are installed here
(``step_timer.install_in_process``). The file is rewritten after every phase,
so a run cut short keeps what it measured. ``answers/clock_fit.py`` fits a step's cost to it.

What a period holds here that it does not under ``vllm serve``: in process, ``LLM.generate``
takes each step's outputs (vllm/v1/engine/core_client.py:425@0.34.0
`outputs, model_executed = self.engine_core.step_fn()`) and processes them in the same thread
before the next step (vllm/v1/engine/llm_engine.py:340@0.34.0
`processed_outputs = self.output_processor.process_outputs(`), where the server does that in its
API-server process beside the engine. Measured: the cost fitted here is slower than the served
replays of the same vLLM (``tests/test_clock.py``). The next sweep runs the engine core in its
own process with the timer installed there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

# (phase, requests, prompt tokens, max_tokens): decode batches of 16-128 requests over short
# and long contexts, prompt chunks of 8,192 tokens (one long prompt or eight 1,000-token ones),
# and prompts arriving while others decode
SWEEP = (
    ("decode16", 16, 64, 96),
    ("decode64", 64, 64, 96),
    ("decode128", 128, 64, 96),
    ("decode32-ctx7000", 32, 7000, 48),
    ("prefill-long", 8, 8000, 2),
    ("prefill-1000", 64, 1000, 2),
    ("mixed", 48, 3000, 32),
)


def _args(argv):
    p = argparse.ArgumentParser(prog="python -m hisparse_model.engine.calibrate")
    p.add_argument("--vllm-version", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--max-num-seqs", type=int, default=143)
    p.add_argument("--host-pool-gib", type=float, default=6)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_DEEP_GEMM_WARMUP", "skip")
    from ..model.knobs import Knobs
    from ..schedule.workload import DistinctPrompt
    from . import llm_args
    from .serve_process import host
    from .step_timer import PATCHES, StepTimer, install_in_process

    import torch
    import vllm
    from vllm import SamplingParams

    timer = StepTimer()
    install_in_process(timer)
    knobs = Knobs(vllm_version=args.vllm_version, max_num_seqs=args.max_num_seqs,
                  max_model_len=8192, max_num_batched_tokens=8192,
                  host_pool_gib=args.host_pool_gib)
    kw = llm_args.llm_kwargs(knobs, llm_args.write_model_dir(tempfile.mkdtemp()))
    started = time.time()
    llm = llm_args.build_llm(kw)
    config = llm.llm_engine.vllm_config.scheduler_config
    out = {"provenance": {
        "vllm": vllm.__version__, "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0), "host": host(), "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
        "command": " ".join([sys.executable, "-m", "hisparse_model.engine.calibrate",
                             *(argv if argv is not None else sys.argv[1:])]),
        "llm_kwargs": kw, "async_scheduling": bool(config.async_scheduling),
        "env": {k: os.environ[k] for k in ("VLLM_ENABLE_V1_MULTIPROCESSING",
                                           "VLLM_DEEP_GEMM_WARMUP")},
        "run_time_patches": PATCHES + "; nothing else",
        "engine_start_s": round(time.time() - started, 1)},
        "sweep": [list(s) for s in SWEEP], "rows": timer.rows}
    next_id = 0
    for phase, n, prompt, max_tokens in SWEEP:
        for rep in (1, 2):
            timer.phase = f"{phase}:{rep}"
            prompts = [{"prompt_token_ids": list(DistinctPrompt(next_id + i, prompt))}
                       for i in range(n)]
            next_id += n
            t0 = time.time()
            llm.generate(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True,
                                                 temperature=0.0), use_tqdm=False)
            print(f"{phase} pass {rep}: {time.time() - t0:.2f} s, {len(timer.rows)} batches "
                  "timed so far", flush=True)
        _write(args.out, out)
    return 0


def _write(path: str, out: dict) -> None:
    tmp = path + ".part"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
