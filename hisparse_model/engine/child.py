"""One engine configuration, run in its own process: ``python -m hisparse_model.engine.child SPEC OUT``.

SPEC is a JSON file ``{"knobs": {...}, "prompt_lens": [...], "command": "..."}``.
The child builds the engine, serves the prompts one at a time (the fix PR's
loop, ``max_tokens=8``, ``ignore_eos=True``) and writes the recording to OUT.
A prompt that fails leaves the engine unusable, so later prompts are marked
``"ran": false``.  The parent (:mod:`.live`) owns the timeout and the console
log; :class:`GpuGate` is this side of its GPU-memory lock (a no-op when the
child runs on its own).
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import sys
import tempfile
import time

from ..model.knobs import Knobs
from ..recorded.recordings import SCHEMA_VERSION, write_json_atomic
from . import instrument, llm_args, parallel, rank_log, serve_engine
from .llm_args import LL_BF16_ENV
from .processes import CONTROL_ENV, LOCK_ENV


# vLLM's DeepGEMM warmup only JIT-compiles GEMM kernels; skipping it cannot change
# the routing (see processes.ENGINE_ENV).  Set here too for a child started by hand.
DEEP_GEMM_WARMUP = "skip"
EXIT_GRANT_WAIT_S = 3600.0


class GpuGate:
    """The child's side of the GPU-memory lock that :mod:`.live` shares among children.

    ``acquire()`` before building the engine, ``release()`` once the KV cache is
    allocated (or the build failed), ``exit(code)`` at the very end: it asks the
    parent to take the lock and exits only once it has, so no neighbour is
    profiling while this process's GPU memory goes away.  Files in the control
    folder tell the parent where the child is: ``waiting``, ``locked``,
    ``released``, ``exit-request`` (the parent answers ``exit-granted``).
    """

    def __init__(self, lock_path: str | None, control: str | None) -> None:
        self.lock_path, self.control = lock_path, control
        self.fd: int | None = None
        self.waited_s: float | None = None

    @classmethod
    def from_env(cls) -> "GpuGate":
        return cls(os.environ.get(LOCK_ENV), os.environ.get(CONTROL_ENV))

    def _mark(self, name: str) -> None:
        if self.control:
            with open(os.path.join(self.control, name), "w") as f:
                f.write(f"{time.time():.3f}\n")

    def acquire(self) -> None:
        if not self.lock_path or self.fd is not None:
            return
        self._mark("waiting")
        t0 = time.monotonic()
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.fd = fd
        self.waited_s = round(time.monotonic() - t0, 1)
        self._mark("locked")

    def release(self) -> None:
        if self.fd is None:
            return
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None
        self._mark("released")

    def exit(self, code: int = 0) -> None:
        """Exit once the parent holds the lock for us (at once without a parent)."""
        self.release()
        sys.stdout.flush()
        sys.stderr.flush()
        if self.control:
            self._mark("exit-request")
            granted = os.path.join(self.control, "exit-granted")
            t0 = time.monotonic()
            while not os.path.exists(granted) and time.monotonic() - t0 < EXIT_GRANT_WAIT_S:
                time.sleep(0.05)
        # vLLM may leave non-daemon threads behind; the recording is safely on disk.
        os._exit(code)


def _versions() -> dict:
    import torch
    import vllm

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "vllm": getattr(vllm, "__version__", "unknown"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": gpu,
        "python": sys.version.split()[0],
    }


def _error_text(log: instrument.RouteLog, phase_prefix: str, exc: BaseException) -> str:
    """The routing error if one was raised in this phase, else the exception's own text."""
    return log.first_error(phase_prefix) or instrument.format_exception(exc)


def _caller_error(knobs: Knobs, exc: BaseException) -> dict:
    """Under TP, what ``LLM`` raised in the caller (the executor's wrap of the worker's
    text, :func:`hisparse_model.model.parallel.caller_error`), kept beside the worker's own
    ``error``."""
    if knobs.tensor_parallel_size == 1:
        return {}
    return {"caller_error": instrument.format_exception(exc)}


def run(spec: dict, gate: GpuGate | None = None) -> dict:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_DEEP_GEMM_WARMUP", DEEP_GEMM_WARMUP)
    gate = gate or GpuGate(None, None)
    knobs = Knobs(**spec["knobs"])
    prompt_lens = [int(n) for n in spec["prompt_lens"]]
    serve = spec.get("engine") == "async"  # AsyncLLM, as vllm serve runs it (serve_engine.py)
    phase_file = None
    if serve:
        log, phase_file = serve_engine.prepare(tempfile.mkdtemp(prefix="hisparse-core-"),
                                               knobs.routing)
    elif knobs.tensor_parallel_size > 1:  # the routing runs in the workers (tp_worker.py)
        from . import tp_worker

        log = tp_worker.prepare_child(tempfile.mkdtemp(prefix="hisparse-ranks-"), knobs.routing)
    else:
        log = rank_log.for_process()  # streamed for a DP rank (dp_live.py)
    # vLLM's ll_bf16 router warmup (M = 1..16) compiles in ~7 s on a cold H200
    # (scripts/measure_ll_bf16_warmup.py); HISPARSE_LL_BF16_WARMUP=narrow narrows it to
    # M = 1 as earlier recordings did, and the recording lists that patch.
    narrow = os.environ.get(LL_BF16_ENV, "full") == "narrow"
    instrument.install(log, routing=knobs.routing, narrow_router_warmup=narrow,
                       on_kv_cache_ready=gate.release)
    if knobs.tensor_parallel_size > 1:
        tp_worker.stamp_scheduler_outputs(log)
    if os.environ.get("VLLM_DEEP_GEMM_WARMUP") == "skip":
        log.patches.append(
            "VLLM_DEEP_GEMM_WARMUP=skip: no DeepGEMM JIT warmup (GEMM kernels only; "
            "they compile on first use instead)")
    model_dir = llm_args.write_model_dir(tempfile.mkdtemp(prefix="dsv32-tiny-"))
    kwargs = {**llm_args.llm_kwargs(knobs, model_dir), **parallel.llm_kwargs(knobs)}
    if serve:
        kwargs = serve_engine.engine_kwargs(kwargs)
    if spec.get("gpu_memory_utilization") is not None:  # one engine alone on the GPU
        kwargs["gpu_memory_utilization"] = float(spec["gpu_memory_utilization"])
    rec: dict = {
        "schema": SCHEMA_VERSION,
        "knobs": knobs.as_dict(),
        "prompt_lens": prompt_lens,
        "provenance": {
            **_versions(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "engine_args": {**kwargs, "model": "hisparse_model/data/dsv32-config.json"},
            "hf_overrides": llm_args.TINY_OVERRIDES,
            "mode": knobs.routing,
            "command": spec.get("command", ""),
            "env": {k: os.environ[k] for k in sorted(os.environ)
                    if k.startswith(parallel.ENV_PREFIXES if parallel.is_parallel(knobs)
                                    else "VLLM_") or k == LL_BF16_ENV},
        },
    }
    if parallel.is_parallel(knobs):
        rec["provenance"]["parallel"] = parallel.provenance(knobs)
    if serve:
        rec["provenance"]["engine_class"] = serve_engine.ENGINE_CLASS
    llm = loop = None
    gate.acquire()  # serialise start-ups up to the KV-cache allocation (live.py)
    if gate.waited_s is not None:
        rec["provenance"]["startup_lock_wait_seconds"] = gate.waited_s
    t0 = time.monotonic()
    try:
        if serve:
            llm, loop = serve_engine.build(kwargs)
        else:
            llm = llm_args.build_llm(kwargs)
        rec["startup"] = {"ok": True, "error": None}
    except BaseException as exc:  # noqa: BLE001 - the point is to record it
        rec["startup"] = {"ok": False, "error": _error_text(log, "", exc),
                          **_caller_error(knobs, exc)}
    finally:
        gate.release()
    rec["startup"]["seconds"] = round(time.monotonic() - t0, 1)
    if isinstance(log, rank_log.StreamedRouteLog):  # a DP rank: known even if it hangs later
        log.write("startup", **rec["startup"])
    rec["engine"] = log.engine_report
    rec["provenance"]["patches"] = log.patches

    if "workload" in spec:  # several requests, step by step (live --workload)
        rec.update(_serve_workload(llm, log, spec["workload"], rec["startup"],
                                   spec.get("dp_rank"), knobs.data_parallel_size))
        rec["routing_log"] = log.rows
        rec["provenance"]["patches"] = log.patches
        return rec
    prompts = []
    alive = llm is not None
    for i, n in enumerate(prompt_lens):
        if not alive:
            prompts.append({"n": n, "ran": False, "ok": None, "error": None})
            continue
        from vllm import SamplingParams

        phase = f"prompt:{i}"
        with log.in_phase(phase):
            try:
                if serve:
                    serve_engine.set_phase(phase_file, phase)
                    serve_engine.generate(llm, loop, n, f"prompt-{i}")
                else:
                    llm.generate(
                        [{"prompt_token_ids": llm_args.prompt_token_ids(n)}],
                        SamplingParams(max_tokens=llm_args.MAX_TOKENS, ignore_eos=True),
                        use_tqdm=False,
                    )
                prompts.append({"n": n, "ran": True, "ok": True, "error": None})
            except BaseException as exc:  # noqa: BLE001
                prompts.append(
                    {"n": n, "ran": True, "ok": False, "error": _error_text(log, phase, exc),
                     **_caller_error(knobs, exc)}
                )
                alive = False
    rec["prompts"] = prompts
    if serve:
        if llm is not None:
            llm.shutdown()  # the engine core's stream is complete once it has stopped
        rec["routing_log"] = serve_engine.one_rank(log.rows)
        rec["engine"] = {k: v for k, v in log.engine_report.items() if k != "ranks"}
    else:
        rec["routing_log"] = log.rows
    rec["provenance"]["patches"] = log.patches
    return rec


def _serve_workload(llm, log: instrument.RouteLog, raw, startup: dict,
                    dp_rank: int | None = None, dp_size: int = 1) -> dict:
    """A workload recording's body: the workload, every step, the crash, finished requests
    (for a DP rank: its share, served in step with the other ranks, dp_serve.py)."""
    from ..schedule.workload import Workload
    from . import dp_serve, traffic

    work = Workload.from_json(raw)
    body = {"workload": work.as_json()["requests"], "steps": [], "finished": [], "lost": [],
            "accepted": None, "crash": None}
    if llm is None:  # the engine died at start-up: nothing is served
        body["crash"] = {"step": None, "error": startup["error"]}
        return body
    requests = [{"prompt_token_ids": list(r.prompt_token_ids), "max_tokens": r.max_tokens,
                 "arrival_step": r.arrival_step, "dp_rank": getattr(r, "dp_rank", None)}
                for r in work.requests]
    if dp_rank is not None:
        body.update(dp_serve.serve(llm, log, requests, dp_rank, dp_size))
    else:
        body.update(traffic.serve(llm, log, requests))
    return body


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    gate = GpuGate.from_env()
    code = 1
    try:
        with open(spec_path) as f:
            spec = json.load(f)
        rec = run(spec, gate)
        write_json_atomic(out_path, rec)
        print(f"wrote {out_path}: startup ok={rec['startup']['ok']}", flush=True)
        code = 0
    except BaseException:  # noqa: BLE001 - the log keeps the traceback
        import traceback

        traceback.print_exc()
    gate.exit(code)  # never returns
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
