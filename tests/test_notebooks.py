"""Every notebook runs headless (nbclient, kernel python3) and shows the model's numbers.

The tests read each dashboard's state (its hidden digest, read with
:func:`hisparse_model.views.digest.saved_digests`, e.g. ``B=640 q=1 C=2 W=3
crash_size=3``) and what a reader sees, its numbers, from the widget state nbclient saves, and the
HTML the notebook displays; they compare them with :func:`hisparse_model.answers.predict`
computed here, so a notebook that runs but shows the wrong numbers fails.

The six notebooks run once per session (a module fixture), each cell under the kernels'
hang guard (``kernels.CELL_TIMEOUT``); what they take is written to
``test-artifacts/notebook-seconds.json`` (a measurement, not an assertion).
"""

from __future__ import annotations

import html
import os
import re
import time

import kernels
import nbformat
import pytest

from hisparse_model import VLLM_VERSIONS, Knobs, compare_recording, predict

from hisparse_model.model import routing
from hisparse_model.recorded.recordings import load_all, recorded_dir
from hisparse_model.answers.simulate import SIMULATE_ASSUMPTIONS, simulate
from hisparse_model.schedule.workload import synthetic
from hisparse_model.recorded.workload_recordings import compare_workload_recording
from hisparse_model.model.versions import RULES
from hisparse_model.views.digest import saved_digests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK_DIR = os.path.join(ROOT, "notebooks")
NAMES = [
    "01_off_by_one",
    "02_startup_or_first_request",
    "03_fix_and_next_fix",
    "04_model_vs_engine",
    "05_your_traffic",
    "07_is_my_server_exposed",
]
SECONDS_FILE = os.path.join(ROOT, "test-artifacts", "notebook-seconds.json")


def _execute(name: str):
    path = os.path.join(NOTEBOOK_DIR, name + ".ipynb")
    nb = nbformat.read(path, as_version=4)
    t0 = time.monotonic()
    kernels.execute(nb, path, kernels.CELL_TIMEOUT)  # its kernel's coverage saved before it stops
    return nb, time.monotonic() - t0


@pytest.fixture(scope="module")
def executed():
    """name -> (executed notebook, its plain text output); runs all six once."""
    out, seconds = {}, {}
    with pytest.MonkeyPatch.context() as mp:
        # notebooks 4 and 5's live cells would run the real engine for minutes on a GPU;
        # the kernels started below inherit this
        mp.setenv("HISPARSE_NOTEBOOK_LIVE", "0")
        for name in NAMES:
            nb, secs = _execute(name)
            out[name] = (nb, _text(nb))
            seconds[name] = secs
    out["_seconds"] = seconds
    return out


def _plain(markup: str) -> str:
    """HTML as the text a reader sees (styles and tags dropped, entities decoded, spaces folded)."""
    markup = re.sub(r"<style>.*?</style>", " ", markup, flags=re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def _text(nb) -> str:
    """Everything the notebook printed or displayed as text (HTML as plain text), in order."""
    parts = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.output_type == "stream":
                parts.append(o.text)
            elif o.output_type in ("execute_result", "display_data"):
                data = o.get("data", {})
                parts.append(_plain(data["text/html"]) if "text/html" in data
                             else data.get("text/plain", ""))
            elif o.output_type == "error":  # nbclient raises first; kept for clarity
                parts.append("\n".join(o.traceback))
    return "\n".join(parts)


def dashboards(nb) -> dict[str, tuple[str, str]]:
    """name -> (digest line, numbers as plain text) of every dashboard the notebook displayed
    (read with the views' one digest reader)."""
    return {name: (text, _plain(value)) for name, (text, value) in saved_digests(nb).items()}


def _widget_values(nb) -> list[str]:
    """Every string ``value`` in the widget state nbclient saved with the notebook."""
    from hisparse_model.views.digest import WIDGET_STATE
    state = nb["metadata"].get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    return [m.get("state", {}).get("value") for m in state.values()
            if isinstance(m.get("state", {}).get("value"), str)]


def _widget_views(nb) -> int:
    return sum(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        for c in nb.cells for o in c.get("outputs", [])
    )


def test_all_notebooks_run_and_their_time_is_written_down(executed):
    """All six notebooks execute without error; the seconds each took are measured (written to
    test-artifacts/notebook-seconds.json), never asserted: they depend on the machine's load."""
    import json

    seconds = executed["_seconds"]
    assert set(seconds) == set(NAMES)
    os.makedirs(os.path.dirname(SECONDS_FILE), exist_ok=True)
    with open(SECONDS_FILE, "w") as f:
        json.dump({"seconds": seconds, "total": sum(seconds.values())}, f, indent=1)


def test_01_shows_c_w_and_the_crash_size(executed):
    """Notebook 1's dashboard shows C, W, the crash size and the exact error for the fix PR's knobs."""
    nb, text = executed["01_off_by_one"]
    pred = predict(Knobs(vllm_version="0.31.0", max_num_seqs=2))
    s = pred.sizes  # B = min(2*320, 16384) = 640, q = 1, C = min(640, 2) = 2, W = 3
    digest, numbers = dashboards(nb)["off_by_one"]
    m = re.fullmatch(r"B=(\d+) q=(\d+) C=(\d+) W=(\d+) crash_size=(\d+)", digest)
    assert m, digest
    assert tuple(map(int, m.groups())) == (s.max_num_batched_tokens, s.max_decode_query_len,
                                           s.swap_capacity, s.workspace_rows, s.workspace_rows)
    assert (s.swap_capacity, s.workspace_rows) == (2, 3)
    # the formula lines, each with its vLLM line
    assert "C = min(B, max_num_seqs * q) = min(640, 2 * 1) = 2" in numbers
    paths = numbers.replace("/ ", "/")  # a cite path may wrap at each "/" (<wbr>)
    assert "vllm/v1/hisparse/runtime.py:51-57" in paths
    assert "W = C + 1 = 2 + 1 = 3" in numbers
    assert "index_group.py:365-376" in paths
    assert routing.swap_error(3, 2) in numbers  # n = W under 0.31.0: swap_in and the ValueError
    # the dashboard's buffers picture (n = W = 3 tokens, C = 2 rows) and the "Where in vLLM"
    # table, from VersionRules.cites
    for words in ("routed tokens: n = 3", "workspace: W = 3 rows", "swap rows: C = 2 rows",
                  "token 3 has no row → ValueError stop=3, capacity=2"):
        assert words in numbers
    for cite in RULES["0.31.0"].cites.values():
        assert " ".join(str(cite).replace("`", "").split()) in text.replace("/ ", "/")
    assert _widget_views(nb) == 1


def test_02_shows_startup_and_runtime_crashes(executed):
    """Notebook 2: max_num_seqs=1 dies at start-up on n=2; max_num_seqs=2 on the 3-token prompt."""
    nb, text = executed["02_startup_or_first_request"]
    one = predict(Knobs(max_num_seqs=1))
    assert one.capture_sizes == [1, 2] and one.startup_error == routing.swap_error(2, 1)
    assert "capture sizes [1, 2]" in text
    assert routing.swap_error(2, 1) in text
    assert "not run: the engine died at start-up" in text  # its prompts never run
    two = predict(Knobs(max_num_seqs=2), [2, 3, 200])
    digest, numbers = dashboards(nb)["startup"]
    m = re.fullmatch(r"max_num_seqs=(\d+) C=(\d+) W=(\d+) capture_sizes=([\d,]*) startup=(\S+) "
                     r"prompts=(\S+)", digest)
    assert m, digest
    s, c, w, caps, startup, prompts = m.groups()
    assert (int(s), int(c), int(w)) == (2, two.sizes.swap_capacity, two.sizes.workspace_rows)
    assert [int(x) for x in caps.split(",")] == two.capture_sizes == [1, 2, 4]
    assert startup == ("ok" if two.startup_ok else "crash")
    assert prompts == ",".join(f"{p.n}:{'not_run' if not p.ran else 'ok' if p.ok else 'crash'}"
                               for p in two.prompts)
    assert prompts == "2:ok,3:crash,200:not_run"  # the engine died on the 3-token prompt
    # the max_num_seqs strip's caption, in words: 1 dies at start-up, 2..256 on a W-token
    # prompt (W = S + 1 <= 257 < 320: every such prompt fits), none safe or refused (left out)
    chart = _widget_text(nb)
    startup_crash = [s for s in range(1, 257) if not predict(Knobs(max_num_seqs=s)).startup_ok]
    assert startup_crash == [1]
    assert "max_num_seqs start-up crash: 1 · a lone prompt crashes: 2-256" in chart
    assert "safe:" not in chart and "sweep" not in chart
    assert _widget_views(nb) == 1


def _widget_text(nb) -> str:
    """Every HTML widget's value (numbers and charts) as plain text."""
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    values = [m.get("state", {}).get("value") for m in state.values()]
    return " ".join(_plain(v) for v in values if isinstance(v, str))


def _version_summary(backend: str) -> str:
    parts = []
    for v in VLLM_VERSIONS:
        p = predict(Knobs(vllm_version=v, max_num_seqs=2, attention_backend=backend), [2, 3, 200])
        prompts = ",".join(f"{o.n}:{'not_run' if not o.ran else 'ok' if o.ok else 'crash'}"
                           for o in p.prompts)
        parts.append(f"{v} startup={'ok' if p.startup_ok else 'crash'} prompts={prompts}")
    return f"backend={backend} routing=stock | " + " | ".join(parts)


def test_03_shows_each_version_and_backend(executed):
    """Notebook 3's per-version outcomes and B equal predict()'s."""
    nb, text = executed["03_fix_and_next_fix"]
    digest, numbers = dashboards(nb)["versions"]
    flash = _version_summary("FLASH_ATTN_MLA_SPARSE")
    assert digest == flash
    # 0.31.0 crashes on the 3-token prompt; 0.32.0 and 0.33.0 do not
    assert "0.31.0 startup=ok prompts=2:ok,3:crash,200:not_run" in flash  # dead after 3
    assert "0.32.0 startup=ok prompts=2:ok,3:ok,200:ok" in flash
    b = predict(Knobs(max_num_seqs=2)).sizes.max_num_batched_tokens  # min(2 * 320, 16384)
    assert re.search(rf"B \(tokens per step\)\s+{b}\s+{b}\s+{b}\s", numbers), numbers
    assert _widget_views(nb) == 1


def test_04_compares_the_committed_recordings(executed):
    """Notebook 4 counts the committed recordings and compare_recording's verdict on each."""
    nb, text = executed["04_model_vs_engine"]
    recs = load_all()
    agree = sum(not compare_recording(rec) for rec in recs)
    digest, _ = dashboards(nb)["recordings"]
    m = re.match(r"recordings=(\d+) agree=(\d+) differ=(\d+) \| ", digest)
    assert m, digest
    assert tuple(map(int, m.groups())) == (len(recs), agree, len(recs) - agree)
    # the live cell says why it cannot run, or that the tests switched it off
    assert re.search(r"^(Live engine: not available here, and nothing is wrong \(.+\)\. .+|"
                     r"live engine available \(vLLM .+\), not run: HISPARSE_NOTEBOOK_LIVE=0)$", text, re.MULTILINE), text
    assert _widget_views(nb) >= 1


def _traffic_digest(s: int, lens: list[int], spacing: int = 0) -> str:
    """Notebook 5's digest for max_num_seqs ``s`` and two requests, from simulate()."""
    sched = simulate(Knobs(max_num_seqs=s), synthetic(2, lens, spacing))
    crash, p = sched.crash, sched.plan
    word = "none" if crash is None else f"step{crash['step']}(n={sched.steps[-1].routed_tokens})"
    return (f"max_num_seqs={s} C={p.swap_capacity} W={p.workspace_rows} requests=2 "
            f"steps={len(sched.steps)} crash={word} finished={len(sched.finished)}/2")


def test_05_serves_the_traffic_and_compares_the_recorded_workloads(executed):
    """Notebook 5: [3, 2] together under max_num_seqs=4 crash at step 0 (5 = C+1); recordings agree."""
    nb, text = executed["05_your_traffic"]
    # the worked examples, shown as the dashboard shows a schedule (requests from 1)
    assert text.count(f"crash at step 0 {routing.swap_error(5, 4)}") == 1  # 3 + 2 = 5 = W
    assert "packed 3 (r1) + 2 (r2) = 5 tokens" in text
    assert f"crash at step 12 {routing.swap_error(5, 4)}" in text  # 69 - 64 cached = 5
    # the mixed step: step 1 holds r1's decode (1) and r2's prefill (4), 1 token routed
    assert "1 r1:1 r2:4 5 1 PIECEWISE 1 swap_in" in text
    for line in SIMULATE_ASSUMPTIONS:  # each an item of the notebook's list
        assert " ".join(line.split()) in text
    boards = dashboards(nb)
    digest, numbers = boards["traffic"]
    assert digest == _traffic_digest(4, [3, 2])
    assert digest == "max_num_seqs=4 C=4 W=5 requests=2 steps=1 crash=step0(n=5) finished=0/2"
    assert routing.swap_error(5, 4) in numbers
    # the advice, under the charts: C = 5 fits the 5-token step
    chart = _widget_text(nb)
    assert "max_num_seqs = 5" in chart.split("what avoids it")[1]
    # the max_num_seqs map: S = 1 dies at start-up, S = 4 on this traffic, the rest serve it
    assert ("max_num_seqs start-up crash: 1 · crashes on this traffic: 4 · serves it all: "
            "2-3,5-64") in chart
    recs = load_all(os.path.join(recorded_dir(), "workloads"))
    agree = sum(not compare_workload_recording(r) for r in recs)
    digest, _ = boards["workload_recordings"]
    assert digest.startswith(f"workload_recordings={len(recs)} agree={agree} "
                             f"differ={len(recs) - agree} | ")
    assert re.search(r"^(Live engine: not available here, and nothing is wrong \(.+\)\. .+|"
                     r"live engine available \(vLLM .+\), not run: HISPARSE_NOTEBOOK_LIVE=0)$", text, re.MULTILINE), text
    assert _widget_views(nb) == 2


def test_07_says_the_default_serve_command_is_exposed(executed):
    """Notebook 7: vllm serve's defaults (S = 1024, B = 8192, C = 1024) on 0.31.0 are exposed by
    1025-token steps: a lone prompt, the last chunk of 8192 + 1025 = 9217 tokens, a burst."""
    nb, _ = executed["07_is_my_server_exposed"]
    digest, numbers = dashboards(nb)["exposure"]
    assert digest == ("exposed=exposed kinds=lone_prompt,last_chunk,burst "
                      "tokens=1025,1025,1025 advice=6 verified=true C=1024 W=1025")
    assert routing.swap_error(1025, 1024) in numbers and "9217-token prompt" in numbers
    assert _widget_views(nb) == 2  # the dashboard, and the risk panel under it
    # the odds under the example traffic for the dashboard's server, no step time measured:
    # 4 seeds of 20 minutes at each of 6, 12 and 25 ms per step, one line each
    svg = [v for v in _widget_values(nb) if "hs-risk-band" in v and "<svg" in v]
    assert len(svg) == 1 and "data-step-ms='6,12,25'" in svg[0]
    text = _plain(svg[0])
    for ms in (6, 12, 25):
        assert re.search(rf"at {ms} ms per step [0-4] of 4 seeds crashed within 20 minutes",
                         text), text
    assert "For the pasted vllm serve command: vLLM 0.31.0, max_num_seqs 1024" in text
