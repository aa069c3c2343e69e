"""What a learner reads in the notebooks and the app, checked without a browser.

Each test states one thing a reader must (or must not) see: no test residue, the light
install path, max_model_len as a control, notebook 3's chart that keeps every length that
differs, notebook 5's start-up death, crash line, colours and map, numbering from 1, one
rule for an empty prompt list, the app's diagram and port.  Expected values come from the
model's API or from the arithmetic in comments, never from the view code under test.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
import socket
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET

import nbformat
import pytest

from hisparse_model import Knobs, predict, simulate
from hisparse_model.text import chart_data as cd
from hisparse_model.model.reproduction import ASSUMPTIONS
from hisparse_model.answers.simulate import SIMULATE_ASSUMPTIONS
from hisparse_model.model.versions import RULES
from hisparse_model.views import off_by_one_dashboard, recordings_dashboard, startup_dashboard
from hisparse_model.views import versions_dashboard
from hisparse_model.views.digest import read_digests
from hisparse_model.views.page import app_page
from hisparse_model.views.svg import PALETTE
from hisparse_model.views.traffic import TrafficDashboard, WorkloadRecordingsDashboard
from hisparse_model.views.traffic_charts import REQUEST_COLOURS
from hisparse_model.schedule.workload import synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SVG_NS = "{http://www.w3.org/2000/svg}"
FACTORIES = [off_by_one_dashboard, startup_dashboard, versions_dashboard, recordings_dashboard,
             TrafficDashboard, WorkloadRecordingsDashboard]
KNOB_FACTORIES = [off_by_one_dashboard, startup_dashboard, versions_dashboard, TrafficDashboard]
# What only a test needs, as it used to leak onto the screen ("digest: B=640 ...", the strip's
# "sweep startup_crash=1 ...", "forwards=None"): none of it may appear where a reader looks.
RESIDUE = re.compile(r"digest|sweep |=None|startup_crash=|runtime_crash=|not_computed=")


def _visible(markup: str) -> str:
    """The text a reader sees: hidden elements, styles and tags dropped, entities decoded."""
    markup = re.sub(r"<(\w+)[^>]*\shidden[\s>][^<]*</\1>", " ", markup)
    markup = re.sub(r"<style>.*?</style>", " ", markup, flags=re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def _svg_texts(svg: str, cls: str | None = None) -> list[ET.Element]:
    root = ET.fromstring(svg)
    return [t for t in root.iter(SVG_NS + "text") if cls is None or t.get("class") == cls]


def _charts(markup: str) -> list[str]:
    return [part + "</svg>" for part in markup.split("</svg>")[:-1]]


# --------------------------------------------------------------------------
# no test residue
# --------------------------------------------------------------------------


@pytest.mark.parametrize("factory", FACTORIES, ids=lambda f: f.__name__)
def test_a_reader_sees_no_test_residue_but_tests_can_read_the_state(factory):
    """Numbers, chart and assumptions show no digest; the digest is there, hidden, for tests."""
    dash = factory()
    page = _visible("".join(w.value for w in dash.widget.children if hasattr(w, "value")))
    page += " " + _visible(dash.numbers.value) + " " + _visible(dash.chart.value)
    assert dash.error is None
    assert not RESIDUE.search(page), RESIDUE.search(page)
    assert read_digests(dash.numbers.value) == {dash.name: dash.labels["summary"]}


def test_assumptions_are_written_for_people():
    """No assumption a reader is shown carries a code-ish ``name=None``."""
    for line in ASSUMPTIONS + SIMULATE_ASSUMPTIONS:
        assert not RESIDUE.search(line), line


def test_strip_captions_say_in_words_what_each_max_num_seqs_does():
    """Notebook 2's strip (S = 1 dies at start-up, 2 … 256 on the first W-token prompt)."""
    dash = startup_dashboard()
    caption = [t.text for t in _svg_texts(dash.chart.value, "hs-sweep")]
    # default B = S * 320: S = 1 has captures [1, 2] (2 = W: start-up); every S >= 2 starts and
    # crashes on a prompt of W = S + 1 tokens (< 320 up to S = 256? W <= 257 < 320: yes)
    assert caption == ["max_num_seqs start-up crash: 1 · a lone prompt crashes: 2-256"]


# --------------------------------------------------------------------------
# getting to the notebooks
# --------------------------------------------------------------------------


def _light_path():
    spec = importlib.util.spec_from_file_location(
        "check_light_path", os.path.join(ROOT, "scripts", "check_light_path.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_light_path_is_the_two_commands_ci_runs():
    """The README's light path is pip install .[notebooks] then jupyter lab; that extra has no torch."""
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert _light_path().readme_commands(readme) == ['pip install -e ".[notebooks]"',
                                                     "jupyter lab notebooks/"]
    assert "--allow-root" in readme and "Run All" in readme
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["notebooks"]
    assert not [d for d in extra if re.match(r"(torch|vllm|hisparse-model\[)", d)], extra
    # CI runs it as the last step of the README's test command (scripts/run_tests.py)
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert "python scripts/run_tests.py" in f.read()
    with open(os.path.join(ROOT, "scripts", "run_tests.py")) as f:
        assert '"check_light_path.py")]]' in f.read()


def test_light_path_reader_refuses_a_readme_without_its_markers():
    """The check cannot pass on a README that lost its light-path block."""
    with pytest.raises(ValueError):
        _light_path().readme_commands("# no block here\n")


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(os.path.join(ROOT, "notebooks"))
                                        if n.endswith(".ipynb")))
def test_every_notebook_says_run_all_first_and_which_file_to_open(name):
    """The first cell tells a reader to Run All and that the .py is the same notebook as text."""
    nb = nbformat.read(os.path.join(ROOT, "notebooks", name), as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown"
    assert "Run All" in first.source and "`.py`" in first.source and "`.ipynb`" in first.source


GLOSSARY = ["CUDA graph", "FULL graph", "PIECEWISE graph", "JIT warmup", "Dummy-batch spreading",
            "`B // (q+1)`"]


def test_notebook_2_defines_its_terms_where_they_first_appear():
    """Each term of notebook 2's glossary is first used in its own definition."""
    nb = nbformat.read(os.path.join(ROOT, "notebooks", "02_startup_or_first_request.ipynb"),
                       as_version=4)
    text = "\n".join(c.source for c in nb.cells).lower()
    for term in GLOSSARY:
        bare = term.strip("`").lower()
        assert text.index(f"**{term.lower()}") + 2 + (term[0] == "`") == text.index(bare), term


# --------------------------------------------------------------------------
# max_model_len, notebook 1's B
# --------------------------------------------------------------------------


@pytest.mark.parametrize("factory", KNOB_FACTORIES, ids=lambda f: f.__name__)
def test_max_model_len_is_a_control_that_moves_b(factory):
    """max_model_len 320 -> 250 with B unset: B = min(S * 250, 16384), as predict() says."""
    dash = factory(max_num_seqs=2)
    dash.controls["max_model_len"].value = 250  # the 200-token prompt still fits
    assert dash.error is None
    assert dash.last_prediction.knobs.max_model_len == 250
    # S = 2: B = min(2 * 250, 16384) = 500
    assert dash.last_prediction.plan.max_num_batched_tokens == 500
    assert predict(Knobs(max_num_seqs=2, max_model_len=250)).sizes.max_num_batched_tokens == 500


def test_a_prompt_longer_than_max_model_len_is_refused_in_vllms_words():
    """max_model_len 100 with the 200-token prompt: the model's refusal, naming the prompt."""
    dash = startup_dashboard()
    dash.controls["max_model_len"].value = 100
    with pytest.raises(ValueError) as exc:
        predict(Knobs(max_model_len=100), [2, 3, 200])
    assert dash.error == str(exc.value)


def test_notebook_3_draws_lengths_below_the_chosen_max_model_len():
    """Notebook 3's lanes cover n = 1 … max_model_len - 1 for the max_model_len set."""
    dash = versions_dashboard()
    dash.controls["max_model_len"].value = 250
    assert dash.plot_data["n"] == list(range(1, 250))


def test_a_set_b_cites_vllms_check_not_the_default_formula():
    """B set: the B row cites vLLM's B >= max_num_seqs check; B unset: the default's line."""
    cites = RULES["0.31.0"].cites
    for b, cite in ((None, cites["B"]), (64, cites["B>=S"])):
        row = cd.formulas(predict(Knobs(max_num_seqs=2, max_num_batched_tokens=b)))[0]
        assert row[0] == "B" and row[2] == cite


# (max_num_seqs, B) -> whether 0.31.0 can crash: W = C + 1 routed tokens need a step of W tokens
B_CAP_CASES = [
    ((4, 4), False),  # C = min(4, 4) = 4 = B: W = 5 > B, no step holds it
    ((4, 5), True),  # C = min(5, 4) = 4, W = 5 <= B = 5
    ((2, 8), True),  # C = min(8, 2) = 2, W = 3 <= B = 8
]


@pytest.mark.parametrize(("knobs", "crashes"), B_CAP_CASES)
def test_notebook_1_shows_no_crash_where_no_step_holds_w_tokens(knobs, crashes):
    """With C = B the W-token batch cannot exist: no crash size, no marker, n > B greyed."""
    s, b = knobs
    dash = off_by_one_dashboard(max_num_seqs=s, max_num_batched_tokens=b)
    w = int(dash.labels["W"])
    marks = [t.text for t in _svg_texts(dash.chart.value, "hs-crash-label")]
    assert marks == ([f"crash: n={w}"] if crashes else [])
    assert dash.labels["crash_size"] == (str(w) if crashes else "none")
    lane = next(iter(dash.plot_data["lanes"].values()))
    assert [n for n, k in zip(dash.plot_data["n"], lane) if k == cd.OVER_B] == [
        n for n in dash.plot_data["n"] if n > b]


# --------------------------------------------------------------------------
# notebook 3's chart
# --------------------------------------------------------------------------

# (max_num_seqs, B) -> the crash lengths of 0.31.0 the chart must keep (every one of them)
KEY_LENGTH_CASES = [
    ((2, None), [3]),  # C = 2, W = 3; B = 640 > 319: no chunking
    ((2, 64), [3, 67, 131, 195, 259]),  # chunks of 64: 64k + 3 ends in a W-token chunk
    ((16, None), [17]),  # C = 16, W = 17
]


@pytest.mark.parametrize(("knobs", "crashes"), KEY_LENGTH_CASES)
def test_notebook_3_keeps_every_length_that_differs_and_loses_nothing(knobs, crashes):
    """Shown: C - 5 … W + 5 and every change; each length left out goes where its left one goes."""
    s, b = knobs
    data = cd.prompt_lanes(Knobs(max_num_seqs=s, max_num_batched_tokens=b))
    c = predict(Knobs(max_num_seqs=s, max_num_batched_tokens=b)).sizes.swap_capacity
    shown = cd.key_lengths(data, keep=cd.zoom_window(c))
    assert set(range(max(1, c - 5), c + 7)) <= set(shown)
    assert set(crashes) <= set(shown) and data["crash_sizes"]["0.31.0"] == crashes
    assert len(shown) <= 60  # readable: at least ~10 px per column
    for n in data["n"]:
        if n not in shown:
            left = max(m for m in shown if m < n)
            for lane in data["lanes"].values():
                assert lane[n - 1] == lane[left - 1], (n, left)


# B -> (columns drawn, {last n before a fold: its period}) at S 2 (C = 2, W = 3), n < 320:
# a prompt's last chunk takes the sizes 1 … B in turn as n grows, so lanes repeat every B
# lengths; C - 5 … W + 5 (1 … 8) is kept, two periods then a fold then the last period:
#   B 2: 1 … 8, 9 … 12 (two periods), ↻, 318 319            -> 12 + 2 = 14
#   B 3: 1 … 8, 9 … 14, ↻, 317 … 319                        -> 14 + 3 = 17
FOLDS = [(2, 14, {12: 2}), (3, 17, {14: 3}), (4, 20, {16: 4}), (64, 37, {})]


@pytest.mark.parametrize(("b", "columns", "repeats"), FOLDS)
def test_notebook_3_folds_a_repeating_stretch_and_loses_nothing(b, columns, repeats):
    """At most 60 columns; a length left out in a ↻ gap goes where the length p before it
    goes, one in a ⋯ gap where its left neighbour goes."""
    data = cd.prompt_lanes(Knobs(max_num_seqs=2, max_num_batched_tokens=b))
    shown, folds = cd.folded_lengths(data, keep=cd.zoom_window(2))
    assert (len(shown), folds) == (columns, repeats) and len(shown) <= cd.MOST_COLUMNS
    for n in data["n"]:
        if n in shown:
            continue
        left = max(m for m in shown if m < n)
        source = n - folds[left] if left in folds else left
        for lane in data["lanes"].values():
            assert lane[n - 1] == lane[source - 1], (n, source)


def test_notebook_3_labels_a_run_of_crashes_once():
    """B 3: every prompt from n = 3 crashes on 0.31.0 (a W-token chunk); the adjacent crash
    columns are labelled as runs, not 15 labels over each other."""
    dash = versions_dashboard(max_num_batched_tokens=3, max_num_seqs=2)
    marks = [t.text for t in _svg_texts(dash.chart.value, "hs-crash-label")]
    assert marks == ["crash: n=3…14", "crash: n=317…319"]
    assert "↻ = left out, the lengths before it repeating" in dash.chart.value


# (B, prompt) -> the rows notebook 3's batch table gives the prompt on 0.33.0, S 2
#   B 2, 200 tokens: 100 chunks of 2, all-resident alike: one row, then its decode row
#   B 2, 3 tokens: chunk 1 of 2 tokens (all-resident), chunk 2 of 1 (swap_in): two rows
#   B 64, 200 tokens: 64 + 64 + 64 alike, then 8: two rows, then the decode row
GROUPED = [
    (2, 200, ["prefill chunks 1–100/100 (each)", "decode"]),
    (2, 3, ["prefill chunk 1/2", "prefill chunk 2/2", "decode"]),
    (64, 200, ["prefill chunks 1–3/4 (each)", "prefill chunk 4/4", "decode"]),
]


@pytest.mark.parametrize(("b", "n", "labels"), GROUPED)
def test_notebook_3_batch_table_writes_alike_chunks_once(b, n, labels):
    """Consecutive chunks of a prompt whose rows differ only in their number are one row."""
    dash = versions_dashboard(max_num_batched_tokens=b, max_num_seqs=2, prompt_lens=str(n),
                              vllm_version="0.33.0")
    html = dash.numbers.value.split("each request's batches in")[1]  # the batch table
    rows = re.findall(r"<tr[^>]*><td>[^<]*</td><td>([^<]*)</td>", html)
    assert rows == labels


def test_notebook_3_chart_marks_every_crash_and_lists_only_what_it_draws():
    """B = 64: a marker per crashing length; the legend names only the colours drawn."""
    dash = versions_dashboard(max_num_batched_tokens=64)
    marks = [t.text for t in _svg_texts(dash.chart.value, "hs-crash-label")]
    assert marks == [f"crash: n={n}" for n in (3, 67, 131, 195, 259)]
    legend = [t.text for t in _svg_texts(dash.chart.value, "hs-legend")]
    # every version starts, and FLASH_ATTN_MLA_SPARSE routes each prefill: nothing grey
    assert legend == ["swap_in, fits C rows", "all-resident path", "swap_in past C rows: crash"]


# --------------------------------------------------------------------------
# notebook 5
# --------------------------------------------------------------------------


def test_a_start_up_crash_says_the_engine_died_instead_of_empty_axes():
    """max_num_seqs = 1: the 2-token capture is W = 2 > C = 1; the timeline says it in words."""
    dash = TrafficDashboard(max_num_seqs=1)
    assert simulate(Knobs(max_num_seqs=1), synthetic(2, [3, 2], 0)).crash["step"] is None
    timeline = _charts(dash.chart.value)[0]
    words = [t.text for t in _svg_texts(timeline, "hs-dead")]
    assert words and "died at start-up" in words[0]
    assert "hs-step-tokens" not in timeline and "hs-routed-" not in timeline


def test_a_crash_at_step_0_keeps_its_line_off_the_axis_titles():
    """3 + 2 = 5 = W tokens at step 0 (S = 4): the dashed line skips the axis titles' rows."""
    dash = TrafficDashboard(max_num_seqs=4)
    timeline = _charts(dash.chart.value)[0]
    root = ET.fromstring(timeline)
    lines = [e for e in root.iter(SVG_NS + "line") if e.get("class") == "hs-crash-line"]
    assert lines
    for title in _svg_texts(timeline, "hs-lane-label"):
        y = float(title.get("y"))  # the baseline; 12 px text spans y - 12 … y
        for ln in lines:
            y1, y2 = float(ln.get("y1")), float(ln.get("y2"))
            assert y2 < y - 12 or y1 > y, (title.text, y1, y2)


def _rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


def test_request_colours_stay_away_from_the_route_colours():
    """Each request colour is at least 60 apart (RGB distance) from every route colour drawn."""
    routes = [PALETTE[k] for k in (cd.SWAP_IN, cd.ALL_RESIDENT, cd.CRASH, cd.NOT_ROUTED)]
    for r in REQUEST_COLOURS:
        for k in routes:
            dist = sum((a - b) ** 2 for a, b in zip(_rgb(r), _rgb(k))) ** 0.5
            assert dist >= 60, (r, k, dist)
    assert len(set(REQUEST_COLOURS)) == len(REQUEST_COLOURS)


def test_a_max_num_seqs_beyond_the_map_is_pointed_at():
    """The slider reaches 256, the map 64: at 100 the map points past its end and says so."""
    dash = TrafficDashboard(max_num_seqs=100)
    strip = _charts(dash.search.value)[0]
    assert "hs-current-beyond" in strip and "class='hs-current'" not in strip
    label = [t.text for t in _svg_texts(strip, "hs-current-label")]
    assert label[0].startswith("▶ current max_num_seqs = 100, beyond the map (1…64)")


def test_a_recorded_workload_chart_is_titled_by_its_recording():
    """Notebook 5's recordings: the chart's title names the recording, not "your traffic"."""
    dash = WorkloadRecordingsDashboard()
    title = ET.fromstring(dash.chart.value).find(SVG_NS + "title").text
    assert f"recording {dash.labels['selected']}" in title and "your traffic" not in title


def test_requests_are_numbered_from_1_and_vllms_index_is_labelled():
    """3 + 2 tokens at step 0 (S = 4): vLLM's requests 0 and 1 are r1 and r2 on screen."""
    dash = TrafficDashboard(max_num_seqs=4)
    text = _visible(dash.numbers.value)
    assert "3 (r1) + 2 (r2) = 5 tokens" in text
    assert "r1:3 r2:2" in text
    assert "r1 is vLLM's request 0" in text
    legend = [t.text for t in _svg_texts(_charts(dash.chart.value)[0], "hs-legend")]
    assert legend[:2] == ["r1", "r2"]


def test_finished_requests_are_numbered_from_1():
    """12 steps apart (S = 4) both finish: vLLM's 0 and 1 read as r1-2."""
    dash = TrafficDashboard(max_num_seqs=4, arrival_spacing=12)
    assert "finished (received): 2 of 2 requests (r1-2)" in _visible(dash.numbers.value)


@pytest.mark.parametrize("factory", [startup_dashboard, versions_dashboard, TrafficDashboard],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize(("text", "message"), [
    ("", "prompt_lens: give at least one prompt length"),
    (" , ", "prompt_lens: give at least one prompt length"),
    ("3, x", "prompt_lens: prompt 2 ('x') is not an integer"),  # the second prompt, from 1
])
def test_one_rule_for_the_prompt_box_everywhere(factory, text, message):
    """Every prompt_lens box: an empty list and a non-integer are the same typo, prompts from 1."""
    dash = factory()
    dash.controls["prompt_lens"].value = text
    assert dash.error == message
    assert "typo in prompt_lens:" in dash.message.value


# --------------------------------------------------------------------------
# the app
# --------------------------------------------------------------------------


def test_the_app_refuses_a_port_in_use_before_saying_it_serves():
    """A held port: one line naming --port on stderr, exit 2, no "serving at" printed."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "hisparse_model", "app", "--port",
                               str(port), "--no-browser"], capture_output=True, text=True,
                              timeout=60, cwd=ROOT)
    assert done.returncode == 2
    assert "serving" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--port" in lines[0] and str(port) in lines[0]


def test_notebook_5_sends_its_timeline_before_the_searches(monkeypatch):
    """A move in notebook 5: its answer (the head above the controls) and the numbers, flush,
    timeline, flush, then the map and advice, last the box."""
    from hisparse_model.views import dashboard, traffic

    sent = []
    monkeypatch.setattr(dashboard.W.Widget, "_send",
                        lambda self, msg, buffers=None: sent.append(self))
    monkeypatch.setattr(traffic.outbox, "send_now", lambda: sent.append("send_now"))
    dash = TrafficDashboard(max_num_seqs=4)
    slider = dash.controls["max_num_seqs"]
    sent.clear()
    slider.set_state({"value": 5})  # C = 5: 3 + 2 = 5 tokens fit swap_in
    assert dash.labels["crash"] == "none"
    assert sent == [dash.head, dash.numbers, "send_now", dash.chart, "send_now", dash.search,
                    dash.number_boxes["max_num_seqs"]]


def _placed_texts(svg: str, cls: str) -> list[tuple[float, str]]:
    """(x, text) of every <text class=cls> in a chart."""
    root = ET.fromstring(svg)
    return [(float(t.get("x")), "".join(t.itertext())) for t in root.iter()
            if t.tag.endswith("text") and t.get("class") == cls]


@pytest.mark.parametrize("factory, kw, named", [
    # notebook 1, S 2: C = 2, W = 3, cells 78 px wide: each label centred under its own tick
    (off_by_one_dashboard, {"max_num_seqs": 2}, {"C = 2": 2, "W = 3": 3}),
    # notebook 1, S 2, K 2: C = 6, W = 7 (narrower cells: C's label ends at its tick, W's
    # starts at its own)
    (off_by_one_dashboard, {"max_num_seqs": 2, "num_speculative_tokens": 2},
     {"C = 6": 6, "W = 7": 7}),
])
def test_c_and_w_are_named_under_their_own_ticks(factory, kw, named):
    """"C = 2" hangs from the tick of n = 2 (never between two ticks): a short line under that
    tick leads to it, and it starts or ends within 3 px of that line."""
    chart = factory(**kw).chart.value
    ticks = {text: x for x, text in _placed_texts(chart, "hs-tick")}
    leads = [float(ln.get("x1")) for ln in ET.fromstring(chart).iter()
             if ln.get("class") == "hs-bound-tick"]
    for label, n in named.items():
        (x,) = [x for x, text in _placed_texts(chart, "hs-bound") if text == label]
        assert ticks[str(n)] in leads and abs(x - ticks[str(n)]) <= 3


@pytest.mark.parametrize("slots, named, cw, shown", [
    # wide cells (78 px): every n, named or not
    ([1, 2, 3, 4], [2, 3], 78, {1, 2, 3, 4}),
    # 15 px cells: C, W (40, 41) are said by their labels below, not their ticks; the others
    # 30 px (two cells) apart, none within 30 px of a "⋯" (column 2)
    ([1, 2, None, 38, 39, 40, 41, 42, 43, 44], [40, 41], 15, {1, 39, 41, 43}),
    # 10 px cells, no gap: every third column
    (list(range(1, 11)), [], 10, {1, 4, 7, 10}),
])
def test_tick_labels_leave_room_and_skip_no_named_column(slots, named, cw, shown):
    """Tick labels never crowd (30 px apart, clear of each "⋯"); C and W are always said."""
    from hisparse_model.views.charts import tick_labels
    assert tick_labels(slots, named, cw) == shown


def test_every_column_has_its_tick_even_where_its_number_is_left_out():
    """60 lengths and one left-out run (a "⋯" column), cells ~10 px wide: every one of the 60
    columns has its tick mark, though only some have their number written."""
    from hisparse_model.views.charts import lane_chart
    ns = list(range(1, 31)) + list(range(101, 131))
    chart = lane_chart(ns, {"0.31.0": [cd.SWAP_IN] * 60}, title="t", x_label="n",
                       bounds=[(2, "C = 2"), (3, "W = 3")])
    root = ET.fromstring(chart)
    short = [ln for ln in root.iter() if ln.tag.endswith("line")
             and float(ln.get("y2")) - float(ln.get("y1")) == 4]
    assert len(short) == 60 > len(_placed_texts(chart, "hs-tick"))
