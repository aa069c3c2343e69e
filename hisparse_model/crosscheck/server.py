"""One process per vLLM version that imports vLLM's code once and runs every driver call.

    PYTHONPATH=.vllm/0.31.0:. python -m hisparse_model.crosscheck.server

Each cross-check used to start its own driver subprocess, and each paid vLLM's import
(8 to 12 s of CPU) again; a test run started about 25 of them.  This server imports
vLLM and the modules the drivers drive once (:data:`WARM`), then answers calls: one
JSON line on stdin per call, ``{"id", "call": "module:function", "payload_file", "out",
"log"}`` and optionally ``"env"`` (``{name: value}``, null unsets it, in that call
only).  For each call it forks a child, which runs ``function(payload)`` on the JSON
of ``payload_file`` (every driver's ``run``) and writes the result as JSON to ``out``
(stdout and stderr go to ``log``); the server writes ``{"id", "rc"}`` on stdout when the
child has ended.  The fork keeps
the calls apart: the stand-ins a driver installs process-wide (``startup_setup``'s
CUDA-graph objects, ``gc.collect``, ...) live and die in its child, so every call sees
the vLLM that a fresh driver process would see, already imported.

The first line on stdout is ``{"ready": true, "vllm_version", "vllm_file", "pid"}``;
end of stdin ends the server.  A child's ``rc`` is 0 when ``out`` holds the result, 1
when ``out`` holds ``{"error": traceback}``.  The client is ``crosscheck/client.py``.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback

# What every driver imports: imported here once, before any fork.  A module that cannot
# import on a CPU-only torch without a driver's stand-ins is left to the drivers.
WARM = (
    "torch",
    "vllm",
    "vllm.config",
    "vllm.engine.arg_utils",
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.core.sched.async_scheduler",
    "vllm.v1.worker.gpu.model_runner",
    "vllm.v1.worker.gpu.cudagraph_utils",
    "vllm.v1.worker.gpu.input_batch",
    "vllm.v1.attention.backends.utils",
    "vllm.model_executor.layers.attention.sparse_mla_attention",
    "hisparse_model.crosscheck.startup_driver",
    "hisparse_model.crosscheck.scheduler_driver",
    "hisparse_model.crosscheck.vllm_driver",
    "hisparse_model.crosscheck.dp_sync_driver",
    "hisparse_model.crosscheck.launch_driver",
)


def _warm() -> None:
    for name in WARM:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the driver that needs it imports it (and reports)
            pass


def _resolve(call: str):
    module, _, name = call.partition(":")
    return getattr(importlib.import_module(module), name)


def _child(request: dict) -> int:
    """In the forked child: run the call, write its result (or its traceback) to ``out``."""
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)  # anything vLLM prints must not reach the server's answer stream
    os.dup2(log, 2)
    sys.stdout = sys.stderr = os.fdopen(os.dup(log), "w", buffering=1)
    for name, value in (request.get("env") or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        with open(request["payload_file"]) as f:
            payload = json.load(f)
        result, rc = _resolve(request["call"])(payload), 0
    except BaseException:  # noqa: BLE001 - the client reports it as the call's failure
        result, rc = {"error": traceback.format_exc()}, 1
    tmp = request["out"] + ".part"
    with open(tmp, "w") as f:
        f.write(json.dumps(result, separators=(",", ":")))
    os.replace(tmp, request["out"])
    sys.stdout.flush()
    return rc


def serve(stdin, answers) -> int:
    """Answer every call line of ``stdin`` in order; one ``{"id", "rc"}`` line each."""
    for line in stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        answers.flush()
        pid = os.fork()
        if pid == 0:
            rc = 1
            try:
                rc = _child(request)
            finally:
                os._exit(rc)
        _, status = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        answers.write(json.dumps({"id": request["id"], "rc": rc}) + "\n")
        answers.flush()
    return 0


def main() -> int:
    from hisparse_model.crosscheck.driver_io import quiet_vllm

    quiet_vllm()
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # prints during the imports go to stderr, not into the answers
    sys.stdout = sys.stderr
    _warm()
    import vllm

    answers.write(json.dumps({"ready": True, "vllm_version": vllm.__version__,
                              "vllm_file": vllm.__file__, "pid": os.getpid()}) + "\n")
    answers.flush()
    return serve(sys.stdin, answers)


if __name__ == "__main__":
    sys.exit(main())
