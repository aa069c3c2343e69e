"""A loopback HTTP server for tests that read a server's /metrics (tests/test_step_time.py,
tests/test_boundary.py): started on a free port, its URL at ``/metrics``, each GET answered by
``answer(handler)``, stopped on leaving the ``with`` block."""

import http.server
import threading


class Loopback:
    """``with Loopback(answer) as server: read(server.url)``; ``hits`` counts the GETs."""

    def __init__(self, answer):
        self.hits = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                outer.hits += 1
                try:
                    answer(self)
                except OSError:  # the client hung up: what a bound does
                    pass

            def log_message(self, *args):  # quiet
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
