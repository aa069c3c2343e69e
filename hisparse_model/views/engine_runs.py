"""Notebook 4's dashboard: every recorded engine run next to the model's prediction."""

from __future__ import annotations

import os
import re

from ..text import chart_data as cd
from ..answers.predict import predict
from ..recorded.recordings import load_all, summary_row
from .buffers import picture_for_prediction, picture_html
from .charts import recordings_chart
from .controls import choice_control
from .dashboard import Dashboard, Screen
from .tables import esc, outcome_html, table

# what each part of a recording's name says, as (pattern, how the page writes it, words)
# (tests/test_engine_runs_view.py: every committed recording's name is made of these parts)
NAME_PARTS = (
    (r"w", "w", "a workload served step by step (several requests), not prompts one by one"),
    (r"v0\.3\d\.0", "v0.3x.0", "the vLLM release"),
    (r"stock", "stock", "vLLM's own routing"),
    (r"fix", "fix", "0.31.0 with the upstream fix's routing"),
    (r"serve", "serve", "served through AsyncLLM, the engine class vllm serve runs"),
    (r"s\d+", "sN", "max_num_seqs (s2: 2)"),
    (r"b\d+", "bN", "max_num_batched_tokens (b64: 64)"),
    (r"l\d+", "lN", "max_model_len (l16384: 16,384)"),
    (r"mtp\d", "mtpK", "MTP with that many speculative tokens"),
    (r"blocks\d+", "blocksN", "num_gpu_blocks_override: a KV pool of that many blocks"),
    (r"eager", "eager", "enforce_eager (no CUDA graphs)"),
    (r"piecewise", "piecewise", "cudagraph_mode PIECEWISE"),
    (r"flashmla", "flashmla", "the FLASHMLA_SPARSE attention backend"),
    (r"prefill", "prefill", "prompts whose prefill 0.33.0 sends to the all-resident path"),
    (r"chunked", "chunked", "a prompt longer than B, computed in chunks"),
    (r"concurrent", "concurrent", "requests arriving together"),
    (r"spaced", "spaced", "the same requests arriving apart"),
    (r"long", "long", "a long workload (56 requests)"),
    (r"lost", "lost", "a crash right after a request's last token (its output is lost)"),
    (r"prefix", "prefix", "prompts sharing a prefix (prefix caching)"),
    (r"startup", "startup", "a workload whose engine dies at start-up"),
)
NAMING = ("A recording's name says its knobs, part by part: <code>v0.31.0-stock-s2-b64</code> "
          "is vLLM 0.31.0 with its own routing, max_num_seqs 2 and max_num_batched_tokens 64."
          "<ul>" + "".join(f"<li><code>{esc(shown)}</code>: {esc(words)}</li>"
                           for _, shown, words in NAME_PARTS) + "</ul>")


def name_parts(name: str) -> list[tuple[str, str]]:
    """``[(part, what it says), ...]`` of a recording's name; ValueError naming a part no
    entry of :data:`NAME_PARTS` reads."""
    import re

    out = []
    for part in name.split("-"):
        words = next((w for p, _, w in NAME_PARTS if re.fullmatch(p, part)), None)
        if words is None:
            raise ValueError(f"recording {name}: {part!r} says nothing NAME_PARTS knows")
        out.append((part, words))
    return out


def knobs_text(k) -> str:
    """The knobs that differ from the defaults, in words: every one (max_model_len,
    num_gpu_blocks_override, prefix caching ... as much as S and B), so that each part of a
    recording's name is in its row."""
    default = type(k)(max_num_seqs=k.max_num_seqs).as_dict()
    parts = [f"max_num_seqs={k.max_num_seqs}"]
    for name, value in k.as_dict().items():
        if name in ("vllm_version", "routing", "max_num_seqs") or value == default.get(name):
            continue
        parts.append(str(value) if name == "attention_backend" else f"{name}={value}")
    return ", ".join(parts)


def phase_name(phase) -> str:
    """A recorded phase as the dashboards number prompts: ``prompt:0`` is ``prompt 1``."""
    m = re.fullmatch(r"prompt:(\d+)(.*)", str(phase))
    return f"prompt {int(m[1]) + 1}{m[2]}" if m else str(phase)


def event_name(j: int, event: str) -> str:
    """Event ``j`` of a recording's row: ``start-up``, then ``prompt j (n tokens)``."""
    m = re.fullmatch(r"prompt n=(\d+)", event)
    return f"prompt {j} ({m[1]} tokens)" if m else event


class RecordingsDashboard(Dashboard):
    """One row per recording (verdict by ``compare_recording``); pick one for its details."""

    name = "recordings"

    def __init__(self, recordings: list[dict] | None = None, directory: str | None = None,
                 name: str = "recordings"):
        self.name = name
        self.recordings = load_all(directory) if recordings is None else list(recordings)
        self.rows = [summary_row(r) for r in self.recordings]
        for r in self.rows:
            r["engine_keys"] = [cd.outcome_key(o) for o in r["engine"]]
            r["model_keys"] = [cd.outcome_key(o) for o in r["model"]]
        names = [r["name"] for r in self.rows] or ["(no recordings)"]
        super().__init__({"recording": choice_control(
            "recording", names, names[0], "the recording to highlight and detail")},
            intro=f"<div class='hs-note'>{NAMING}</div>")

    def compute(self) -> Screen:
        agree = sum(r["agrees"] for r in self.rows)
        summary = f"recordings={len(self.rows)} agree={agree} differ={len(self.rows) - agree}"
        labels = {"summary": summary, "recordings": str(len(self.rows)), "agree": str(agree),
                  "differ": str(len(self.rows) - agree)}
        if not self.rows:
            return Screen({}, None, labels, "<div class='hs-note'>No recordings found in "
                          "tests/recorded/ (make some with <code>hisparse live"
                          "</code> on a GPU).</div>", dict)
        selected = self.value("recording")
        i = [r["name"] for r in self.rows].index(selected)
        row = self.rows[i]
        labels["selected"] = selected
        labels["events"] = "; ".join(f"{ev} model={m} engine={e}" for ev, m, e in zip(
            row["events"], row["model_keys"], row["engine_keys"]))
        labels["summary"] = f"{summary} | {selected}: {labels['events']}"
        body = (self._headline(row) + self._picture(row) + self._table(selected)
                + self._detail(self.recordings[i], row))
        plot = {"rows": [{k: r[k] for k in ("name", "engine_keys", "model_keys", "agrees")}
                         for r in self.rows], "selected": selected}
        return Screen({"recording": selected}, None, labels, body, lambda: plot)

    def _headline(self, row: dict) -> str:
        """The one answer first: do the model and the engine agree, on every recording."""
        agree = sum(r["agrees"] for r in self.rows)
        mark = "✓" if agree == len(self.rows) else "✗"
        return (f"<div class='hs-headline'>{mark} The model agrees with the real engine on "
                f"<b>{agree} of {len(self.rows)}</b> recorded runs; {esc(row['name'])} "
                f"{'agrees' if row['agrees'] else 'differs'}.</div>")

    @staticmethod
    def _picture(row: dict) -> str:
        """The buffers under the selected recording's knobs, as the model predicts them."""
        return picture_html(picture_for_prediction(predict(row["knobs"])))

    def _table(self, selected: str) -> str:
        rows, classes = [], []
        for r in self.rows:
            k = r["knobs"]
            c_model, c_engine = r["sizes"].get("C", (None, None))
            events = "<br>".join(  # the header says which is which: model · engine
                f"{esc(event_name(j, ev))}: {outcome_html(m, m is not None)} · "
                f"{outcome_html(e, e is not None)}"
                for j, (ev, m, e) in enumerate(zip(r["events"], r["model"], r["engine"])))
            verdict = "✓ agrees" if r["agrees"] else f"✗ {esc(r['diffs'][0][:160])}"
            rows.append([f"<b>{esc(r['name'])}</b>", verdict,
                         esc(f"{k.vllm_version} {k.routing}: {knobs_text(k)}"),
                         f"{c_model} / {c_engine}", events])
            classes.append("hs-selected" if r["name"] == selected else
                           "" if r["agrees"] else "hs-crash")
        # the verdict next to the name: it stays in view however narrow the notebook is
        return ("<div class='hs-scroll' style='max-height:460px'>"
                + table(["recording", "verdict (compare_recording)", "vLLM, routing: knobs",
                         "C: model / engine", "each event: model · engine"], rows, raw=True,
                        row_classes=classes) + "</div>")

    @staticmethod
    def _detail(rec: dict, row: dict) -> str:
        prov = row["provenance"]
        facts = ", ".join(f"{key} {prov[key]}" for key in ("vllm", "torch", "gpu", "date")
                          if prov.get(key))
        log = rec.get("routing_log") or []
        rows = [[esc(phase_name(x.get("phase"))), str(x.get("num_actual_tokens")), str(x.get("num_tokens")),
                 esc(x.get("route")), str(x.get("calls")), esc(x.get("error") or "")]
                for x in log[:40]]
        more = f"<div class='hs-note'>… {len(log) - 40} more rows</div>" if len(log) > 40 else ""
        diffs = "".join(f"<li><code>{esc(d)}</code></li>" for d in row["diffs"])
        return (f"<div class='hs-note'><b>{esc(row['name'])}</b>: {esc(facts)}</div>"
                + (f"<ul class='hs-diffs'>{diffs}</ul>" if diffs else "")
                + "<div class='hs-note'>its routing log (layer 0 of each index group, identical "
                  "consecutive calls folded):</div>"
                + table(["phase", "tokens", "routed n", "route",
                         "calls", "error"], rows) + more)

    def draw(self) -> str:
        return recordings_chart(self.plot_data["rows"], self.plot_data["selected"])


def recordings_dashboard(recordings: list[dict] | None = None, directory: str | None = None,
                         name: str = "recordings") -> RecordingsDashboard:
    """Notebook 4: recordings (default ``tests/recorded/*.json``) against the model."""
    return RecordingsDashboard(recordings, directory, name)


def live_status(skip: str | None = None) -> str | None:
    """The live engine's vLLM version when a live run should go ahead, else None and a calm note.

    No GPU engine here is the usual case on a laptop, not a failure: the note says so, and
    that the recordings shown are real engine runs.  ``skip`` says why an available engine is
    not run (the tests' HISPARSE_NOTEBOOK_LIVE=0).
    """
    from ..engine.live import LiveUnavailable, check_available

    try:
        version = check_available()
    except LiveUnavailable as exc:
        print(f"Live engine: not available here, and nothing is wrong ({exc}). The "
              "recordings above are real engine runs; on a CUDA GPU with vLLM "
              "(pip install -e \".[gpu]\") this cell runs one live.")
        return None
    if skip:
        print(f"live engine available (vLLM {version}), not run: {skip}")
        return None
    return version


LIVE_OUT_ENV = "HISPARSE_LIVE_OUT_DIR"  # where the live cells write (tests: their own folder)


def live_output_path(filename: str = "live-notebook.json") -> str:
    """Where notebook 4's live cell writes its recording: ``test-artifacts/`` (git-ignored),
    or ``$HISPARSE_LIVE_OUT_DIR`` (tests running side by side each give their own)."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(os.environ.get(LIVE_OUT_ENV) or os.path.join(here, "test-artifacts"),
                        filename)
