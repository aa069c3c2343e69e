"""Every dashboard on one page, in tabs: what ``hisparse app`` serves."""

from __future__ import annotations

import ipywidgets as W

from .engine_runs import recordings_dashboard
from .exposure import SERVE_DEFAULT, exposure_dashboard
from .first_request import startup_dashboard
from .fixes import versions_dashboard
from .off_by_one import off_by_one_dashboard
from .primer import where_in_vllm
from .traffic import traffic_dashboard
from .two_gpus import two_gpus_dashboard

TABS = (
    ("1 · off-by-one", off_by_one_dashboard),
    ("2 · start-up", startup_dashboard),
    ("3 · versions", versions_dashboard),
    ("4 · vs engine", recordings_dashboard),
    ("5 · your traffic", traffic_dashboard),
    ("6 · two GPUs", two_gpus_dashboard),
    ("7 · is my server exposed?", exposure_dashboard),
)
# each tab opens where its notebook opens (the notebook's own call: tests/test_widgets.py
# reads the notebooks and compares)
OPENINGS = {
    "1 · off-by-one": ((), {"max_num_seqs": 2, "num_speculative_tokens": 0}),
    "2 · start-up": ((), {"max_num_seqs": 2, "prompt_lens": "2, 3, 200"}),
    "3 · versions": ((), {"vllm_version": "0.31.0", "attention_backend": "FLASH_ATTN_MLA_SPARSE",
                          "max_num_seqs": 2, "prompt_lens": "2, 3, 200"}),
    "6 · two GPUs": ((), {"max_num_seqs": 3}),
    "7 · is my server exposed?": ((SERVE_DEFAULT,), {}),
}
# ipywidgets' tabs are 144 px wide: a title as long as tab 7's is cut ("is my server expos")
TAB_CSS = ("<style>.hs-app .lm-TabBar-tab{flex:0 0 auto !important;min-width:0;max-width:none}"
           ".hs-app .lm-TabBar-tabLabel{overflow:visible;text-overflow:clip}</style>")
INTRO = TAB_CSS + (
    "<h2>vLLM HiSparse: the off-by-one in buffer sizing</h2><p style='max-width:900px'>vLLM "
    "0.31.0 sends a batch of n routed tokens to <code>swap_in</code> when it fits the "
    "index-group workspace of W = C + 1 rows, but <code>swap_in</code> has only C = min(B, "
    "max_num_seqs · q) swap rows: a batch of exactly C + 1 tokens raises <code>ValueError: "
    "HiSparse swap rows exceed the configured speculative decode capacity</code>. Each tab is "
    "one notebook's dashboard, computed by an exact model of vLLM's code; each starts with the "
    "picture of its buffers, drawn for that tab's own knobs.</p>")


def app_page() -> tuple[W.VBox, dict]:
    """The page widget and its dashboards by tab title (each tab draws its own buffers)."""
    dashboards = {title: make(*OPENINGS.get(title, ((), {}))[0],
                              **OPENINGS.get(title, ((), {}))[1]) for title, make in TABS}
    tabs = W.Tab(children=[d.widget for d in dashboards.values()], titles=list(dashboards))
    page = W.VBox([W.HTML(INTRO), W.HTML(where_in_vllm("0.31.0")), tabs],
                  layout={"width": "100%"})
    page.add_class("hs-app")
    return page, dashboards
