"""The app's kernels, bounded: at most ``--max-pages`` page kernels at once.

Each page load starts a kernel (a Python process of about 150-250 MB once the page is drawn),
and a kernel whose page is gone lives until it is culled (``--cull-idle`` seconds).  Without a
bound, one client that loads the page in a loop starts kernels faster than they are culled,
and the machine's memory goes with them.  :class:`PageKernels` is Voilà's kernel manager
(``VoilaConfiguration.multi_kernel_manager_class``, set by :func:`hisparse_model.app.
server_config`) refusing a page load while :attr:`PageKernels.max_kernels` kernels run: the
page answers ``503`` with one sentence saying why and what to do, no kernel starts, and the
server and the pages already open go on.  A page closed (its kernel shut down by the page's
own beacon, or culled) frees its place.

Needs jupyter_server (the notebooks extra): imported only by Voilà, in the app's server.
"""

from __future__ import annotations

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from tornado import web
from traitlets import Int

from .app import DEFAULT_MAX_PAGES  # page kernels at once: ~4 GB at most


def refusal(count: int) -> str:
    """The sentence a page load gets while ``count`` page kernels run."""
    return (f"the app is serving {count} pages, its most at once (--max-pages {count}); "
            "close one, wait for a closed page's kernel to be culled, or restart the app "
            "with a larger --max-pages")


class PageKernels(AsyncMappingKernelManager):
    """jupyter_server's kernel manager, starting no kernel past :attr:`max_kernels`."""

    max_kernels = Int(DEFAULT_MAX_PAGES, config=True,
                      help="page kernels at once; a page load past it is answered 503")

    starting = Int(0, help="kernels being started now (not yet in list_kernel_ids)")

    async def start_kernel(self, *args, **kwargs):
        """A new kernel, or HTTP 503 (no kernel started) while :attr:`max_kernels` run or are
        starting (page loads at the same moment are counted before either kernel is up)."""
        if kwargs.get("kernel_id") is not None:  # an existing kernel's restart: not a page
            return await super().start_kernel(*args, **kwargs)
        running = len(self.list_kernel_ids()) + self.starting
        if running >= self.max_kernels:
            self.log.warning("page refused: %d page kernels run (--max-pages)", running)
            raise web.HTTPError(503, reason=refusal(self.max_kernels))
        self.starting += 1
        try:
            return await super().start_kernel(*args, **kwargs)
        finally:
            self.starting -= 1
