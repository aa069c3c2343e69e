"""The app's server hardened (issue 61, item 1): no client of its port takes it down.

Before: after a page load, one 4 KB random binary frame on the page's kernel websocket (the
browser's v1 subprotocol) stopped Voila answering and grew its memory 40-70 MB/s without
bound; a websocket opened without the subprotocol did it with no frame at all; a page load
with a foreign ``Host`` header was served.  Each hostile client below is run against one
started app (``hisparse app``, as a user starts it); after each, ``GET /`` is answered within
:data:`ANSWER_S` and Voila's memory has not grown past :data:`GROWTH_MB`.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import websocket  # websocket-client, a test extra
from jupyter_server.services.kernels.connection.base import serialize_msg_to_ws_v1

from app_process import App
from hisparse_model import app as app_module
from hisparse_model.app_socket import MAX_MESSAGE_BYTES, MAX_SOCKETS, V1, v1_problem

ANSWER_S = 30  # GET / (a page and its kernel) answered within this: it was never answered
WATCH_S = 3  # how long Voila's memory is watched after each client (the old bug: > 120 MB)
GROWTH_MB = 64  # at most this much more memory after a client than before it


def _message(msg_type="kernel_info_request", channel="shell", buffers=()) -> bytes:
    """A kernel message as the page's browser writes it (v1 subprotocol)."""
    header = {"msg_id": "m1", "msg_type": msg_type, "session": "s", "username": "",
              "date": "2026-01-01T00:00:00Z", "version": "5.4"}
    parts = [json.dumps(p).encode() for p in (header, {}, {}, {})]
    return serialize_msg_to_ws_v1([*parts, *buffers], channel)


RANDOM_4K = random.Random(61).randbytes(4096)


@pytest.mark.parametrize("frame, problem", [
    (_message(), None),  # what the page sends: passed on
    (_message(buffers=[b"x" * 10]), None),  # a widget message with a binary buffer
    (_message(channel="control"), None),
    (RANDOM_4K, "offsets (a message has 6 to 70)"),  # was ~2**63 offsets read, forever
    ("{}", "a text frame"),  # the page sends binary frames only
    (b"", "0 offsets"),
    ((6).to_bytes(8, "little"), "6 offsets in a 8-byte frame"),  # offsets past the frame
    (_message()[:-1], "offsets outside the frame"),  # the last offset past the end
    (_message(channel="iopub"), "channel b'iopub'"),  # the kernel's channel, not the page's
    (_message().replace(b'"msg_type"', b'"msg_typo"'), "a header without a msg_type"),
    (_message().replace(b'{"msg_id"', b'["msg_id"'), "a header that is not JSON"),
    (_message(buffers=[b""] * 65), "71 offsets"),  # more buffers than a page sends
    # a header nested past the JSON parser's recursion: was an uncaught RecursionError
    (serialize_msg_to_ws_v1([b'{"msg_type": "comm_msg", "x": ' + b"[" * 100_000
                             + b"]" * 100_000 + b"}", b"{}", b"{}", b"{}"], "shell"),
     "a header that is not JSON"),
])
def test_a_frame_is_passed_on_only_if_the_browser_could_have_sent_it(frame, problem):
    """v1_problem names what is wrong with a frame (None only for a well-formed v1 message
    on a channel the page sends on), reading no more than the frame holds."""
    got = v1_problem(frame)
    assert (got is None) if problem is None else (got is not None and problem in got), got


@pytest.mark.parametrize("ip, remote", [
    ("127.0.0.1", False),  # the default: Host checked (localhost or a loopback address)
    ("::1", False),
    ("localhost", False),
    ("0.0.0.0", True),  # served to other machines: every Host, as Jupyter's own server
])
def test_the_host_check_is_on_for_a_loopback_ip(tmp_path, ip, remote):
    """Voila's configuration checks Host exactly when the app is bound to this machine only,
    and always names the page's websocket class and tornado's message bound."""
    whole = app_module.server_config(str(tmp_path), ip)
    config = whole["Voila"]
    assert whole["VoilaConfiguration"]["multi_kernel_manager_class"] == (
        "hisparse_model.app_kernels.PageKernels")
    assert whole["PageKernels"]["max_kernels"] == app_module.DEFAULT_MAX_PAGES
    assert config["tornado_settings"]["allow_remote_access"] is remote
    assert config["tornado_settings"]["websocket_max_message_size"] == MAX_MESSAGE_BYTES
    assert config["kernel_websocket_connection_class"] == "hisparse_model.app_socket.PageSocket"
    assert config["connection_dir_root"] == str(tmp_path)  # Voila's voila_* folder goes with it


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    started = App(tmp_path_factory.mktemp("hostile"), "--cull-idle", "5")
    yield started
    started.close()


def _socket(app: App, protocols=(V1,), host=None) -> websocket.WebSocket:
    kernel = app.kernel_of(app.page())
    return websocket.create_connection(
        f"ws://127.0.0.1:{app.port}/api/kernels/{kernel}/channels?session_id=hostile",
        subprotocols=list(protocols) or None, timeout=10, **({"host": host} if host else {}))


def _send(app, frame, binary=True):
    ws = _socket(app)
    (ws.send_binary if binary else ws.send)(frame)
    return ws


def _refused(app, **kw):
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        _socket(app, **kw)
    return refused.value.status_code


def _foreign_host_page(app):
    request = urllib.request.Request(app.url + "/", headers={"Host": "evil.example"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=ANSWER_S)
    return refused.value.code


HOSTILE = [
    # one 4 KB random binary frame on the page's socket: closed (1008), nothing read
    ("random frame", lambda app: _send(app, RANDOM_4K), None),
    # a frame past the message bound: tornado closes the socket before reading it whole
    ("large frame", lambda app: _send(app, b"\0" * (MAX_MESSAGE_BYTES + 1)), None),
    # a text frame on the v1 subprotocol (the page never sends one): closed
    ("text frame", lambda app: _send(app, "x" * 4096, binary=False), None),
    # no subprotocol: refused before the upgrade (it took the server down with no frame)
    ("no subprotocol", lambda app: _refused(app, protocols=()), 400),
    # a page load with a foreign Host (DNS rebinding): 403, as Jupyter's own server
    ("foreign Host page", _foreign_host_page, 403),
    # the kernel's socket with a foreign Host: 403 too
    ("foreign Host socket", lambda app: _refused(app, host="evil.example"), 403),
]


@pytest.mark.parametrize("client, status", [(c, s) for _, c, s in HOSTILE],
                         ids=[name for name, _, _ in HOSTILE])
def test_no_client_takes_the_server_down(app, client, status):
    """After each hostile client the app still answers GET / within ANSWER_S, its memory has
    not grown past GROWTH_MB, and what the client asked for was refused."""
    voila = app.voila()
    before = voila.memory_info().rss
    got = client(app)
    if status is not None:
        assert got == status
    time.sleep(WATCH_S)
    grown_mb = (voila.memory_info().rss - before) / 2**20
    t0 = time.monotonic()
    app.page()
    assert time.monotonic() - t0 < ANSWER_S
    assert grown_mb < GROWTH_MB, f"Voila grew {grown_mb:.0f} MB"


def test_the_page_protocol_still_works(app):
    """A well-formed message as the page's browser sends it gets its reply: the hardening
    refuses only what the browser never sends."""
    ws = _socket(app)
    ws.send_binary(_message())
    deadline = time.monotonic() + ANSWER_S
    while time.monotonic() < deadline:
        frame = ws.recv()
        if isinstance(frame, bytes) and b"kernel_info_reply" in frame:
            break
    else:
        pytest.fail("no kernel_info_reply")
    ws.close()


MAX_PAGES = 2  # the bound of the app below: two page loads start kernels, the third is refused
CULL_S = 600  # its --cull-idle: longer than the test, so only a page's own close frees one


def test_page_loads_past_max_pages_are_refused_until_one_goes(tmp_path):
    """A client loading the page in a loop gets --max-pages kernels, then 503 with one sentence
    naming the bound (no kernel started); once a page is closed (its beacon shuts its kernel
    down), a page load is served again.  Memory is bounded by the pages, not their loads."""
    app = App(tmp_path, "--max-pages", str(MAX_PAGES), "--cull-idle", str(CULL_S))
    try:
        kernel = app.kernel_of(app.page())
        app.page()
        kernels = [p for p in app.descendants() if "ipykernel" in " ".join(p.cmdline())]
        assert len(kernels) == MAX_PAGES
        for _ in range(3):  # refused each time, and nothing started by the refusals
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(app.url + "/", timeout=ANSWER_S)
            assert refused.value.code == 503
            body = refused.value.read().decode()
            assert "the app is serving 2 pages, its most at once (--max-pages 2)" in body
        assert len([p for p in app.descendants()
                    if "ipykernel" in " ".join(p.cmdline())]) == MAX_PAGES
        xsrf = "%032x" % random.getrandbits(128)  # the page's _xsrf cookie, sent back in the form
        closed = urllib.request.Request(  # what the page sends on beforeunload (a beacon)
            f"{app.url}/voila/api/shutdown/{kernel}", method="POST",
            data=urllib.parse.urlencode({"_xsrf": xsrf}).encode(),
            headers={"Cookie": f"_xsrf={xsrf}"})
        with urllib.request.urlopen(closed, timeout=ANSWER_S) as answer:
            assert answer.status == 204
        app.page()  # served: its place was freed
        assert "page refused: 2 page kernels run (--max-pages)" in app.log.read_text()
    finally:
        app.close()


def test_sockets_to_one_kernel_are_bounded(app):
    """MAX_SOCKETS sockets to one page's kernel open; one more is refused (429) before the
    upgrade; closing one lets the next in (300 sockets held 2,300 of the server's files)."""
    kernel = app.kernel_of(app.page())
    url = f"ws://127.0.0.1:{app.port}/api/kernels/{kernel}/channels?session_id="
    count = iter(range(1000))

    def connect():  # a session of its own each (one session's new socket closes its old one)
        return websocket.create_connection(url + f"many{next(count)}", subprotocols=[V1],
                                           timeout=10)

    sockets = [connect() for _ in range(MAX_SOCKETS)]
    try:
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            connect()
        assert refused.value.status_code == 429
        sockets.pop().close()
        deadline = time.monotonic() + ANSWER_S
        while True:  # the server counts the close when it has read it
            try:
                sockets.append(connect())
                break
            except websocket.WebSocketBadStatusException as exc:
                assert exc.status_code == 429 and time.monotonic() < deadline
                time.sleep(0.2)
    finally:
        for ws in sockets:
            ws.close()
    assert "kernel websocket refused: 4 already open to kernel" in app.log.read_text()


def test_sockets_opened_at_once_are_bounded_too(app):
    """Twenty sockets to one kernel opened at the same moment (threads released together):
    at most MAX_SOCKETS open (before, each handshake read the count before any had
    connected, and all twenty were accepted)."""
    import threading

    kernel = app.kernel_of(app.page())
    url = f"ws://127.0.0.1:{app.port}/api/kernels/{kernel}/channels?session_id=burst"
    start, opened, refused = threading.Barrier(20), [], []

    def one(i):
        start.wait()
        try:
            opened.append(websocket.create_connection(url + str(i), subprotocols=[V1],
                                                      timeout=30))
        except websocket.WebSocketBadStatusException as exc:
            refused.append(exc.status_code)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert len(opened) <= MAX_SOCKETS and len(opened) + len(refused) == 20
        assert set(refused) == {429}
    finally:
        for ws in opened:
            ws.close()
