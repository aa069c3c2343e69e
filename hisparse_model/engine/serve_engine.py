"""A serve-shaped engine: vLLM's ``AsyncLLM``, what ``vllm serve`` runs, for the live runner.

``hisparse live --engine async`` (a spec's ``"engine": "async"``) builds the engine as the
OpenAI server does -- ``AsyncLLM.from_engine_args(AsyncEngineArgs(...),
usage_context=OPENAI_API_SERVER)`` (vllm/entrypoints/openai/api_server.py) -- instead of the
offline ``LLM`` class, and serves the prompts one at a time through ``AsyncLLM.generate``
on one event loop.  AsyncLLM always runs the engine core (scheduler, executor, worker) in a
process of its own (vllm/v1/engine/async_llm.py:194@0.34.0 `EngineCoreClient.make_async_mp_client(`),
so the routing log is taken there the way tensor-parallel workers take theirs
(:mod:`.tp_worker`): ``worker_extension_cls`` imports the recorder in that process, which
streams its rows to a folder the child reads back.  Serving rows are labelled with the
child's current prompt through a file the engine core's scheduler reads on each step
(:data:`.tp_worker.PHASE_FILE_ENV`, :func:`.tp_worker.stamp_from_file`).

No vLLM import happens at module level (package rule).
"""

from __future__ import annotations

import os

from .parallel import WORKER_EXTENSION
from .llm_args import MAX_TOKENS, prompt_token_ids
from .llm_args import engine_kwargs as engine_kwargs_of

ENGINE_CLASS = "AsyncLLM"


def prepare(folder: str, routing: str):
    """In the engine child, before the build: the worker-side recorder's environment (as
    for TP), the phase file, and the log that reads the engine core's stream back."""
    from . import tp_worker  # imported here: importing it in a DP rank would install it

    log = tp_worker.prepare_child(folder, routing)
    path = os.path.join(folder, "phase")
    os.environ[tp_worker.PHASE_FILE_ENV] = path
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # as vllm serve runs it
    set_phase(path, "startup")
    return log, path


def set_phase(path: str, phase: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(phase + "\n")
    os.replace(tmp, path)


def engine_kwargs(kw: dict) -> dict:
    """:func:`.llm_args.llm_kwargs` plus the recorder's worker extension."""
    return {**kw, "worker_extension_cls": WORKER_EXTENSION}


def build(kw: dict):
    """``(engine, loop)``: the AsyncLLM of these engine arguments, and its event loop."""
    import asyncio

    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_kwargs_of(kw)),
                                       usage_context=UsageContext.OPENAI_API_SERVER)
    return engine, loop


def generate(engine, loop, n: int, request_id: str) -> None:
    """Serve one prompt of ``n`` tokens to its end (the fix PR's loop: MAX_TOKENS tokens,
    ignore_eos), raising what the engine raised."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)

    async def run() -> None:
        async for _ in engine.generate({"prompt_token_ids": prompt_token_ids(n)}, params,
                                       request_id=request_id):
            pass

    loop.run_until_complete(run())


def one_rank(rows: list[dict]) -> list[dict]:
    """The engine core's rows without the rank labels the TP reader adds (one rank here)."""
    return [{k: v for k, v in row.items() if k not in ("tp_rank", "dp_rank")} for row in rows]
