"""``hisparse app``: every dashboard on one web page, served by Voilà.

For people who will not open JupyterLab: every notebook's dashboard in tabs
on one page (:func:`hisparse_model.views.page.app_page`), with no code shown.
The command writes a one-cell notebook into a temporary folder and runs Voilà
on it in a child process, bound to 127.0.0.1 unless ``--ip`` says otherwise
(anyone who can reach the address can use the page and its kernel).  Ctrl-C
(or SIGTERM) stops the server and its kernels and exits with status 0.  A port
already in use is bad input: one line naming ``--port`` and exit status 2, before
anything starts; "serving at ..." is printed only once Voilà accepts connections.

Kernels: each page load starts one kernel.  Voilà 0.5's page asks the server to shut
its kernel down when it closes (a ``beforeunload`` beacon to ``voila/api/shutdown``);
a page that goes without it (a crashed tab, a dropped network) is culled by the kernel
manager: a kernel with no open page, idle for ``--cull-idle`` seconds (default
:data:`CULL_IDLE_S`), is shut down, checked every :data:`CULL_INTERVAL_S` seconds.  A
kernel with its page still open is never culled (``cull_connected=False``), so any number of
page loads leave at most one kernel per open page; and at most ``--max-pages`` (default
:data:`DEFAULT_MAX_PAGES`) run at once: a page load past it is answered 503 with one sentence
saying why, no kernel started (:mod:`hisparse_model.app_kernels`).

One lifecycle: Voilà and its kernels die with the app, however it ends.  Ctrl-C, SIGTERM or
SIGHUP stop Voilà (its kernels shut down) and remove the temporary folder (the notebook,
Voilà's ``voila_*`` connection files inside it); a SIGHUP ignored when the app started
(``nohup``) stays ignored.  If the app dies without doing that (SIGKILL, a crash), Linux
sends Voilà SIGKILL (``prctl(PR_SET_PDEATHSIG)``, :func:`~hisparse_model.answers.forked.
die_with_parent`), each kernel ends itself within a second of Voilà (ipykernel's parent
poller), and a janitor (:data:`JANITOR`, a process of its own session that holds the read end
of a pipe only the app writes to) sees the pipe close and removes the folder.

The server, hardened (:func:`server_config`): a kernel websocket carries only what the page's
browser sends (:mod:`hisparse_model.app_socket`: the v1 subprotocol, well-formed messages, at
most :data:`~hisparse_model.app_socket.MAX_MESSAGE_BYTES`), and on a loopback ``--ip`` (the
default) a request whose ``Host`` is not this machine (``localhost`` or a loopback address) is
refused with 403, as Jupyter's own server does (a web page elsewhere cannot reach the kernel
through a DNS name pointed at 127.0.0.1); on any other ``--ip`` every ``Host`` is served.
"""

from __future__ import annotations

import functools
import importlib.util
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from .answers.forked import die_with_parent
from .boundary.numbers import ascii_int

# The bound on page kernels (app_kernels.py needs jupyter_server; the CLI reads these without)
DEFAULT_MAX_PAGES = 16  # page kernels at once (~4 GB at most): app_kernels.PageKernels
MAX_MAX_PAGES = 1000  # the most --max-pages accepts (each page kernel is a process)


APP_CELL = ("from hisparse_model.views.page import app_page\n"
            "page, dashboards = app_page()\n"
            "page")
DEFAULT_PORT = 8866  # Voilà's own default
EXIT_UNAVAILABLE = 3  # as the command line's other "cannot run here" errors
EXIT_BAD_INPUT = 2  # as the command line's other bad input: here a port already in use
STOP_WAIT_S = 15  # seconds for Voilà to stop its kernels before it is killed
LISTEN_POLL_S = 0.2  # how often to look whether Voilà has opened its port
CULL_IDLE_S = 60  # a kernel whose page is gone, idle this long, is shut down
CULL_INTERVAL_S = 10  # how often the kernel manager looks for such kernels
MAX_CULL_IDLE_S = 7 * 24 * 3600  # a week: longer is never in practice
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # stop the app as Ctrl-C does
# The janitor: reads the pipe until the app closes it (or dies); unless the app said "done",
# kills the process groups it was told (Voila's) and removes the folder (argv[1]).  Standard
# library only, so that it starts whatever state the package is in.
JANITOR = """import os, shutil, signal, sys
told = sys.stdin.buffer.read().split()
if b"done" not in told:
    for group in told:
        try:
            os.killpg(int(group), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    shutil.rmtree(sys.argv[1], ignore_errors=True)
"""


def add_parser(subparsers) -> None:
    """The ``app`` sub-command and its flags."""
    p = subparsers.add_parser("app", help="serve every dashboard as one web page (Voila)")
    p.add_argument("--port", type=ascii_int, default=DEFAULT_PORT,
                   help=f"port to serve on (default: {DEFAULT_PORT})")
    p.add_argument("--ip", default="127.0.0.1",
                   help="address to bind (default: 127.0.0.1, this machine only)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.add_argument("--cull-idle", type=ascii_int, default=CULL_IDLE_S, metavar="SECONDS",
                   help="shut down a kernel whose page is closed after this many idle seconds "
                        f"(default: {CULL_IDLE_S})")
    p.add_argument("--max-pages", type=ascii_int, default=DEFAULT_MAX_PAGES, metavar="N",
                   help="pages served at once, each with its own kernel; a page load past it "
                        f"is answered 503 (default: {DEFAULT_MAX_PAGES})")
    p.set_defaults(run_app=run)


def write_notebook(directory: str) -> str:
    """The app's notebook (one cell showing the page) in ``directory``; returns its path."""
    import nbformat  # the notebooks extra; imported here so the CLI starts without it

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells.append(nbformat.v4.new_code_cell(APP_CELL))
    path = os.path.join(directory, "hisparse_dashboards.ipynb")
    nbformat.write(nb, path)
    return path


def loopback(ip: str) -> bool:
    """Whether ``ip`` (an address or a name) is this machine only: every address it names is
    a loopback address."""
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(ip, None)
    except (socket.gaierror, UnicodeError, ValueError):
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback
                               for i in infos)


def server_config(directory: str, ip: str, max_pages: int = DEFAULT_MAX_PAGES) -> dict:
    """Voilà's configuration beyond its command line (``voila.json`` in its working folder):
    the page's websocket connection class, tornado's bound on a websocket message, the
    ``Host`` check on a loopback ``ip``, Voilà's connection files inside ``directory``, and
    at most ``max_pages`` page kernels at once (:mod:`hisparse_model.app_kernels`)."""
    from .app_socket import MAX_MESSAGE_BYTES  # needs jupyter_server: the notebooks extra

    return {"VoilaConfiguration": {
        "multi_kernel_manager_class": "hisparse_model.app_kernels.PageKernels"},
            "PageKernels": {"max_kernels": max_pages},
            "Voila": {
        "connection_dir_root": directory,
        "kernel_websocket_connection_class": "hisparse_model.app_socket.PageSocket",
        "tornado_settings": {
            "websocket_max_message_size": MAX_MESSAGE_BYTES,
            "allow_remote_access": not loopback(ip),  # Voila sets True; Jupyter: False here
            "local_hostnames": ["localhost"],
        }}}


def write_config(directory: str, ip: str, max_pages: int = DEFAULT_MAX_PAGES) -> str:
    """:func:`server_config` as ``voila.json`` in ``directory`` (Voilà's working folder, the
    first place it reads configuration from); returns its path."""
    path = os.path.join(directory, "voila.json")
    with open(path, "w") as f:
        json.dump(server_config(directory, ip, max_pages), f)
    return path


def voila_command(notebook: str, port: int, ip: str, open_browser: bool,
                  cull_idle_s: int = CULL_IDLE_S) -> list[str]:
    """The Voilà command line that serves ``notebook``, culling kernels whose page is gone."""
    interval = max(1, min(CULL_INTERVAL_S, cull_idle_s))
    return [sys.executable, "-m", "voila", notebook, f"--port={port}", f"--Voila.ip={ip}",
            "--Voila.port_retries=0", "--theme=light",
            f"--Voila.open_browser={open_browser}",
            f"--MappingKernelManager.cull_idle_timeout={cull_idle_s}",
            f"--MappingKernelManager.cull_interval={interval}",
            "--MappingKernelManager.cull_connected=False",  # an open page keeps its kernel
            "--MappingKernelManager.cull_busy=False",
            # Lab extensions that are not for this page (they target Lab, not Voila's front end)
            "--VoilaConfiguration.extension_denylist=jupyterlab-jupytext",
            "--VoilaConfiguration.extension_denylist=@voila-dashboards/jupyterlab-preview"]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to Voilà's process group (server and kernels), then SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def port_in_use(ip: str, port: int) -> bool:
    """Whether ``ip:port`` cannot be bound here (another server holds it)."""
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Voilà's server binds
        try:
            sock.bind((ip, port))
        except OSError:
            return True
    return False


def _wait_listening(proc: subprocess.Popen, ip: str, port: int) -> bool:
    """Until Voilà accepts connections on ``ip:port`` (True) or exits first (False)."""
    host = "127.0.0.1" if ip in ("0.0.0.0", "") else "::1" if ip == "::" else ip
    while proc.poll() is None:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(LISTEN_POLL_S)
    return False


def _interrupt(signum, frame):
    for sig in STOP_SIGNALS:  # once: a second signal must not cut the stop short
        if signal.getsignal(sig) is _interrupt:
            signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def _voila_ended(code: int) -> int:
    """The app's status when Voila ends by itself (the app was not stopped: then nothing is
    served any more): one line saying how, and ``EXIT_UNAVAILABLE`` (was Voila's raw status:
    247 for a SIGKILL, in no exit table; 0 for a SIGTERM it took cleanly)."""
    how = (f"was killed by {signal.Signals(-code).name}" if code < 0 and -code in
           signal.valid_signals() else "stopped" if code == 0 else f"exited with status {code}")
    print(f"app: the dashboard server (Voila) {how}; nothing is served any more",
          file=sys.stderr, flush=True)
    return EXIT_UNAVAILABLE


def _janitor(directory: str) -> subprocess.Popen:
    """The janitor for ``directory`` (:data:`JANITOR`), in a session of its own: no signal
    meant for the app's terminal or process group reaches it."""
    return subprocess.Popen([sys.executable, "-c", JANITOR, directory], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _dismiss(janitor: subprocess.Popen) -> None:
    """Tell the janitor all is cleaned up, and wait for it to exit."""
    try:
        janitor.stdin.write(b"done\n")
        janitor.stdin.close()
    except OSError:  # pragma: no cover - it died already
        pass
    janitor.wait()


def _catch_stop_signals() -> dict:
    """SIGTERM and SIGHUP raise KeyboardInterrupt (one ignored already stays ignored);
    returns the handlers they had."""
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig, handler in before.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, _interrupt)
    return before


def run(args) -> int:
    """Serve until Ctrl-C; 0 after a clean stop, Voilà's status if it ends by itself."""
    if importlib.util.find_spec("voila") is None:
        print('app: Voila is not installed here (pip install -e ".[notebooks]")',
              file=sys.stderr)
        return EXIT_UNAVAILABLE
    if not 1 <= args.port <= 65535:
        print(f"app: --port {args.port}: a TCP port is 1 to 65535", file=sys.stderr)
        return EXIT_BAD_INPUT
    cull = getattr(args, "cull_idle", CULL_IDLE_S)
    if not 1 <= cull <= MAX_CULL_IDLE_S:  # Jupyter reads 0 or less as "never cull"
        print(f"app: --cull-idle {cull}: 1 to {MAX_CULL_IDLE_S} seconds (0 or less would keep "
              "every closed page's kernel forever)", file=sys.stderr)
        return EXIT_BAD_INPUT
    pages = getattr(args, "max_pages", DEFAULT_MAX_PAGES)
    if not 1 <= pages <= MAX_MAX_PAGES:
        print(f"app: --max-pages {pages}: 1 to {MAX_MAX_PAGES} (each page runs a kernel, a "
              "process of its own)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        socket.getaddrinfo(args.ip, args.port)
    except (socket.gaierror, UnicodeError, ValueError) as exc:  # ValueError: a NUL in it
        print(f"app: --ip {args.ip!r}: not an address of this machine ({exc})", file=sys.stderr)
        return EXIT_BAD_INPUT
    if port_in_use(args.ip, args.port):
        print(f"app: --port {args.port}: {args.ip}:{args.port} is already in use "
              "(another server holds it); choose another port", file=sys.stderr)
        return EXIT_BAD_INPUT
    previous = _catch_stop_signals()
    try:
        return _serve(args, cull, pages)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP, at any moment from here on
        print("app: stopping", flush=True)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _serve(args, cull: int, pages: int) -> int:
    """Voilà in its temporary folder, watched by the janitor, until it ends or is stopped
    (KeyboardInterrupt, raised by a stop signal, goes to :func:`run` once all is cleaned)."""
    tmp, janitor, proc = tempfile.mkdtemp(prefix="hisparse-app-"), None, None
    try:
        janitor = _janitor(tmp)
        cmd = voila_command(write_notebook(tmp), args.port, args.ip, not args.no_browser,
                            cull_idle_s=cull)
        write_config(tmp, args.ip, pages)
        proc = subprocess.Popen(cmd, cwd=tmp, start_new_session=True,
                                preexec_fn=functools.partial(die_with_parent, os.getpid()))
        janitor.stdin.write(f"{proc.pid}\n".encode())  # its process group, to kill
        janitor.stdin.flush()
        if _wait_listening(proc, args.ip, args.port):  # said only once it is true
            host = f"[{args.ip}]" if ":" in args.ip else args.ip  # an IPv6 literal
            print(f"serving the HiSparse dashboards at http://{host}:{args.port}/ "
                  "(Ctrl-C stops)", flush=True)
        return _voila_ended(proc.wait())
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)
        if janitor is not None:
            _dismiss(janitor)
