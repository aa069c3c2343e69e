"""Children that a test interrupts with SIGINT (Ctrl-C) must be able to take it.

A process started in the background of a non-interactive shell (``cmd &``, ``nohup``)
ignores SIGINT, and its children inherit that: Python then installs no KeyboardInterrupt
handler, and a test's Ctrl-C does nothing.  ``Popen(..., preexec_fn=default_sigint)``
gives the child SIGINT's default disposition whatever the test run was started from.
"""

import signal


def default_sigint() -> None:
    """In the child, before exec: SIGINT's default disposition (Python's handler then)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
