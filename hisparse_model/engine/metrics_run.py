"""Record what a running vLLM server reports of its step time: ``/metrics`` and its log.

``python -m hisparse_model.engine.metrics_run --trace FILE --out DIR [--speed X]`` builds the
engine ``vllm serve`` builds (``AsyncLLM`` with the OpenAI server's usage context and its
stat loggers on, as :mod:`.serve_engine`), replays a trace's requests at their own arrival
times (divided by ``--speed``) as concurrent ``generate`` calls, and while they run:

* every ``--log-every`` seconds calls ``AsyncLLM.do_log_stats()``, which is what
  ``vllm serve``'s periodic task calls (vllm/entrypoints/openai/api_server.py: the
  ``_force_log`` loop), so the console log gets vLLM's own ``Avg prompt throughput ... Avg
  generation throughput ... Running: N reqs`` lines;
* at ``--snapshots`` seconds after the first arrival writes ``prometheus_client``'s
  exposition of the default registry (``generate_latest()``), the text ``vllm serve``'s
  ``/metrics`` route serves from that registry with one API server, to
  ``metrics-<seconds>.txt``, with the wall-clock time of each in ``run.json``.

Outputs are capped at ``--max-tokens`` tokens per request (said in ``run.json``) so a run
fits a device call.  No vLLM import at module level (package rule); run it where vLLM is.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time

from ..model.knobs import Knobs
from . import llm_args


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m hisparse_model.engine.metrics_run")
    p.add_argument("--trace", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--vllm-version", default="0.34.0")
    p.add_argument("--log-every", type=float, default=5.0)
    p.add_argument("--snapshots", default="20,40,60")
    p.add_argument("--warmup", action="store_true",
                   help="replay the trace once first (outputs of 16 tokens), untimed, so the "
                        "measured replay meets compiled kernels")
    return p.parse_args(argv)


async def replay(engine, requests, speed: float, max_tokens: int, snapshots, log_every,
                 out: str, stamps: dict) -> dict:
    from prometheus_client import generate_latest
    from vllm import SamplingParams

    start = time.monotonic()
    served = {"finished": 0, "errors": []}

    async def one(i, req):
        await asyncio.sleep(max(0.0, req.arrival_s / speed - (time.monotonic() - start)))
        params = SamplingParams(max_tokens=min(req.output_len, max_tokens), ignore_eos=True)
        try:
            async for _ in engine.generate(
                    {"prompt_token_ids": llm_args.prompt_token_ids(req.prompt_len)}, params,
                    request_id=f"trace-{i}-{start}"):
                pass
            served["finished"] += 1
        except Exception as exc:  # noqa: BLE001  recorded, the run goes on
            served["errors"].append(f"trace-{i}: {type(exc).__name__}: {exc}")

    async def logger_task():
        while True:
            await asyncio.sleep(log_every)
            await engine.do_log_stats()

    async def snapshot_task():
        for at in snapshots:
            await asyncio.sleep(max(0.0, at - (time.monotonic() - start)))
            text = generate_latest().decode()
            stamps[str(at)] = time.time()
            with open(os.path.join(out, f"metrics-{at:g}.txt"), "w") as f:
                f.write(text)

    side = [asyncio.ensure_future(logger_task()), asyncio.ensure_future(snapshot_task())]
    await asyncio.gather(*(one(i, r) for i, r in enumerate(requests)))
    await side[1]
    side[0].cancel()
    await engine.do_log_stats()
    served["seconds"] = time.monotonic() - start
    return served


def main(argv=None) -> int:
    args = parse(argv)
    import torch
    import vllm
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    from ..inputs.traces import read_trace

    os.makedirs(args.out, exist_ok=True)
    trace = read_trace(args.trace)
    snapshots = [float(s) for s in args.snapshots.split(",")]
    knobs = Knobs(vllm_version=args.vllm_version, max_num_seqs=args.max_num_seqs,
                  max_model_len=args.max_model_len)
    requests = [r for r in trace.requests if r.prompt_len < knobs.max_model_len]
    model_dir = llm_args.write_model_dir(tempfile.mkdtemp(prefix="dsv32-tiny-"))
    kw = llm_args.llm_kwargs(knobs, model_dir)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # as vllm serve runs it
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**llm_args.engine_kwargs(kw)),
                                       usage_context=UsageContext.OPENAI_API_SERVER)
    stamps: dict = {}
    try:
        if args.warmup:  # kernels JIT-compiled on first use of a shape: not in the measure
            loop.run_until_complete(replay(engine, requests, args.speed * 4, 16, [], 3600,
                                           args.out, {}))
            print("hisparse metrics_run: warmup done; the measured replay starts", flush=True)
        served = loop.run_until_complete(replay(
            engine, requests, args.speed, args.max_tokens, snapshots, args.log_every,
            args.out, stamps))
    finally:
        engine.shutdown()
    run = {"provenance": {
        "vllm": vllm.__version__, "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": " ".join([sys.executable, "-m", "hisparse_model.engine.metrics_run",
                             *(argv if argv is not None else sys.argv[1:])]),
        "engine_class": "AsyncLLM", "usage_context": "OPENAI_API_SERVER",
        "run_time_patches": "none", "knobs": knobs.as_dict(), "engine_kwargs": kw},
        "trace": os.path.basename(args.trace), "speed": args.speed,
        "warmup": "the trace replayed once first, 4x as fast, 16 output tokens each"
        if args.warmup else None,
        "max_tokens_cap": args.max_tokens, "requests": len(requests),
        "snapshots_wall_clock": stamps, "served": served}
    with open(os.path.join(args.out, "run.json"), "w") as f:
        json.dump(run, f, indent=1)
    print(json.dumps({k: run[k] for k in ("requests", "served", "snapshots_wall_clock")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
