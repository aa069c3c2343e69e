"""The model of one engine configuration: knobs to sizes, start-up batches and one batch's route.

A :class:`~.knobs.Knobs` (what a user sets), the rules of each vLLM release
(:mod:`.versions`), the sizes vLLM derives (:mod:`.plan`: B, q, C, W, capture sizes, the KV
pool), the batches start-up runs (:mod:`.startup`, :mod:`.sizing_warmup`,
:mod:`.draft_steps`), how a batch is dispatched to a CUDA graph (:mod:`.dispatch`) and where
the routing sends it (:mod:`.routing`), one step's record (:mod:`.step_record`).

Imports: nothing else of the package (the bottom layer).  A new knob goes to
:mod:`.knobs` (its declaration generates its CLI flag and dashboard control); a new vLLM
release's rules to :mod:`.versions`.
"""
