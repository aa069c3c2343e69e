"""Notebook 7's "how soon" panel: the risk of the server its exposure dashboard shows.

:class:`RiskPanel` follows the dashboard (the pasted command with any knob moved since, or
the knobs) and draws :func:`~.risk_chart.risk_html` at a measured step time, or the band
of :func:`~.risk_band.band_html` over several when none was measured.
"""

from __future__ import annotations

from ..answers.traffic_risk import SEEDS
from ..text.glossary import defined
from .risk_band import band_html
from .risk_chart import example_traffic_path, risk_for
from .svg import esc


BAND_SEEDS = 4  # seeds per step time in the band (three estimates: a few seconds each)


class RiskPanel:
    """Notebook 7's "how soon" for the server its exposure dashboard shows (the pasted
    command with any knob moved since, or the knobs), under a traffic file (default: the
    bundled example; a trace with arrival times is replayed): at a measured ``step_ms``, or
    without one the band over :data:`~.risk_band.BAND_STEP_MS`.  Estimated when built and on
    a click (seconds: every seed is served to its first crash), greyed with a line saying so
    while the dashboard shows another server than the one estimated."""

    def __init__(self, dash, traffic_path: str | None = None, minutes: float = 20,
                 seeds: int | None = None, step_ms: float | None = None):
        import ipywidgets as W

        self.dash, self.traffic_path, self.minutes = dash, traffic_path, minutes
        self.step_ms = step_ms
        self.seeds = seeds or (SEEDS if step_ms is not None else BAND_SEEDS)
        self.estimated_for = None  # the knobs of the chart shown
        self.button = W.Button(description="estimate for the server above",
                               tooltip="serve the traffic to the server the dashboard above "
                                       "shows, seed by seed (takes seconds)",
                               layout={"width": "280px"})
        self.button.add_class("hs-estimate")
        self.note = W.HTML()
        self.chart = W.HTML()
        self.widget = W.VBox([self.button, self.note, self.chart], layout={"width": "100%"})
        self.widget.add_class("hisparse-dashboard")
        self.button.on_click(lambda _: self.estimate())
        for control in dash.controls.values():
            control.observe(lambda _: self.mark(), names="value")
        self.estimate()

    def _server(self):
        """(knobs, where they came from) the dashboard shows, or None where it shows none."""
        try:
            return self.dash.deployment()
        except ValueError:
            return None

    def estimate(self) -> None:
        server = self._server()
        if server is None:
            self._refused("The dashboard above shows no server (its command or knobs are "
                          "refused): nothing to estimate.", "hs-note")
            return
        knobs, source = server
        try:
            if self.step_ms is None:
                html = band_html(knobs, self.traffic_path or example_traffic_path(),
                                 self.minutes, self.seeds)
            else:
                html = risk_for(knobs, self.traffic_path, self.minutes, self.seeds,
                                self.step_ms)
        except ValueError as exc:
            self._refused(str(exc), "hs-error")
            return
        self.estimated_for = knobs
        self.chart.value = (f"<p class='hs-risk-source'>For {esc(source)}: "
                            f"{esc(server_words(knobs))}.</p>" + html)
        self.mark()

    def _refused(self, message: str, css: str) -> None:
        """No answer for this server: the refusal, the words it uses defined, and no chart
        (an earlier server's chart under it would read as this one's answer)."""
        self.estimated_for = None
        self.chart.value = ""
        self.chart.remove_class("hs-stale-risk")
        words = "".join(f"<li><b>{esc(term)}</b>: {esc(text)}</li>"
                        for term, text in defined(message))
        self.note.value = (f"<div class='{css} hs-risk-refused'>{esc(message)}</div>"
                           + (f"<ul class='hs-note hs-words'>{words}</ul>" if words else ""))

    def mark(self) -> None:
        """Grey the chart, and say so, while the dashboard shows another server."""
        server = self._server()
        stale = self.estimated_for is not None and (server is None
                                                    or server[0] != self.estimated_for)
        if stale:
            self.chart.add_class("hs-stale-risk")
            self.note.value = ("<div class='hs-note hs-risk-stale'>The server above changed "
                               "since this estimate: press <b>estimate for the server "
                               "above</b> (takes seconds).</div>")
        else:
            self.chart.remove_class("hs-stale-risk")
            self.note.value = ""


def server_words(knobs) -> str:
    """The knobs that size the buffers, in a line: vLLM, S, B, K, max_model_len, backend."""
    return (f"vLLM {knobs.vllm_version}, max_num_seqs {knobs.max_num_seqs}, "
            f"max_num_batched_tokens {knobs.max_num_batched_tokens or 'default'}, "
            f"num_speculative_tokens {knobs.num_speculative_tokens or 0}, max_model_len "
            f"{knobs.max_model_len}, {knobs.attention_backend}")
