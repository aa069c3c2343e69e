"""Loaded by every Python process of a served replay's ``vllm serve`` (its folder is put first on
the server's PYTHONPATH by :func:`hisparse_model.engine.serve_process.stack_dump_env`).

SIGUSR2 makes the process print every thread's Python stack to its stderr (the server's log)
and go on: a stalled engine can be looked at several times without being stopped; vLLM
0.31.0-0.34.0 use no SIGUSR2 handler of their own.  With ``HISPARSE_STEP_TIMES=FOLDER``
(``serve_run.py --time-steps``) the process that imports vLLM's scheduler (the engine core)
times each batch into FOLDER (``hisparse_model/engine/step_timer.py``).  Nothing else is
changed.
"""

import faulthandler
import os
import signal
import sys

faulthandler.register(signal.SIGUSR2, all_threads=True, chain=False)
if os.environ.get("HISPARSE_STEP_TIMES"):
    try:
        from hisparse_model.engine.step_timer import time_steps_to

        time_steps_to(os.environ["HISPARSE_STEP_TIMES"])
    except Exception as exc:  # noqa: BLE001 - the server runs untimed, and says so
        print(f"hisparse: step timer not installed: {exc}", file=sys.stderr)
