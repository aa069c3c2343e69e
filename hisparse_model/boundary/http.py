"""One HTTP fetch for every URL the package reads (a server's ``/metrics``).

What a careful operator expects of a tool pointed at a production server:

* ``http://`` and ``https://`` only, a host named, no whitespace or control characters (a
  URL pasted with its newline is refused, not sent);
* one GET, no redirect followed: a 3xx is refused naming where it points (a /metrics URL
  that moved is given as its new address, so what is read is what the answer names);
* one deadline for the whole request (connect, headers, body): a server that sends a byte a
  second is cut off at :data:`~.limits.HTTP_SECONDS`, not timed out per read;
* a body bound (:data:`~.limits.METRICS`), counted as it comes;
* a refusal is one :class:`~.files.InputError` line naming the flag and the URL (a
  ``user:password@`` in it shown as ``***@``: :func:`redacted`).
"""

from __future__ import annotations

import http.client
import re
import socket
import threading
import time
import urllib.parse

from .files import InputError, over
from .limits import CHUNK, HTTP_SECONDS, Bound

_UNSAFE = re.compile(r"[\x00-\x20\x7f]")  # whitespace and control characters


_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")  # scheme://user:password@


def redacted(url: str) -> str:
    """``url`` as an answer or a refusal may show it: a ``user:password@`` before its host
    written ``***@`` (a credential is never echoed; this fetch sends none)."""
    return _USERINFO.sub(r"\1***@", url)


def check_url(url: str, flag: str) -> urllib.parse.SplitResult:
    """The URL's parts, or one line saying why it is not a URL this fetch reads."""
    shown = ascii(redacted(url)) if _UNSAFE.search(url) else redacted(url)
    if _UNSAFE.search(url):
        raise InputError(f"{flag} {shown}: a URL holds no spaces or control characters")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (raises on a port that is not a number 0-65535)
    except ValueError as exc:
        raise InputError(f"{flag} {shown}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise InputError(f"{flag} {shown}: give an http:// or https:// URL")
    if not parts.hostname:
        raise InputError(f"{flag} {shown}: the URL names no host")
    return parts


def fetch(url: str, flag: str, bound: Bound, seconds: float = HTTP_SECONDS) -> bytes:
    """The body of one GET of ``url`` (module docstring: the refusals)."""
    parts = check_url(url, flag)
    where = f"{flag} {redacted(url)}"
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=seconds)
    deadline = time.monotonic() + seconds
    held: list = []  # the connection's socket, which the deadline shuts down
    timer = threading.Timer(seconds, _cut, (held,))
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        held.append(conn.sock)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("GET", target, headers={"Accept": "text/plain"})
        response = conn.getresponse()
        if 300 <= response.status < 400:
            to = redacted(response.getheader("Location", "(no Location)"))
            raise InputError(f"{where}: HTTP {response.status} redirects to {to:.200}; not "
                             "followed: give that URL itself")
        if response.status != 200:
            raise InputError(f"{where}: HTTP {response.status} {response.reason}")
        lengths = {v.strip() for v in response.headers.get_all("Content-Length") or ()}
        if len(lengths) > 1:  # RFC 9112 6.3: a message framed two ways is refused, not guessed
            raise InputError(f"{where}: Content-Length headers that disagree "
                             f"({', '.join(sorted(lengths))[:100]}); the body cannot be framed")
        body, total = [], 0
        while piece := response.read1(CHUNK):  # what has come: the deadline is checked
            total += len(piece)
            if total > bound.bytes:
                raise over(bound, where)
            body.append(piece)
            if time.monotonic() > deadline:
                raise TimeoutError
        if time.monotonic() >= deadline:  # the deadline shut the socket: the body is cut
            raise TimeoutError
        if response.length:  # fewer bytes than its Content-Length said
            raise InputError(f"{where}: the body ended {response.length:,} bytes short of "
                             "its Content-Length")
        return b"".join(body)
    except InputError:
        raise
    except (TimeoutError, socket.timeout):
        raise InputError(f"{where}: no whole answer within {seconds:g} s (the deadline for "
                         "the whole request)") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if time.monotonic() >= deadline:
            raise InputError(f"{where}: no whole answer within {seconds:g} s (the deadline "
                             "for the whole request)") from None
        text = (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__).splitlines()
        raise InputError(f"{where}: {text[0][:200] if text else type(exc).__name__}") from None
    finally:
        timer.cancel()
        conn.close()


def _cut(held: list) -> None:
    """At the deadline: shut the connection's socket, waking the read that waits on it
    (the response holds the socket after the connection lets go of it)."""
    for sock in held:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
