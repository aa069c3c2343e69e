"""``hisparse app``'s kernel websocket: what the page's browser sends, and nothing else.

Voilà serves each page's kernel on a websocket through jupyter_server's
``ZMQChannelsWebsocketConnection``.  Two ways one local client took the server down
(issue 61), both in code that trusts a frame's first 8 bytes:

* a frame on the ``v1.kernel.websocket.jupyter.org`` subprotocol (the one the page speaks):
  ``deserialize_msg_from_ws_v1`` reads the number of parts from the first 8 bytes and builds
  a list of that many offsets before it looks at the frame's length.  4 KB of random bytes
  ask for about 2**63 offsets: the event loop stops (no page answers) and memory grows
  without bound;
* a socket opened without that subprotocol (the "legacy" protocol): the server's binary
  messages to it go through Voilà's ``write_message``, which reads them as if they were v1
  (``read_header_from_binary_message``): the same loop, with no frame from the client at all.

:class:`PageSocket` (Voilà's ``kernel_websocket_connection_class``, set by
:mod:`hisparse_model.app`) takes neither: a socket that does not offer the v1 subprotocol is
refused before the upgrade (HTTP 400), and a frame that is not a well-formed v1 message
(:func:`v1_problem`) closes the socket (1008) before anything reads it.  A frame larger than
:data:`MAX_MESSAGE_BYTES` is closed by tornado itself (``websocket_max_message_size``, 1009).
At most :data:`MAX_SOCKETS` sockets are open to one kernel at once (more: HTTP 429).

Imported only in Voilà's process (it needs jupyter_server, from the notebooks extra).
"""

from __future__ import annotations

import json
import weakref

from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from tornado import web

V1 = "v1.kernel.websocket.jupyter.org"  # the subprotocol the page's JupyterLab services offer
MAX_MESSAGE_BYTES = 1 << 20  # a widget's value typed or pasted: far less
MAX_BUFFERS = 64  # binary buffers in one message (the page's widgets send none or one)
CHANNELS = ("shell", "control", "stdin")  # what a page sends on (iopub is the kernel's)
POLICY_VIOLATION = 1008  # RFC 6455 close code
MAX_SOCKETS = 4  # open sockets to one page's kernel: its page opens one (a reload, one more)
TOO_MANY = 429  # HTTP: Too Many Requests


def offsets_fit(frame: bytes) -> str | None:
    """Why the offsets that ``frame``'s first 8 bytes announce do not fit in it (None when they
    do): the loop that reads them (jupyter_server's and Voilà's) is then bounded by the
    frame's length."""
    count = int.from_bytes(frame[:8], "little")
    if len(frame) < 8 or 8 * (count + 1) > len(frame):
        return f"{count} offsets in a {len(frame)}-byte frame"
    return None


def v1_problem(frame) -> str | None:
    """Why ``frame`` is not a message the page's browser would send on the v1 subprotocol
    (None when it is one): 8 bytes giving n, n offsets (the first just past them, never
    decreasing, the last the frame's end), a channel a page sends on, and a JSON header
    naming its message type, as jupyter_server's ``serialize_msg_to_ws_v1`` and the page's
    ``serializeV1KernelMessage`` write it.  Never reads more than the frame holds."""
    if not isinstance(frame, bytes):
        return "a text frame (the page sends binary frames only)"
    count = int.from_bytes(frame[:8], "little")
    if not 6 <= count <= 6 + MAX_BUFFERS:  # channel, 4 JSON parts, buffers, the end
        return f"{count} offsets (a message has 6 to {6 + MAX_BUFFERS})"
    if (problem := offsets_fit(frame)) is not None:
        return problem
    offsets = [int.from_bytes(frame[8 * i:8 * (i + 1)], "little") for i in range(1, count + 1)]
    if offsets[0] != 8 * (count + 1) or offsets[-1] != len(frame) or any(
            b < a for a, b in zip(offsets, offsets[1:])):
        return "offsets outside the frame or out of order"
    channel = frame[offsets[0]:offsets[1]]
    if channel.decode("ascii", "replace") not in CHANNELS:
        return f"channel {channel[:20]!r}"
    try:
        header = json.loads(frame[offsets[1]:offsets[2]])
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested past the parser
        return "a header that is not JSON"
    if not isinstance(header, dict) or not isinstance(header.get("msg_type"), str):
        return "a header without a msg_type"
    return None


# kernel id -> the socket handlers claimed for it (weak: a handler gone is no claim).  Counted
# when a socket is prepared, before anything awaits, so sockets opened at the same moment
# are counted against each other (the kernel manager counts a socket only once it connected).
CLAIMS: dict = {}


def _live(handler) -> bool:
    """Whether a claimed socket still holds its place: upgraded and open, or its handshake
    still under way (a request not finished: tornado's ``_finished``)."""
    connection = handler.ws_connection
    if connection is not None:
        return not connection.is_closing()
    return not getattr(handler, "_finished", True)


class PageSocket(ZMQChannelsWebsocketConnection):
    """jupyter_server's kernel connection, refusing what the page never sends (see above)."""

    @property
    def subprotocol(self):
        """Always :data:`V1` (:meth:`prepare` refuses any other socket).  jupyter_server asks
        the socket, and a closed socket has none: a kernel message that arrived just after the
        page's socket closed took the legacy path, whose binary messages Voilà's
        ``write_message`` reads as v1 (the unbounded loop, from a client that only left)."""
        return V1

    def write_message(self, message, binary: bool = False):
        """The page's socket's ``write_message``, but nothing to a closed socket, and no
        binary message whose offsets do not fit in it (Voilà reads each one's header)."""
        connection = self.websocket_handler.ws_connection
        if connection is None or connection.is_closing():
            return None
        if isinstance(message, bytes) and (problem := offsets_fit(message)) is not None:
            self.log.warning("kernel message not sent: %s", problem)
            return None
        return self.websocket_handler.write_message(message, binary)

    async def prepare(self):
        """Refuse (no upgrade) a socket that does not offer :data:`V1` (HTTP 400), or one
        more than :data:`MAX_SOCKETS` to one kernel (HTTP 429: each open socket holds some
        nine file descriptors of the server's; 300 took Voilà from 17 to 2,313)."""
        offered = self.websocket_handler.request.headers.get("Sec-WebSocket-Protocol", "")
        if V1 not in (p.strip() for p in offered.split(",")):
            self.log.warning("kernel websocket refused: it does not offer %s", V1)
            self.websocket_handler.set_status(400)  # Finish, not HTTPError: Voila has no
            raise web.Finish()  # 400.html, and its write_error logs a traceback for each
        held = CLAIMS.setdefault(self.kernel_id, weakref.WeakSet())
        open_now = sum(1 for h in list(held) if _live(h))
        if open_now >= MAX_SOCKETS:
            self.log.warning("kernel websocket refused: %d already open to kernel %s",
                             open_now, self.kernel_id)
            self.websocket_handler.set_status(TOO_MANY)
            raise web.Finish()
        held.add(self.websocket_handler)  # before any await: handshakes at once count too
        await super().prepare()

    def handle_incoming_message(self, incoming_msg) -> None:
        """Pass a well-formed v1 message on; close the socket on anything else."""
        problem = v1_problem(incoming_msg)
        if problem is not None:
            self.log.warning("kernel websocket closed: %s", problem)
            self.websocket_handler.close(POLICY_VIOLATION, "not a v1 kernel message")
            return
        super().handle_incoming_message(incoming_msg)
