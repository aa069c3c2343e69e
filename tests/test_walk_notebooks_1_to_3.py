"""Notebooks 1, 2 and 3 as a student walked them (issue 60): what the engine never ran is
shown as not run, as ``hisparse predict`` says it; sentences, axes, titles, colours and
Try-this answers that say what the screen shows.

Each test states one thing a reader must see; the expected values are the arithmetic in the
comments, the CLI's own text, or the model's answer (``predict``), never the view code.
"""

from __future__ import annotations

import colorsys
import html
import pathlib
import re
import xml.etree.ElementTree as ET

import pytest

from hisparse_model import Knobs, predict
from hisparse_model.answers.server_verdict import server_verdict
from hisparse_model.model.batches import Batch
from hisparse_model.text import chart_data as cd
from hisparse_model.text.report import format_table
from hisparse_model.views import off_by_one_dashboard, startup_dashboard, versions_dashboard
from hisparse_model.views.exercises import EXERCISES
from hisparse_model.views.first_request import STRIP_KINDS
from hisparse_model.views.svg import PALETTE
from hisparse_model.views.tables import CSS, batch_rows

VIEWS = pathlib.Path(__file__).resolve().parents[1] / "hisparse_model" / "views"


def _text(fragment: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", fragment))).strip()


def _rows(table_html: str) -> list[tuple[str, list[str]]]:
    """(class, cell texts) of each body row of the last table in ``table_html``."""
    body = table_html.rsplit("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [(cls or "", [_text(c) for c in re.findall(r"<td>(.*?)</td>", row)])
            for cls, row in re.findall(r"<tr(?: class='([^']*)')?>(.*?)</tr>", body)]


# (knobs, prompt lengths, the prompt that crashes, its batch that crashes, the batches that
# never ran after it): S 2 gives C = 2, W = 3
CRASH_ROWS = [
    # notebook 3's default (B = min(2 · 320, 16384) = 640): the 3-token prompt is one prefill
    # of 3 = W tokens, the crash; its decode after it is the 1 later batch never run
    ({"max_num_seqs": 2}, "2, 3, 200", "prompt 2 (3 tokens)", "prefill", "1 later batch"),
    # B 3: the 3-token prompt is still one 3-token chunk, the crash; its decode never runs
    ({"max_num_seqs": 2, "max_num_batched_tokens": 3}, "2, 3, 200", "prompt 2 (3 tokens)",
     "prefill", "1 later batch"),
    # B 3, 200 tokens alone: 200 = 66 x 3 + 2, 67 chunks; chunk 1 is 3 = W tokens, the crash;
    # the 66 chunks after it and the decode never run: 66 + 1 = 67
    ({"max_num_seqs": 2, "max_num_batched_tokens": 3}, "200", "prompt 1 (200 tokens)",
     "prefill chunk 1/67", "67 later batches"),
]


@pytest.mark.parametrize("knobs, lens, name, label, later", CRASH_ROWS)
def test_no_batch_after_a_crash_is_listed_as_if_it_ran(knobs, lens, name, label, later):
    """After the batch that crashes, notebook 3's table and notebook 2's prompt cell list no
    batch of that prompt as run: they say how many never ran, as ``hisparse predict`` does."""
    cli = f"not run: {later} (the engine died)"
    assert cli in format_table(predict(Knobs(**knobs), [int(n) for n in lens.split(",")]))
    rows = _rows(versions_dashboard(prompt_lens=lens, **knobs).numbers.value)
    mine = [(cls, cells) for cls, cells in rows if cells[0] == name]
    assert [cls for cls, _ in mine] == ["hs-crash", "hs-not-run"] and mine[0][1][1] == label
    assert mine[1][1][1:3] == ["not run", f"{later} (the engine died)"]
    startup = _rows(startup_dashboard(prompt_lens=lens, **knobs).numbers.value)
    cell = next(cells[1] for _, cells in startup if cells[0] == name)
    assert cell == f"{label}: n=3 → swap_in; {cli}"  # the crash, then nothing routed


# (knobs): the prompts 2, 3, 200 never run (start-up dies)
NOT_RUN_ROWS = [
    # S 2, K 2, B 2: B < K + 2 = 4, the MTP warmup has no request: start-up dies
    {"max_num_seqs": 2, "num_speculative_tokens": 2, "max_num_batched_tokens": 2},
    # S 1: C = 1, W = 2 is the 2-token capture: start-up dies of the overflow
    {"max_num_seqs": 1},
]


@pytest.mark.parametrize("knobs", NOT_RUN_ROWS)
def test_a_prompt_not_run_shows_no_batches(knobs):
    """A prompt the engine never reached has no batches in notebook 2's prompt table (as
    ``predict --json`` gives it none), and none in notebook 3's batch table."""
    assert not any(p.ran for p in predict(Knobs(**knobs), [2, 3, 200]).prompts)
    prompts = _rows(startup_dashboard(**knobs).numbers.value)
    assert [cells[1] for _, cells in prompts] == ["–", "–", "–"]
    assert [cells[2] for _, cells in prompts] == ["not run: the engine died at start-up"] * 3
    detail = _rows(versions_dashboard(**knobs).numbers.value)
    assert [cells[1] for _, cells in detail] == ["not run"] * 3


# (knobs, notebook 2's headline): the warmup batch that fails is 0 tokens, none routed
HEADLINE_ROWS = [
    ({"max_num_seqs": 2, "num_speculative_tokens": 2, "max_num_batched_tokens": 2},
     "Start-up dies on its warmup decode of no request (0 tokens), with IndexError: list "
     "index out of range , before any token reaches the HiSparse routing: not the swap-row "
     "overflow."),
    # K 3, B 3 < K + 2 = 5: the same warmup, the same error
    ({"max_num_seqs": 2, "num_speculative_tokens": 3, "max_num_batched_tokens": 3},
     "Start-up dies on its warmup decode of no request (0 tokens), with IndexError: list "
     "index out of range , before any token reaches the HiSparse routing: not the swap-row "
     "overflow."),
]


@pytest.mark.parametrize("knobs, headline", HEADLINE_ROWS)
def test_a_start_up_that_is_not_the_overflow_reads_as_a_sentence(knobs, headline):
    """Notebook 2 says which batch start-up dies on and, apart, the error it dies with
    (never "of no request of IndexError" or "of 0 tokens (the last row) of an error")."""
    shown = startup_dashboard(**knobs).numbers.value
    said = _text(re.search(r"<div class='hs-headline'>(.*?)</div>", shown).group(1))
    assert said == headline
    note = _text(shown.split("start-up batches in engine order")[0].rsplit("hs-note'>", 1)[1])
    assert note.startswith("start-up dies at its warmup decode of no request (0 tokens, the "
                           "last row), with an error that is not the swap-row overflow "
                           "(routed tokens: n = 0):")
    assert not re.search(r"request of|\) of ", said + note)


# (S, K, B, the "fewer drafts" words of the never-starts advice): B - 2 drafts fit
ADVICE_ROWS = [
    (2, 2, 3, " (or at most 1 speculative token),"),  # 3 - 2 = 1: one token, singular
    (2, 3, 4, " (or at most 2 speculative tokens),"),  # 4 - 2 = 2
    (2, 2, 2, None),  # 2 - 2 = 0 drafts: MTP off is not "fewer drafts"; only raise B
]


@pytest.mark.parametrize("s, k, b, fewer", ADVICE_ROWS)
def test_the_never_starts_advice_counts_its_drafts_in_words(s, k, b, fewer):
    """"To make it start" words the drafts it allows with their number ("1 speculative
    token"), in the one verdict that notebooks and the CLI print."""
    advice = server_verdict(Knobs(max_num_seqs=s, num_speculative_tokens=k,
                                  max_num_batched_tokens=b)).advice
    assert advice.startswith(f"raise max_num_batched_tokens to at least K + 2 = {k + 2}")
    assert (fewer in advice) if fewer else "or at most" not in advice
    assert "1 speculative tokens" not in advice


# (knobs, the axis's ticks, the note at its right): the zoom is C - 5 … W + 5, cut at B + 1
AXIS_ROWS = [
    # S 2, K 2, B 2: C = min(2, 6) = 2, W = 3 = B + 1: 1 … 3, the 3 grey
    ({"max_num_seqs": 2, "num_speculative_tokens": 2, "max_num_batched_tokens": 2},
     [1, 2, 3], "→ n > B = 2: no step holds it"),
    # B 3: C = 3, W = 4 = B + 1: 1 … 4
    ({"max_num_seqs": 2, "num_speculative_tokens": 2, "max_num_batched_tokens": 3},
     [1, 2, 3, 4], "→ n > B = 3: no step holds it"),
    # S 1, B 4: C = 1, W = 2; the zoom 1 … 7 cut at B + 1 = 5
    ({"max_num_seqs": 1, "max_num_batched_tokens": 4}, [1, 2, 3, 4, 5],
     "→ n > B = 4: no step holds it"),
    # S 2, B 640: C = 2, W = 3; the zoom 1 … 8 is all under B: past 8 every n is all-resident
    ({"max_num_seqs": 2}, list(range(1, 9)), "→ n > 8: all-resident under every rule"),
]


@pytest.mark.parametrize("knobs, ticks, note", AXIS_ROWS)
def test_notebook_1s_axis_ends_where_b_ends_it(knobs, ticks, note):
    """Notebook 1's chart runs no further than one column past B (n > B grey), and its right
    note names B, not the axis's last tick."""
    svg = off_by_one_dashboard(**knobs).chart.value
    root = ET.fromstring(svg)
    shown = [int(t.text) for t in root.iter() if t.get("class") == "hs-tick"]
    assert shown == ticks
    assert note in [html.unescape("".join(t.itertext())) for t in root.iter()]


# (a batch's route and error, the route cell's words)
ROUTE_ROWS = [
    ("swap_in", None, "swap_in"),
    ("all_resident", None, "all_resident"),
    (None, None, "not routed"),
    ("swap_in", "ValueError: HiSparse swap rows exceed ...: stop=3, capacity=2.", "swap_in"),
]


@pytest.mark.parametrize("route, error, words", ROUTE_ROWS)
def test_a_route_cell_keeps_its_swatch_and_word_on_one_line(route, error, words):
    """A batch table's route cell is one no-wrap span: its swatch and word stay together
    however wide the error column beside it."""
    b = Batch("jit_warmup", "warmup", 3, 1, 0, "NONE", 3 if route else 0, route, error)
    cell = batch_rows([b])[0][0][7]
    assert cell.startswith("<span class='hs-route'>") and cell.endswith("</span>")
    assert _text(cell) == words
    assert ".hs-table .hs-route{white-space:nowrap}" in CSS


def _hls(colour: str) -> tuple[float, float, float]:
    return colorsys.rgb_to_hls(*(int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)))


@pytest.mark.parametrize("other", [k for k in STRIP_KINDS if k != cd.NEVER_STARTS])
def test_never_starts_is_told_apart_from_every_strip_colour(other):
    """In notebook 2's strip, "never starts" is not a grey beside "vLLM refuses" (grey): its
    colour has a hue (saturation at least 0.5) and differs in hue or lightness from every
    other kind's; no other meaning in the palette or the views uses it."""
    mine, theirs = PALETTE[cd.NEVER_STARTS], PALETTE[other]
    h, l, s = _hls(mine)
    h2, l2, s2 = _hls(theirs)
    assert s >= 0.5  # #8c510a: a dark brown, not a grey
    hue = min(abs(h - h2), 1 - abs(h - h2)) * 360 if s2 > 0.1 else 360  # a grey has no hue
    assert hue >= 15 or abs(l - l2) >= 0.2, (mine, theirs)
    assert [k for k, c in PALETTE.items() if c.lower() == mine.lower()] == [cd.NEVER_STARTS]
    uses = [p.name for p in VIEWS.glob("*.py") if mine.lower() in p.read_text().lower()]
    assert uses == ["svg.py"]


# (B, n, notebook 3's 0.31.0 cell, why): S 2, C = 2, W = 3
LANE_ROWS = [
    # 4 = 3 + 1: the first chunk is 3 = W tokens, the crash; the last (1 token) never runs
    (3, 4, "crash", "the first chunk crashes"),
    (3, 5, "crash", "3 + 2: the first chunk crashes"),
    (3, 2, "swap_in", "one chunk of 2 ≤ C"),
    (64, 66, "swap_in", "64 + 2: the last chunk fits C"),
    (64, 67, "crash", "64 + 3: the last chunk is W"),
]


@pytest.mark.parametrize("b, n, cell, why", LANE_ROWS)
def test_notebook_3s_chart_title_says_what_a_cell_is(b, n, cell, why):
    """Notebook 3's cell is its last prefill chunk's route, or the crash of any chunk (at a
    small B, the first), and its title says exactly that."""
    dash = versions_dashboard(max_num_seqs=2, max_num_batched_tokens=b)
    p = predict(Knobs(max_num_seqs=2, max_num_batched_tokens=b), [n]).prompts[0]
    assert (p.prefill_route if p.ok else "crash") == cell, why
    assert dash.plot_data["lanes"]["0.31.0"][n - 1] == cell, why
    title = ET.fromstring(dash.chart.value).find("{http://www.w3.org/2000/svg}title").text
    assert title.startswith("A prompt of n tokens served alone: its last prefill chunk's "
                            "route, or the crash of any chunk (")


# (notebook, question, words the answer holds, words it must not hold)
ANSWER_ROWS = [
    # S 2, K 2: B = 2, 3 < K + 2 = 4: the MTP warmup has no request; from B = 4 it starts
    ("off_by_one", 3, "But at B = 2 and 3 the server never starts: with K = 2 the JIT warmup "
     "needs B ≥ K + 2 = 4", "at none"),
    # B 64: no max_num_seqs is crashed only by requests together; said once, not "at none"
    ("startup", 2, "none where only requests arriving together crash it", "at none"),
    # FLASHMLA_SPARSE: 2-, 3- and 200-token prefills are all over q = 1: none routed
    ("versions", 2, "None: FLASHMLA_SPARSE stages every prefill and routes decode tokens "
     "only, so n ≤ C always.", "every other prefill"),
]


@pytest.mark.parametrize("notebook, i, holds, never", ANSWER_ROWS)
def test_try_this_answers_are_true_and_grammatical(notebook, i, holds, never):
    """Each Try-this answer says what the model says for its start, in a sentence: no
    "at none", no "every other" of nothing, and a B where the server never starts is said."""
    ex = EXERCISES[notebook][i]
    text = ex.answer(ex.start).text
    assert holds in text and never not in text
