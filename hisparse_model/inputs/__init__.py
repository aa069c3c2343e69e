"""Reading what the user gives: a launch command, vLLM's flags, a start-up log, a trace, a server.

``check -- vllm serve ...`` (:mod:`.launch`, :mod:`.vllm_flags`, :mod:`.hisparse_config`),
``check --from-log`` (:mod:`.startup_log` with :mod:`.log_lines`, :mod:`.log_repr`,
:mod:`.log_text`), ``simulate --traffic`` files and traces (:mod:`.traffic_file`,
:mod:`.traces`) and the step time of a running server (:mod:`.step_time`).  Each refuses bad
input in one line naming the value.

Every byte and number comes in through :mod:`hisparse_model.boundary` (bounded reads, one
HTTP fetch, ranged numbers).

Imports: :mod:`hisparse_model.boundary`, :mod:`hisparse_model.model` and
:mod:`hisparse_model.schedule`.  A new input format goes here.
"""
