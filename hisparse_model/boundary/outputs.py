"""Every file a command writes: checked before the work starts, written whole or not at all,
never in place of something that is not a regular file, never over one of its inputs.

* :func:`check_output` (before any work): the path is a new name in an existing, writable
  folder, or an existing *regular* file that can be written.  A device (``/dev/null``), a FIFO,
  a socket, a folder or a symbolic link is refused, since the atomic rename below would
  replace it with a file (as root, ``/dev/null`` itself); so is a path that is one of the
  command's inputs (the same file by inode, whatever the name), which writing would destroy.
* :func:`write_atomic`: a temporary file in the same folder, flushed and synced, then
  ``os.replace``; a full disk or any other failure removes the temporary file and is one line
  naming the flag (:class:`OutputError`), the old file left as it was.  :func:`write_all`
  does it for a command's outputs together: all written, or none (a stop signal waits for
  the renames).

Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import tempfile
import threading


class OutputError(ValueError):
    """An output the command cannot write (one line naming the flag and the path)."""


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words (None for a regular file)."""
    for test, word in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return None if stat.S_ISREG(mode) else "not a regular file"


def check_output(flag: str, path: str, inputs: dict[str, str | None] | None = None,
                 makes_folder: bool = False) -> None:
    """Refuse, in one line naming ``flag``, an output the command must not or cannot write;
    ``inputs``: the command's input files by flag (None: not given); ``makes_folder``: a
    missing folder is made when the file is written (``live --out``)."""
    if not path:
        raise OutputError(f"{flag} '': give a file name")
    if path == "-":  # not standard output: a file named "-" would be written in its place
        raise OutputError(f"{flag} -: writes a file (standard output carries the answer); "
                          "give a file name")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"{flag} {path}: {exc.strerror or exc}") from None
    if st is not None:
        kind = _kind(st.st_mode)
        if kind == "a folder":
            raise OutputError(f"{flag} {path}: is a folder; give a file name")
        if kind:
            raise OutputError(f"{flag} {path}: is {kind}; the answer is written as a new "
                              "regular file in its place, so give a regular file or a new name")
        if not os.access(path, os.W_OK):
            raise OutputError(f"{flag} {path}: not writable")
    for other, given in (inputs or {}).items():  # by inode, or by path for a new name
        if not given:
            continue
        if given == "-" and _is_stdin(path):  # standard input redirected from this file
            raise OutputError(f"{flag} {path}: is the {other} file (standard input, "
                              "redirected from it); writing it would destroy it (give another "
                              "file name)")
        if given != "-" and (
                _same(path, given) or os.path.realpath(path) == os.path.realpath(given)):
            raise OutputError(f"{flag} {path}: is the {other} file; writing it would "
                              "destroy it (give another file name)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        if not makes_folder:
            raise OutputError(f"{flag} {path}: no folder {folder}")
        while not os.path.isdir(folder):  # the folder made first must be made in this one
            folder = os.path.dirname(folder)
    if not os.access(folder, os.W_OK | os.X_OK) or not _can_create_in(folder):
        raise OutputError(f"{flag} {path}: the folder {folder} is not writable")


def _can_create_in(folder: str) -> bool:
    """Whether a file can really be made in ``folder`` (a read-only file system, or /proc,
    passes ``os.access`` for root): one is made and removed, as the writer makes its own."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".hisparse-", suffix=".probe", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(tmp)
    return True


def _is_stdin(path: str) -> bool:
    """Whether standard input is the file at ``path`` (``< path``: same device and inode)."""
    try:
        a, b = os.fstat(0), os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(a.st_mode) and (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _same(a: str, b: str) -> bool:
    """Whether two paths name one file (by device and inode; False if either is missing)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def write_atomic(flag: str, path: str, text: str, makes_folder: bool = False) -> None:
    """Write ``text`` to ``path`` whole or not at all (:func:`check_output` first)."""
    write_all([(flag, path, text)], makes_folder)


# the signals that end a command (exits.py): held back while a group of outputs is renamed
HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def write_all(outputs: list[tuple[str, str, str]], makes_folder: bool = False) -> None:
    """Write each ``(flag, path, text)`` whole, all or none: every text goes to a temporary
    file beside its path first (a failure removes them all, nothing renamed), then the
    renames run with the ending signals held back, so a SIGTERM arriving meanwhile acts
    after the last rename (both files, or neither, never one)."""
    temps: list[tuple[str, str, str]] = []  # (flag, path, temporary file)
    try:
        for flag, path, text in outputs:
            check_output(flag, path, makes_folder=makes_folder)
            folder = os.path.dirname(os.path.abspath(path))
            if makes_folder:
                os.makedirs(folder, exist_ok=True)
            try:
                fd, tmp = tempfile.mkstemp(prefix=".hisparse-", suffix=".tmp", dir=folder)
                temps.append((flag, path, tmp))
                os.fchmod(fd, _mode_for(path))  # mkstemp's 0600 would outlive the rename
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
                raise OutputError(f"{flag} {path}: " + (
                    "the disk is full; nothing was written" if full
                    else f"{exc.strerror or exc}")) from None
        with _signals_held():
            while temps:
                flag, path, tmp = temps[0]
                try:
                    os.replace(tmp, path)
                except OSError as exc:
                    raise OutputError(f"{flag} {path}: {exc.strerror or exc}") from None
                temps.pop(0)
    finally:
        for _, _, tmp in temps:
            try:
                os.remove(tmp)
            except OSError:
                pass


@contextlib.contextmanager
def _signals_held():
    """:data:`HELD` signals arriving inside are acted on at its end, as they would have been
    (each one's own handler, or its default), once.  Python runs signal handlers in the main
    thread only, so the handlers are swapped there (a mask would hold them back in this
    thread only, and another thread of the process would take them); in any other thread a
    signal cannot interrupt the renames anyway."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    before = {sig: signal.getsignal(sig) for sig in HELD}
    for sig, handler in before.items():
        if handler not in (signal.SIG_IGN, None):
            signal.signal(sig, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        for sig, handler in before.items():
            if handler not in (signal.SIG_IGN, None):
                signal.signal(sig, handler)
        if came:
            os.kill(os.getpid(), came[0])  # now, to its own handler (or its default)


def _mode_for(path: str) -> int:
    """The permission bits the written file takes: the replaced file's own, or a new file's
    (0666 less the umask), as ``open(path, "w")`` would give it."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask
