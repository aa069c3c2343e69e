"""Notebooks run headless for the tests, their kernels' coverage data saved before they stop.

A kernel started under ``coverage run`` (``patch = ["subprocess"]``) writes its data when it
exits.  nbclient stops a kernel by asking it to shut down and, if it has not gone after
jupyter_client's short grace period, by killing it: on a loaded machine a kernel killed that
way wrote nothing, and the lines only it ran (notebook 7's ``risk_view``) went missing from
the coverage gate once in three full runs (issue 42).  :class:`FlushingClient` asks the
kernel to save its data, and waits for the answer, before the shutdown starts.
"""

from __future__ import annotations

import os

from nbclient import NotebookClient
from nbclient.util import ensure_async

# A hang guard for one cell, not a measure of it: notebook 7's traffic cell takes about 15 s
# on 2 idle cores and went over 60 s beside other CPU-heavy work (issue 42), so a timeout
# near a cell's real time fails a loaded machine, not a slow notebook.  What the notebooks
# take is measured, never asserted (tests/test_notebooks.py writes it down).
CELL_TIMEOUT = 600  # seconds

# run in the kernel after its last cell; nothing when the kernel is not measured
SAVE_COVERAGE = ("import coverage as _hs_coverage\n"
                 "_hs_cov = _hs_coverage.Coverage.current()\n"
                 "if _hs_cov is not None:\n"
                 "    _hs_cov.save()\n"
                 "del _hs_coverage, _hs_cov\n")


class FlushingClient(NotebookClient):
    """A NotebookClient whose kernel saves its coverage data before it is shut down."""

    saved = False  # whether the kernel answered the save (tests/test_notebook_hygiene.py)

    async def _async_cleanup_kernel(self) -> None:
        if self.kc is not None and self.km is not None and await ensure_async(
                self.km.is_alive()):
            msg_id = self.kc.execute(SAVE_COVERAGE, silent=True, store_history=False)
            reply = await self.async_wait_for_reply(msg_id)
            self.saved = bool(reply and reply["content"]["status"] == "ok")
        await super()._async_cleanup_kernel()


def execute(nb, path: str, timeout: int) -> FlushingClient:
    """Run every cell of ``nb`` (read from ``path``) in a python3 kernel started in the
    notebook's folder; the client, its kernel stopped and its coverage data saved."""
    client = FlushingClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": os.path.dirname(path)}})
    client.execute()
    return client
