"""The answers to a user's questions, computed from the model.

Which prompts crash (:mod:`.predict`), what a workload does step by step (:mod:`.simulate`,
with what a crash loses: :mod:`.lost`), whether any traffic can kill a server
(:mod:`.exposure`, :mod:`.exposed_steps`, :mod:`.exposure_dp`, :mod:`.verdict`), what to
change (:mod:`.advice`, :mod:`.deployment_advice`), how soon under real traffic
(:mod:`.traffic_risk`, in forked workers: :mod:`.forked`), what a pasted error is
(:mod:`.diagnose`), vectorised sweeps (:mod:`.sweep`).

Imports: :mod:`hisparse_model.model`, :mod:`hisparse_model.schedule`,
:mod:`hisparse_model.inputs`.  A new exposure kind goes to :mod:`.exposure` (one engine) or
:mod:`.exposure_dp` (an idle DP rank).
"""
