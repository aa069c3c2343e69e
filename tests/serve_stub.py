"""A stand-in for ``vllm serve`` on loopback, for the served replay's client (tests/test_serve_run.py).

    python tests/serve_stub.py PORT MODE N

Answers ``/health``, ``/metrics`` and ``POST /v1/completions`` as the OpenAI server does (200
with ``usage``).  A prompt of exactly N tokens then, by MODE:

* ``crash``: the stub prints the HiSparse error to its output (the server's log) and answers
  that request and every later one with 500, as a dead engine's server does;
* ``hang``: the request is never answered (an engine step that never ends).

Started with serve_process.stack_dump_env's PYTHONPATH it prints its threads' stacks on
SIGUSR2 and goes on, as vLLM's processes do under the runner.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, MODE, N = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
DEAD = threading.Event()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        body = b"vllm:iteration_tokens_total_count 1.0\n" if self.path == "/metrics" else b""
        self._send(500 if DEAD.is_set() else 200, body)

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = len(req["prompt"])
        if n == N and MODE == "hang":
            time.sleep(3600)
        if n == N and MODE == "crash":
            print("ValueError: HiSparse swap rows exceed the configured speculative decode "
                  f"capacity: stop={N}, capacity={N - 1}.", flush=True)
            DEAD.set()
        if DEAD.is_set():
            self._send(500, b'{"error": {"message": "EngineDeadError"}}\n')
            return
        time.sleep(0.001 * req["max_tokens"])
        self._send(200, json.dumps({"usage": {"completion_tokens": req["max_tokens"]},
                                    "id": self.headers.get("X-Request-Id")}).encode())


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
