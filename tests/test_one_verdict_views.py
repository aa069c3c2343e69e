"""One verdict (issue 60), what a learner saw last: notebook 2's strip and prompt table read
at any knobs, notebook 3's lanes coloured by the route the model gives each prompt's last
chunk, notebook 7's reset with no command in the box and its words that point at the knobs.

Each test states one thing a reader must see; the expected values are the arithmetic in the
comments or the model's own answer (``predict``), never the view code under test.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET

import pytest

from hisparse_model import Knobs, predict
from hisparse_model.model.batches import Batch
from hisparse_model.views.charts import LEFT, RIGHT, WIDTH, strip_chart
from hisparse_model.views.exposure import exposure_dashboard
from hisparse_model.views.first_request import batches_text, startup_dashboard
from hisparse_model.views.fixes import versions_dashboard

ZOOM_Y = 134 + 40  # y of the zoom strip's tick labels (the strip at y 134, labels 40 below)
FULL_Y = 68  # y of the full strip's cells


def _texts(svg: str, cls: str) -> list[tuple[float, float, str]]:
    return [(float(t.get("x")), float(t.get("y")), "".join(t.itertext()))
            for t in ET.fromstring(svg).iter() if t.get("class") == cls]


# (current max_num_seqs, the zoom's labelled values, the least room between two labels: a
# label's digits at about 6.1 px each, 11 px sans-serif, and 3 px between); the zoom holds 32
# values, each cell (900 - 250 - 24) / 32 = 19.6 px wide
ZOOM_ROWS = [
    # 1 ... 32: two digits (2 x 6.1 = 12.2 px) fit a 19.6 px cell: every value
    (2, list(range(1, 33)), 15),
    # 135 ... 166 (150 - 15 = 135): three digits (about 18.3 px) do not fit 19.6 px with room
    # between them, so every second value (39 px apart), the even ones, 150 among them
    (150, list(range(136, 167, 2)), 22),
    # 225 ... 256 (min(250 - 15, 256 - 31) = 225): the even ones and 251, bold, the odd
    # current value: 250 and 252 are one cell (19.6 px) from it, so left out
    (251, [226, 228, 230, 232, 234, 236, 238, 240, 242, 244, 246, 248, 251, 254, 256], 22),
]


@pytest.mark.parametrize("current, labelled, room", ZOOM_ROWS)
def test_the_zooms_tick_labels_never_run_together(current, labelled, room):
    """Under the zoom, no two tick labels are closer than their digits' width and a gap, and
    the current max_num_seqs is always labelled."""
    data = {"max_num_seqs": list(range(1, 257)), "outcome": ["safe"] * 256}
    svg = strip_chart(data, current, title="t")
    zoom = [(x, int(s)) for x, y, s in _texts(svg, "hs-strip-tick") if y == ZOOM_Y]
    assert [s for _, s in zoom] == labelled
    assert min(b - a for (a, _), (b, _) in zip(zoom, zoom[1:])) >= room


def _cells(svg: str) -> list[tuple[float, float, str]]:
    """(x, width, outcome) of every cell drawn in the full strip, in drawing order."""
    return [(float(r.get("x")), float(r.get("width")), r.get("class").split()[0][8:])
            for r in ET.fromstring(svg).iter() if r.tag.endswith("rect")
            and (r.get("class") or "").startswith("hs-cell-") and float(r.get("y")) == FULL_Y]


CW = (WIDTH - LEFT - RIGHT) / 256  # one max_num_seqs of the full strip: 626 / 256 = 2.4 px
# (knobs, the lone max_num_seqs whose cell is one 2.4 px column, its outcome)
LONE_ROWS = [
    # B 64: S 64 has C = min(64, 64) = 64 = B, so no W = 65-token step: safe, between the
    # lone prompts that crash (S 2 ... 63) and the refusals (S 65 ... 256: S > B)
    ({"max_num_batched_tokens": 64, "max_num_seqs": 2}, 64, "safe"),
    # S 1: C = 1, W = 2 is the 2-token capture: the start-up crash, alone at the left end
    ({"max_num_batched_tokens": 64, "max_num_seqs": 2}, 1, "startup_crash"),
    # B 2: S 1 crashes at start-up and S 2 (C = 2 = B) is safe, side by side: two lone
    # columns, neither drawn over the other; S 3 ... 256 refused (S > B)
    ({"max_num_batched_tokens": 2, "max_num_seqs": 2}, 1, "startup_crash"),
    ({"max_num_batched_tokens": 2, "max_num_seqs": 2}, 2, "safe"),
]


@pytest.mark.parametrize("knobs, s, outcome", LONE_ROWS)
def test_a_lone_max_num_seqs_in_the_full_strip_is_wide_enough_to_see(knobs, s, outcome):
    """A max_num_seqs whose outcome differs from both neighbours is drawn at least 6 px wide
    (not a 2.4 px sliver), in its colour, its middle within 6 px of its own column's, and no
    cell drawn after it covers any of it."""
    dash = startup_dashboard(**knobs)
    assert dash.plot_data["outcome"][s - 1] == outcome  # the model's strip
    middle = LEFT + (s - 0.5) * CW  # the middle of S's column
    cells = _cells(dash.chart.value)
    (i,) = [i for i, (x, w, o) in enumerate(cells) if o == outcome
            and abs(x + w / 2 - middle) <= 6]
    x, w, _ = cells[i]
    assert w >= 6
    assert all(x2 + w2 <= x or x + w <= x2 for x2, w2, _ in cells[i + 1:])


# (knobs, prompt length, the cell: batches of a prompt served alone)
PROMPT_ROWS = [
    # B 2: 200 = 100 chunks of 2 tokens, each fits C = 2 rows; then the decode of 1 token
    ({"max_num_batched_tokens": 2, "max_num_seqs": 2}, 200,
     "prefill chunks 1–100/100: n=2 → swap_in each, decode: n=1 → swap_in"),
    # B 3: 200 = 66 x 3 + 2: 67 chunks, the last of 2 tokens; in 0.32.0, as 3 > C = 2 is
    # all-resident (0.31.0 dies on chunk 1, 3 = W tokens: tests/test_walk_notebooks_1_to_3.py)
    ({"max_num_batched_tokens": 3, "max_num_seqs": 2, "vllm_version": "0.32.0"}, 200,
     "prefill chunks 1–66/67: n=3 → all_resident each, prefill chunk 67/67: n=2 → swap_in, "
     "decode: n=1 → swap_in"),
    # B 64: 200 = 3 x 64 + 8: three chunks of 64 > W = 3 all-resident, the last of 8 too
    ({"max_num_batched_tokens": 64, "max_num_seqs": 2}, 200,
     "prefill chunks 1–3/4: n=64 → all_resident each, prefill chunk 4/4: n=8 → all_resident, "
     "decode: n=1 → swap_in"),
    # B 16384: one prefill of 3 = W tokens, the crash (nothing after it runs)
    ({"max_num_seqs": 2}, 3, "prefill: n=3 → swap_in"),
]


@pytest.mark.parametrize("knobs, n, text", PROMPT_ROWS)
def test_a_long_prompts_batches_are_one_line_not_a_wall(knobs, n, text):
    """Notebook 2's prompt table says a prompt's chunks routed alike once, with their count;
    no chunk is listed one by one."""
    dash = startup_dashboard(prompt_lens=str(n), **knobs)
    shown = html.unescape(dash.numbers.value)
    assert text in shown and "prefill chunk 2/" not in shown.replace(text, "")


def _batch(label: str, routed: int, route: str) -> Batch:
    return Batch("prompt", label, routed, 1, 0, "NONE", routed, route, None)


# (batches, the cell): past 2 x 3 groups, the first and last 3 and how many between
ALTERNATING = [
    # 20 chunks alternating 2 and 64 tokens: 20 groups; 3 + "14 more" + 3 = 20
    ([_batch(f"prefill chunk {i}/20", 2 if i % 2 else 64, "swap_in" if i % 2 else
             "all_resident") for i in range(1, 21)],
     "prefill chunk 1/20: n=2 → swap_in, prefill chunk 2/20: n=64 → all_resident, "
     "prefill chunk 3/20: n=2 → swap_in, … 14 more batches …, prefill chunk 18/20: n=64 → "
     "all_resident, prefill chunk 19/20: n=2 → swap_in, prefill chunk 20/20: n=64 → "
     "all_resident"),
    # 7 groups: 3 + "1 more batch" + 3
    ([_batch(f"prefill chunk {i}/7", 2 if i % 2 else 64, "swap_in" if i % 2 else
             "all_resident") for i in range(1, 8)],
     "prefill chunk 1/7: n=2 → swap_in, prefill chunk 2/7: n=64 → all_resident, "
     "prefill chunk 3/7: n=2 → swap_in, … 1 more batch …, prefill chunk 5/7: n=2 → swap_in, "
     "prefill chunk 6/7: n=64 → all_resident, prefill chunk 7/7: n=2 → swap_in"),
]


@pytest.mark.parametrize("batches, text", ALTERNATING)
def test_a_prompt_cell_is_bounded_however_its_chunks_alternate(batches, text):
    """At most three groups of batches at each end of a prompt's cell, the rest counted."""
    assert batches_text(batches) == text


# notebook 3, B 64, S 2 (C = 2, W = 3): (n, its last chunk, the lane's colour in 0.31.0)
LANE_ROWS = [
    (66, "64 + 2: the last chunk's 2 tokens fit C = 2 rows", "swap_in"),
    (65, "64 + 1", "swap_in"),
    (67, "64 + 3: W tokens, the crash", "crash"),
    (68, "64 + 4 > W: all-resident", "all_resident"),
    (64, "one prefill of 64 > W", "all_resident"),
    (130, "64 + 64 + 2", "swap_in"),
]


@pytest.mark.parametrize("n, arithmetic, colour", LANE_ROWS)
def test_a_prompts_lane_cell_follows_its_last_chunks_route(n, arithmetic, colour):
    """A prompt's cell in notebook 3's lanes is the route predict() gives its last prefill
    chunk (or its crash), not the route of its first, B-token chunk."""
    dash = versions_dashboard(max_num_batched_tokens=64, max_num_seqs=2)
    prompt = predict(Knobs(max_num_batched_tokens=64, max_num_seqs=2), [n]).prompts[0]
    model = "crash" if not prompt.ok else prompt.prefill_route
    assert dash.plot_data["lanes"]["0.31.0"][n - 1] == model == colour, arithmetic


@pytest.mark.parametrize("box", ["", "   \n"])
def test_reset_with_an_empty_command_box_applies_nothing(box):
    """Notebook 7: "reset the knobs to the command" with no command in the box changes
    nothing (knobs, verdict, source) and says so in one line; the next move clears it."""
    dash = exposure_dashboard(box)
    dash.controls["max_num_seqs"].value = 7
    before = (dict(dash.state), dict(dash.labels), dash.numbers.value)
    dash.reset.click()
    assert (dict(dash.state), dict(dash.labels), dash.numbers.value) == before
    assert dash.controls["max_num_seqs"].value == 7
    said = re.sub(r"<[^>]+>", "", html.unescape(dash.message.value))
    assert said.startswith("Nothing applied: the command box is empty") and "\n" not in said
    assert "applied:" not in said.replace("Nothing applied:", "")
    dash.controls["max_num_seqs"].value = 8
    assert dash.message.value == "" and dash.state["max_num_seqs"] == 8


# (command in the box, where the words that point at the knobs are shown)
POINTING_ROWS = [
    ("", "numbers"),  # the verdict's "Read from the knobs above, ..."
    ("vllm serve m --kv-transfer-config '{", "message"),  # a quoting slip's line
]


@pytest.mark.parametrize("command, where", POINTING_ROWS)
def test_notebook_7_points_up_at_the_knobs_it_shows_above(command, where):
    """Notebook 7's verdict and its messages sit under the knobs, so they point at them as
    the knobs above, never below."""
    dash = exposure_dashboard(command)
    children = list(dash.widget.children)
    rows = next(i for i, c in enumerate(children) if dash.controls["max_num_seqs"] in
                [g for row in getattr(c, "children", ()) for g in
                 [row, *getattr(row, "children", ())]])
    shown = getattr(dash, where)
    assert children.index(shown) > rows
    said = html.unescape(re.sub(r"<[^>]+>", " ", shown.value))
    assert "knobs above" in said and "knobs below" not in said


# knobs -> the banner's kind and its colour: the strips' own for never starts (brown), grey
# only for what vLLM refuses (S 200 > B 150)
BANNER = [
    ({"max_num_seqs": 2, "num_speculative_tokens": 2, "max_num_batched_tokens": 2},
     "never_starts", "#8c510a"),
    ({"max_num_seqs": 200, "max_num_batched_tokens": 150}, "refused", "#525252"),
    ({"max_num_seqs": 2}, "exposed", "#b2182b"),
]


@pytest.mark.parametrize("knobs, kind, colour", BANNER)
def test_the_banner_paints_a_kind_as_the_strips_do(knobs, kind, colour):
    """A server that never starts is brown on the banner as on every strip, not the grey of a
    configuration vLLM refuses."""
    from hisparse_model.answers.server_verdict import server_verdict
    from hisparse_model.model.knobs import Knobs
    from hisparse_model.views.verdict_banner import verdict_html

    html = verdict_html(server_verdict(Knobs(**knobs)))
    assert f"data-verdict='{kind}' style='border-left:4px solid {colour};" in html
