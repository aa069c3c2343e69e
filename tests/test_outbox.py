"""``views.outbox``: the numbers leave the kernel before the chart is computed.

Invariant: :func:`flush` returns only once every message queued before it has been
handed to ZeroMQ by ipykernel's own IOPub thread, and outside a kernel it returns
at once, waiting for nothing.
"""

from __future__ import annotations

import gc
import logging
import time

import pytest
import zmq
from ipykernel.iostream import IOPubThread

from hisparse_model.views import outbox


class _Shell:  # what get_ipython() is inside a kernel: .kernel.iopub_thread
    def __init__(self, iopub_thread):
        self.kernel = type("Kernel", (), {"iopub_thread": iopub_thread})()


@pytest.fixture
def iopub(monkeypatch):
    """ipykernel's IOPubThread on an inproc PUB socket, as get_ipython().kernel.iopub_thread."""
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.bind("inproc://outbox-test")
    thread = IOPubThread(pub)
    thread.start()
    monkeypatch.setattr("IPython.get_ipython", lambda: _Shell(thread))
    try:
        yield thread
    finally:
        thread.stop()
        thread.close()
        ctx.term()
        # stop() leaves the thread's housekeeping task pending; asyncio logs that when the task
        # is collected.  Collected here, with that one logger quiet, not at some later test.
        asyncio_log = logging.getLogger("asyncio")
        asyncio_log.disabled = True
        try:
            thread._event_pipe_gc_task = None
            gc.collect()
        finally:
            asyncio_log.disabled = False


def test_outside_a_kernel_nothing_is_waited_for(monkeypatch):
    """pytest has no kernel: flush and send_now return False at once (no pause)."""
    pauses = []
    monkeypatch.setattr(outbox.time, "sleep", pauses.append)  # a pause would be recorded
    monkeypatch.setattr(outbox.threading.Event, "wait", lambda self, t=None: pauses.append(t))
    assert outbox.flush() is False and outbox.send_now() is False
    assert pauses == []  # neither slept nor waited on the IOPub thread


# (queued before flush, each one's send time in s): flush returns after all of them ran
QUEUES = [
    [0.0],  # one message, sent at once
    [0.02],  # one slow send (20 ms): flush waits for it
    [0.01, 0.0, 0.01],  # three in a row: flush waits for the last
]


@pytest.mark.parametrize("delays", QUEUES)
def test_flush_returns_after_every_message_queued_before_it(iopub, delays):
    """The IOPub thread runs its queue in order, so the marker flush schedules runs last."""
    sent = []
    for i, d in enumerate(delays):
        iopub.schedule(lambda i=i, d=d: (time.sleep(d), sent.append(i)))
    assert outbox.flush(timeout=5) is True
    assert sent == list(range(len(delays)))


def test_send_now_flushes_then_pauses(iopub, monkeypatch):
    """In a kernel: the queue is flushed first, then the CPU is left to the browser for DRAW_S."""
    calls = []
    iopub.schedule(lambda: calls.append("sent"))
    monkeypatch.setattr(outbox.time, "sleep", lambda s: calls.append(("sleep", s)))
    assert outbox.send_now() is True
    assert calls == ["sent", ("sleep", outbox.DRAW_S)]
