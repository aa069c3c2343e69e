"""How a command ends when the trouble is not its input: an interrupt or a closed stream.

``hisparse ...`` and ``python -m hisparse_model.bench`` run their
``main`` through :func:`run`, so that

* Ctrl-C (SIGINT) is one line on stderr and exit status 130 (128 + SIGINT, the
  shell's own status for it), never a KeyboardInterrupt traceback;
* SIGTERM and SIGHUP (``kill``, a closed terminal) are one line and 128 + the signal
  (143, 129) after the command's own clean-up ran: they are raised as :class:`Terminated`,
  so every ``finally`` runs (forked workers killed, temporary files removed); a signal
  ignored when the command started (``nohup``) stays ignored;
* a reader that leaves (``| head -1``) changes no status: standard output goes quiet
  (:class:`QuietOutput`: its descriptor then writes to /dev/null) and the command runs to
  its own status, so ``check --check ... | head -1`` still exits 1 for a crash (before, the
  status was 0 or 1 by how much of the answer the pipe held when the reader left); an error
  line written to a pipe nobody reads still gives its status (2, not 1);
* standard output closed (``>&-``) is refused before anything runs: the answer would be
  lost, so the status is 2 with one line on stderr;
* standard output on a full disk (``> /dev/full``) or a failing device: one line on stderr,
  status 2 (the answer was not written whole);
* standard error closed (``2>&-``) changes no status: the error lines go nowhere, and
  never onto standard output.
"""

from __future__ import annotations

import errno
import importlib
import os
import signal
import sys

EXIT_BAD_INPUT = 2  # as cli.EXIT_BAD_INPUT
EXIT_INTERRUPTED = 130  # 128 + SIGINT (2)
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # raised as Terminated


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: raised where the command is, so its clean-up runs.  A
    BaseException, as KeyboardInterrupt: no ``except Exception`` takes it for an error."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminate(signum, _frame):
    for sig in ENDING_SIGNALS:  # once: a second signal must not cut the clean-up short
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


def catch_ending_signals() -> dict:
    """SIGTERM and SIGHUP raise :class:`Terminated` from now on (in the main thread only,
    where Python runs handlers), except one ignored already (``nohup``); returns the
    handlers they had, for :func:`restore`."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    before = {sig: signal.getsignal(sig) for sig in ENDING_SIGNALS}
    for sig, handler in before.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, _terminate)
    return before


def restore(handlers: dict) -> None:
    """The handlers :func:`catch_ending_signals` found, back in place."""
    for sig, handler in handlers.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def one_line(text: str) -> str:
    """``text`` as one printable line: a newline, tab or other control character in it (a
    path or value the user gave) written as its Python escape (``\\n``), so a refusal is
    always one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def say(line: str) -> None:
    """One line on stderr, if anyone can read it (a closed or broken stderr is no error)."""
    try:
        sys.stderr.write(one_line(line) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # broken pipe, closed file, no stderr
        pass


def silence(stream) -> None:
    """Point a broken stream's descriptor at /dev/null, so Python's exit flush finds no
    reader gone (else it prints "Exception ignored" and exits 120)."""
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError, AttributeError):  # pragma: no cover - no descriptor
        pass


class QuietOutput:
    """Standard output that goes quiet when its reader leaves: a write or flush meeting a
    broken pipe points the descriptor at /dev/null (:func:`silence`) and the command goes on
    to its own exit status; everything else is the wrapped stream's."""

    def __init__(self, stream):
        self._stream, self.reader_left = stream, False

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._left()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._left()

    def _left(self) -> None:
        self.reader_left = True
        silence(self._stream)  # what is buffered and what comes next goes to /dev/null

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _command(prog: str, argv: list[str]) -> str:
    """``hisparse simulate``: the program and its sub-command, if any."""
    sub = next((a for a in argv if not a.startswith("-")), None)
    return f"{prog} {sub}" if sub and " " not in sub and len(sub) < 40 else prog


def run(prog: str, module, argv: list[str] | None = None) -> int:
    """``module.main(argv)``'s exit status (``module``: its name, imported inside, so an
    interrupt while importing is one line too; or the ``main`` function itself), with
    interrupts and streams handled as above."""
    argv = sys.argv[1:] if argv is None else argv
    if sys.stderr is None:  # started with 2>&-: print(file=None) would write to stdout
        sys.stderr = open(os.devnull, "w")
    if sys.stdout is None:  # started with >&-
        say(f"{_command(prog, argv)}: error: standard output is closed: the answer would "
            "be lost (redirect it to a file or /dev/null instead)")
        return EXIT_BAD_INPUT
    if hasattr(sys.stdout, "reconfigure"):  # PYTHONIOENCODING=ascii: "µs" as "\xb5s"
        sys.stdout.reconfigure(errors="backslashreplace")
    handlers = catch_ending_signals()
    stdout = sys.stdout
    sys.stdout = QuietOutput(stdout)
    try:
        main = importlib.import_module(module).main if isinstance(module, str) else module
        status = main(argv)
        sys.stdout.flush()
    except KeyboardInterrupt:
        say(f"{_command(prog, argv)}: interrupted (Ctrl-C); nothing more is written")
        status = EXIT_INTERRUPTED
    except Terminated as stop:
        say(f"{_command(prog, argv)}: stopped by {signal.Signals(stop.signum).name}; nothing "
            "more is written")
        status = 128 + stop.signum
    except BrokenPipeError:  # a pipe other than stdout's (stdout goes quiet, above)
        status = 0
    except OSError as exc:  # standard output on a full disk (> /dev/full) or a failing device
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG):
            raise
        say(f"{_command(prog, argv)}: error: standard output: {exc.strerror}; the answer was "
            "not written whole")
        silence(sys.stdout)
        status = EXIT_BAD_INPUT
    finally:
        restore(handlers)
        sys.stdout = stdout
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            silence(stream)
    return status
