"""What the notebooks and the app show: dashboards, charts and tables that only draw the model.

=====================  ==========================================================
``controls``           a control per knob, generated from ``knobs.knob_specs()``
``prompt_box``         the prompt_lens box: its value in one message (an anywidget)
``dashboard``          the shared update loop: controls -> model -> numbers, chart
``numbers_pane``       the numbers, and those one move away, shown before the kernel answers
``outbox``             numbers out of the kernel before the chart is computed
``off_by_one``         notebook 1: C, W and the one crashing batch size
``first_request``      notebook 2: start-up batches, prompts, the max_num_seqs strip
``fixes``              notebook 3: 0.31.0 / 0.32.0 / 0.33.0 / 0.34.0 side by side
``engine_runs``        notebook 4: recorded engine runs against the model
``traffic``            notebook 5: a workload step by step, its crash, the max_num_seqs map
``traffic_charts``     notebook 5's timeline and max_num_seqs map (SVG)
``two_gpus``           notebook 6: two DP ranks side by side, the idle rank's dummy batch,
                       the scenario at every max_num_seqs (a strip)
``exposure``           notebook 7: is a server exposed to any traffic, examples, advice
``risk_chart``         notebook 7's "how soon": the crash odds over time, by kind of step
``risk_band``          the same at several step times, when none was measured
``risk_panel``         the panel that follows notebook 7's dashboard and draws one of them
``buffers``            the one picture of the bug: a step's tokens, W workspace rows, C swap rows
``exercises``          each notebook's "Try this": questions, the controls each starts from
``answers``            the Try-this answers, computed by the model from a question's start
``charts`` / ``svg``   the SVG charts and the one palette
``tables``             HTML tables, formulas with their vLLM lines, assumptions
``primer``             notebook 1's "Where in vLLM"
``page``               every dashboard on one page (the standalone app)
=====================  ==========================================================

The data behind each picture comes from :mod:`hisparse_model.text.chart_data` and
:func:`hisparse_model.recorded.recordings.summary_row`; nothing here routes a batch.
"""

from .engine_runs import live_output_path, recordings_dashboard
from .first_request import startup_dashboard
from .fixes import versions_dashboard
from .off_by_one import off_by_one_dashboard

__all__ = ["live_output_path", "off_by_one_dashboard", "recordings_dashboard",
           "startup_dashboard", "versions_dashboard"]
