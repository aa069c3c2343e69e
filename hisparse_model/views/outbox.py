"""Getting a widget message out of the kernel now, rather than after the next computation.

ipykernel sends IOPub messages, widget state included, from a background thread
(``IOPubThread``).  While the dashboard computes its chart in pure Python, that
thread gets the GIL only in ``sys.getswitchinterval()`` slices (5 ms), and it
needs several to send one message: the numbers reached the browser 30–60 ms
after the kernel had set them, often just after the chart was done (kernel
timestamps against the browser's WebSocket receive times, notebook 5).
:func:`flush` waits, with the GIL released, until that thread has sent
everything queued so far.

Once sent, the numbers still need the Jupyter server to forward them and the
browser to draw them.  On a machine with two cores, the chart computed right
away takes one core while the server, the browser and its compositor share the
other: the numbers then reached the page 20–60 ms late (strace showed the
server's write to the browser waiting 13–22 ms for a core).  :func:`send_now`
therefore also leaves the CPU to them for about two frames before the chart is
computed.  Measured in the browser on two cores (notebook 5, 52 moves each): the
numbers changed in the page after a median of 38 ms with neither, 29 ms with the
flush alone, 28 / 23 ms with a 16 / 30 ms pause; the charts, with the 30 ms
pause, after a median of 85 ms rather than 96 ms, the slowest 140 ms rather than
249 ms (their computation no longer competes with the browser drawing the numbers).
"""

from __future__ import annotations

import threading
import time

FLUSH_TIMEOUT_S = 0.05  # never hold the chart back longer than this
DRAW_S = 0.03  # about two frames at 60 Hz: the server forwards the numbers, the browser draws them


def _iopub_thread():
    """The running kernel's IOPub thread, or None (no IPython kernel: a script, a test)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    kernel = getattr(get_ipython(), "kernel", None)
    thread = getattr(kernel, "iopub_thread", None)
    alive = getattr(getattr(thread, "thread", None), "is_alive", lambda: False)()
    return thread if alive else None


def flush(timeout: float = FLUSH_TIMEOUT_S) -> bool:
    """Wait until the messages queued so far have left the kernel; False if none to wait for.

    The IOPub thread runs its queue in order (``IOPubThread.schedule``), so once a
    marker scheduled after them has run, they have been handed to ZeroMQ.
    """
    io = _iopub_thread()
    if io is None:
        return False
    sent = threading.Event()
    io.schedule(sent.set)
    return sent.wait(timeout)


def send_now() -> bool:
    """Flush what is queued, then leave the CPU for ``DRAW_S``; False outside a kernel."""
    if not flush():
        return False
    time.sleep(DRAW_S)
    return True
