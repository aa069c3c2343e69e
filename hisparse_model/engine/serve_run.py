"""Replay a trace over HTTP against a real ``vllm serve`` and record when and how it dies.

``python -m hisparse_model.engine.serve_run --trace FILE --speed X --max-num-seqs S
--max-model-len L --out DIR`` (on the GPU machine, where vLLM is):

1. starts vLLM's own OpenAI server (``python -m vllm.entrypoints.cli.main serve`` with
   :func:`.serve_cli.serve_flags`) in a process group of its own, its output in
   ``server.log``, and waits for ``GET /health``;
2. sends the trace's requests at their own arrival times (divided by ``--speed``) as
   ``POST /v1/completions`` with the token ids the model serves as request ``i``
   (``traffic_risk.prompt_of``), ``max_tokens`` the trace's output length, ``ignore_eos``;
   each carries ``X-Request-Id: trace-<i>``, which vLLM takes as the request's id
   (vllm/entrypoints/serve/engine/serving.py:125@0.31.0 `(req_id := raw_request.headers.get("X-Request-Id")) is not None`),
   so the engine's crash dump names the requests of the step that died;
3. reads ``GET /metrics`` at the start and every ``--metrics-every`` seconds
   (``metrics-<seconds>.txt``, the time of each in ``run.json``) and ``GET /health``
   every half second;
4. stops at the first failed request plus ``--linger`` seconds, at the server's exit, or
   when every request has finished, and writes ``client.jsonl`` (one line per request:
   due, sent and done times from the replay's start, HTTP status, the error's first line)
   and ``run.json`` (provenance, the command, what was seen).

Times are seconds since the replay's start (request 0 is due at 0).  No vLLM import at
module level (package rule); this process only speaks HTTP.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import threading
import time

from ..model.knobs import Knobs
from ..model.host_pool import SPARE_BLOCKS, gib_for_blocks
from ..model.kv_layout import layout
from .serve_args import parse
from ..inputs.stall_stacks import compiled_while_serving, jit_warnings, stall_cause, stall_causes
from ..model.reproduction import BLOCK_SIZE
from .llm_args import write_model_dir
from .serve_cli import SERVED_NAME, VLLM_MAIN, serve_flags
from .jit_window import (CACHE_ENV, cache_files, deep_gemm_cache_dir, log_between, log_size,
                         window_verdict)
from ..inputs.iteration_log import ITERATION_LOG_FLAG, count_iterations
from .serve_warm import WARM_PASS_IDS, WARM_TOKENS, warm, warm_requests
from .step_timer import PATCHES, timed_rows
from .serve_process import (dump_stacks, http, stack_dump_env, start_server, stop_server,
                            host, versions, wait_healthy)

CRASH_TEXT = "HiSparse swap rows exceed"  # the ValueError's text (the fix PR's)


def host_pool_gib_for(requests: list[dict], knobs: Knobs) -> int:
    """A host pool (whole GiB) that holds every request of the replay at once, and the
    warm-up's, with a GiB to spare: the model assumes the KV pools never run short, and a
    1-GiB pool (1,820 blocks, 116,480 tokens) is less than a burst of the Azure trace."""
    blocks = sum(-(-(r["prompt_len"] + r["max_tokens"]) // BLOCK_SIZE) for r in requests)
    blocks += sum(k * -(-(p + WARM_TOKENS) // BLOCK_SIZE) for p, k in warm_requests(knobs))
    return math.ceil(gib_for_blocks(blocks + SPARE_BLOCKS, layout(knobs))) + 1


def requests_of(trace: str, speed: float, knobs: Knobs, seconds: float) -> list[dict]:
    """The requests the model serves for this replay, in its order, with their token ids."""
    from ..answers.arrivals import accepted_arrivals
    from ..answers.traffic_risk import prompt_of
    from ..inputs.traffic_file import load_traffic

    traffic = load_traffic(trace, speed=speed)
    rows, _ = accepted_arrivals(traffic, seconds / 60.0, 0, knobs.max_model_len)
    return [{"i": i, "due_s": t, "prompt_len": n, "max_tokens": m,
             "prompt": list(prompt_of(i, n, b))} for i, (t, n, m, b) in enumerate(rows)]


class Replay:
    """The client side of one run: request threads, the metrics and health readers."""

    def __init__(self, base: str, out: str, requests: list[dict], metrics_every: float):
        self.base, self.out, self.requests = base, out, requests
        self.metrics_every = metrics_every
        self.rows: dict[int, dict] = {}
        self.metrics: dict[str, float] = {}
        self.first_failure: float | None = None
        self.unhealthy_at: float | None = None
        self.crash_logged: float | None = None  # when the server log first showed CRASH_TEXT
        self.stalled_at: float | None = None  # requests in flight, none finished for a while
        self.stack_dumps: list[float] = []  # when the server's stacks were dumped
        self.last_done = 0.0
        self.stop = threading.Event()
        self.t0 = 0.0
        self.lock = threading.Lock()
        self.rows_file = open(os.path.join(out, "client.jsonl"), "w")

    def now(self) -> float:
        return time.monotonic() - self.t0

    def send(self, r: dict) -> None:
        sent = self.now()
        status, text = http(f"{self.base}/v1/completions", {
            "model": SERVED_NAME, "prompt": r["prompt"], "max_tokens": r["max_tokens"],
            "ignore_eos": True, "temperature": 0.0}, {"X-Request-Id": f"trace-{r['i']}"})
        done = self.now()
        row = {"i": r["i"], "prompt_len": r["prompt_len"], "max_tokens": r["max_tokens"],
               "due_s": round(r["due_s"], 4), "sent_s": round(sent, 4),
               "done_s": round(done, 4), "status": status}
        if status == 200:
            usage = json.loads(text).get("usage") or {}
            row["completion_tokens"] = usage.get("completion_tokens")
        else:
            row["error"] = text.strip().splitlines()[0][:300] if text.strip() else ""
            if self.first_failure is None and not self.stop.is_set():
                self.first_failure = done
        with self.lock:
            self.rows[r["i"]] = row
            self.last_done = done
            if not self.rows_file.closed:  # requests cut by the server's stop end after it
                self.rows_file.write(json.dumps(row) + "\n")  # as it ends: a cut run keeps it
                self.rows_file.flush()

    def close(self) -> None:
        with self.lock:
            self.rows_file.close()

    def sent_last(self, threads) -> float:
        """When the first request still in flight was sent (a stall counts from then)."""
        waiting = [r for r in self.requests[:len(threads)] if r["i"] not in self.rows]
        return waiting[0]["due_s"] if waiting else self.now()

    def read_metrics(self) -> None:
        k = 0
        while not self.stop.is_set():
            at = k * self.metrics_every
            self.stop.wait(max(0.0, at - self.now()))
            if self.stop.is_set():
                break
            status, text = http(f"{self.base}/metrics", timeout=10)
            if status == 200:
                name = f"metrics-{at:g}.txt"
                with open(os.path.join(self.out, name), "w") as f:
                    f.write(text)
                self.metrics[name] = round(self.now(), 3)
            k += 1

    def watch_health(self) -> None:
        while not self.stop.wait(0.5):
            status, _ = http(f"{self.base}/health", timeout=2)
            if status != 200 and self.unhealthy_at is None:
                self.unhealthy_at = round(self.now(), 3)

    def watch_log(self, path: str) -> None:
        """Note when the server's log first shows the HiSparse error (read every 50 ms)."""
        tail = ""
        with open(path, errors="replace") as f:
            f.seek(0, os.SEEK_END)
            while not self.stop.wait(0.05):
                tail = tail[-len(CRASH_TEXT):] + f.read()  # a line may arrive in two reads
                if CRASH_TEXT in tail:
                    self.crash_logged = round(self.now(), 3)
                    return

    def run(self, server: subprocess.Popen, seconds: float, linger: float, log: str,
            stall: float = 8.0, stall_dumps: int = 3) -> str:
        """Replay until the end, a failure or the crash in the log (plus ``linger``), or
        the server's exit: why it stopped.  While requests are in flight and none finishes
        for ``stall`` seconds the server's stacks are dumped (:func:`.dump_stacks`), again
        every ``stall`` seconds while it lasts, at most ``stall_dumps`` times; the replay
        goes on (a stall may be a first-use compilation that ends)."""
        self.t0 = time.monotonic()
        side = [threading.Thread(target=self.read_metrics, daemon=True),
                threading.Thread(target=self.watch_health, daemon=True),
                threading.Thread(target=self.watch_log, args=(log,), daemon=True)]
        for t in side:
            t.start()
        threads = []
        why = "every request finished"
        pending = list(self.requests)
        while True:
            while pending and pending[0]["due_s"] <= self.now():
                t = threading.Thread(target=self.send, args=(pending.pop(0),), daemon=True)
                t.start()
                threads.append(t)
            if self.first_failure is not None and self.now() > self.first_failure + linger:
                why = "a request failed"
                break
            if self.crash_logged is not None and self.now() > self.crash_logged + linger:
                why = "the server logged the HiSparse error"
                break
            if server.poll() is not None:
                why = f"the server exited ({server.returncode})"
                break
            if not pending and all(not t.is_alive() for t in threads):
                if self.first_failure is not None or self.crash_logged is not None:
                    time.sleep(linger)  # the log line may follow the last answer
                    why = ("the server logged the HiSparse error" if self.crash_logged
                           is not None else "a request failed")
                break
            if self.now() > seconds:
                why = f"--seconds {seconds:g} reached"
                break
            in_flight = len(threads) - len(self.rows)
            quiet = self.now() - max(self.last_done, self.sent_last(threads),
                                     self.stack_dumps[-1] if self.stack_dumps else 0.0)
            if in_flight and quiet > stall and len(self.stack_dumps) < stall_dumps:
                if self.stalled_at is None or self.last_done > self.stalled_at:
                    self.stalled_at = round(self.now(), 3)  # a new stall
                self.stack_dumps.append(round(self.now(), 3))
                # a thread: the dumps take a second a process, and the replay's requests
                # must still go out at their times meanwhile
                threading.Thread(target=dump_stacks, args=(server,), daemon=True).start()
            time.sleep(0.002)
        self.stop.set()
        return why


def main(argv=None) -> int:
    args = parse(argv)
    os.makedirs(args.out, exist_ok=True)
    knobs = Knobs(vllm_version=args.vllm_version, max_num_seqs=args.max_num_seqs,
                  max_model_len=args.max_model_len,
                  max_num_batched_tokens=args.max_num_batched_tokens)
    requests = requests_of(args.trace, args.speed, knobs, args.seconds)
    model_dir = write_model_dir(os.path.join("/tmp", SERVED_NAME))
    pool = args.host_pool_gib or host_pool_gib_for(requests, knobs)
    knobs = knobs.replace(host_pool_gib=pool)
    argv_server = [sys.executable, "-m", VLLM_MAIN, "serve",
                   *serve_flags(knobs, model_dir, args.port),
                   *([] if args.no_iteration_log else [ITERATION_LOG_FLAG])]
    gemm = {"VLLM_DEEP_GEMM_WARMUP": args.deep_gemm_warmup} if args.deep_gemm_warmup else {}
    cache = args.deep_gemm_cache or deep_gemm_cache_dir(os.environ)
    if args.deep_gemm_cache:
        gemm[CACHE_ENV] = args.deep_gemm_cache
    base_env = {k: v for k, v in os.environ.items() if k != "VLLM_DEEP_GEMM_WARMUP"}
    steps_dir = os.path.join(os.path.abspath(args.out), "steps")
    timed = {"HISPARSE_STEP_TIMES": steps_dir} if args.time_steps else {}
    env = stack_dump_env({**base_env, **gemm, **timed, "PYTHONFAULTHANDLER": "1"})
    base = f"http://127.0.0.1:{args.port}"
    run = {
        "provenance": {
            **versions(), "host": host(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "command": " ".join([sys.executable, "-m", "hisparse_model.engine.serve_run",
                                 *(argv if argv is not None else sys.argv[1:])]),
            "server_command": argv_server,
            "deep_gemm_warmup": args.deep_gemm_warmup or "vLLM's default (compiled at start-up)",
            "deep_gemm_cache": {"folder": cache, "files_before_start": cache_files(cache)},
            "run_time_patches": "none to vLLM; the server's Python processes load "
                                "hisparse_model/engine/stack_dump/sitecustomize.py (SIGUSR2 "
                                "prints their stacks)" + (
                                    "; in the engine core, " + PATCHES if args.time_steps
                                    else ""),
            "knobs": knobs.as_dict(), "host_pool_gib": pool},
        "trace": os.path.basename(args.trace), "speed": args.speed,
        "replay_seconds": args.seconds, "requests_in_replay": len(requests),
        "warm_waves": warm_requests(knobs)}
    write_run(args.out, run)  # now, so that a run cut short still says what it was
    server = start_server(argv_server, os.path.join(args.out, "server.log"), env)
    replay = Replay(base, args.out, requests, args.metrics_every)
    why, started, warmed = "the server never answered /health", None, []
    window = {}  # the replay's window: DeepGEMM cache files and log offsets at its ends
    log_path = os.path.join(args.out, "server.log")
    try:
        started = wait_healthy(base, server, args.start_timeout, http)
        if started is not None:
            for k in range(args.warm_passes):
                if k == args.warm_passes - 1:
                    with open(os.path.join(args.out, "metrics-warm.txt"), "w") as f:
                        f.write(http(f"{base}/metrics", timeout=10)[1])
                warmed.append(round(warm(base, knobs, 1, f"warm{k}", k * WARM_PASS_IDS), 2))
            window.update(files_ready=cache_files(cache), log_from=log_size(log_path))
            why = replay.run(server, args.seconds, args.linger, log_path, args.stall,
                             args.stall_dumps)
            window.update(files_after=cache_files(cache), log_to=log_size(log_path))
    finally:
        stop_server(server)
    replay.close()
    run.update({
        "requests_sent": len(replay.rows),
        "server_ready_after_s": None if started is None else round(started, 1),
        "warm_pass_seconds": warmed, "stopped_because": why,
        "crash_logged_s": replay.crash_logged, "stalled_at_s": replay.stalled_at,
        "stack_dumps_at_s": replay.stack_dumps,
        "first_failure_s": replay.first_failure, "unhealthy_at_s": replay.unhealthy_at,
        "metrics_read_at_s": replay.metrics, "server_exit": server.returncode})
    log = read_text(log_path)
    seen = window_verdict(window.get("files_ready"), window.get("files_after"),
                          log_between(log_path, window.get("log_from", 0),
                                      window.get("log_to", 0)))
    run["provenance"]["deep_gemm_cache"].update(
        files_when_ready=window.get("files_ready"), files_after_replay=window.get("files_after"))
    run.update({"stall_cause": stall_cause(log), "stall_stacks": stall_causes(log),
                **seen, "replay_log_bytes": [window.get("log_from"), window.get("log_to")],
                # a stall in a compiler, or a kernel compiled in the window: the replay's
                # times measured compilation
                "comparable": seen["comparable"] and not compiled_while_serving(log),
                "jit_compilations_logged": len(jit_warnings(log)),
                "iterations_logged": count_iterations(log),
                "steps_timed": timed_rows(steps_dir) if args.time_steps else None})
    write_run(args.out, run)
    print(json.dumps({k: run[k] for k in (
        "server_ready_after_s", "warm_pass_seconds", "requests_sent", "stopped_because",
        "crash_logged_s", "stalled_at_s", "first_failure_s", "unhealthy_at_s")}), flush=True)
    return 0 if started is not None else 1


def read_text(path: str) -> str:
    """A file the server wrote, as text ('' if it wrote none)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def write_run(out: str, run: dict) -> None:
    with open(os.path.join(out, "run.json"), "w") as f:
        json.dump(run, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
