"""``hisparse app`` without a browser: how it ends (its page: tests/test_browser.py)."""

import argparse
import os
import signal
import sys
import tempfile
import threading

import pytest

from hisparse_model import app

ARGS = argparse.Namespace(port=8866, ip="127.0.0.1", no_browser=True)


def _serve_with(monkeypatch, code: str) -> None:
    """Make ``run`` start ``python -c code`` in place of Voila (same process group handling)."""
    monkeypatch.setattr(app, "voila_command", lambda nb, port, ip, browser, **kw: [
        sys.executable, "-c", code])


def test_a_server_that_ends_by_itself_gives_its_status(monkeypatch, capsys):
    """When the server exits on its own, run() says how in one line and exits 3 (nothing can
    be served; its own status 4 is in no exit table); it never listened, so the app never said
    it was serving."""
    _serve_with(monkeypatch, "raise SystemExit(4)")
    assert app.run(ARGS) == 3
    out = capsys.readouterr()
    assert "serving the HiSparse dashboards" not in out.out
    assert out.err == (
        "app: the dashboard server (Voila) exited with status 4; nothing is served any more\n")


def test_sigterm_stops_the_server_and_exits_0(monkeypatch, capsys, tmp_path):
    """SIGTERM to the app stops the server's process group, exits 0 and restores the handler."""
    pid_file = tmp_path / "pid"
    _serve_with(monkeypatch, f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid()));"
                             " time.sleep(60)")
    before = signal.getsignal(signal.SIGTERM)

    def terminate_once_serving():
        for _ in range(600):  # up to 30 s for the stand-in server to start
            if pid_file.exists() and pid_file.read_text():
                break
            threading.Event().wait(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate_once_serving, daemon=True).start()
    assert app.run(ARGS) == 0
    assert "app: stopping" in capsys.readouterr().out
    server = int(pid_file.read_text())
    try:
        os.kill(server, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive, "the stand-in server outlived the app"
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("step", ["write_notebook", "write_config", "voila_command"])
def test_a_stop_while_the_app_starts_is_a_clean_stop(monkeypatch, capsys, tmp_path, step):
    """SIGTERM, SIGHUP or Ctrl-C before Voila runs (while the app writes its notebook or
    config): exit 0 and "app: stopping", as once it serves, its folder gone; before, a stop
    in those 1-2 s was reported as an interrupt (Ctrl-C, 130), SIGTERM included."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None  # mkdtemp reads TMPDIR again

    def stopped(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # the app's handler raises KeyboardInterrupt
        raise AssertionError("the stop signal did not stop the app")

    monkeypatch.setattr(app, step, stopped)
    try:
        assert app.run(ARGS) == 0
    finally:
        tempfile.tempdir = None
    assert "app: stopping" in capsys.readouterr().out
    assert not list(tmp_path.glob("hisparse-app-*"))


def test_without_voila_it_says_so_exit_3(monkeypatch, capsys):
    """Without Voila installed: one line saying how to install it, exit status 3."""
    real = app.importlib.util.find_spec
    monkeypatch.setattr(app.importlib.util, "find_spec",
                        lambda name, *a: None if name == "voila" else real(name, *a))
    assert app.run(ARGS) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Voila is not installed" in err


def test_voila_culls_kernels_whose_page_is_gone():
    """A closed page's kernel is culled after --cull-idle seconds; an open page's never is."""
    cmd = app.voila_command("nb.ipynb", 8866, "127.0.0.1", False, cull_idle_s=5)
    assert "--MappingKernelManager.cull_idle_timeout=5" in cmd
    assert "--MappingKernelManager.cull_interval=5" in cmd  # min(10, 5): looked at that often
    assert "--MappingKernelManager.cull_connected=False" in cmd
    default = app.voila_command("nb.ipynb", 8866, "127.0.0.1", False)
    assert f"--MappingKernelManager.cull_idle_timeout={app.CULL_IDLE_S}" in default
    assert f"--MappingKernelManager.cull_interval={app.CULL_INTERVAL_S}" in default
