"""Loaded by every Python process of a served replay's ``vllm serve`` (its folder is put first on
the server's PYTHONPATH by :func:`hisparse_model.engine.serve_process.stack_dump_env`).

SIGUSR2 makes the process print every thread's Python stack to its stderr (the server's log)
and go on: a stalled engine can be looked at several times without being stopped.  Nothing
else is changed; vLLM 0.31.0-0.34.0 use no SIGUSR2 handler of their own.
"""

import faulthandler
import signal

faulthandler.register(signal.SIGUSR2, all_threads=True, chain=False)
