"""Requests over engine steps: workloads, vLLM's scheduler, one rank's serving, DP sync.

A :class:`~.workload.Workload` (requests with arrival steps; prompts that share content
block by block: :mod:`.shared_prompts`, keyed as vLLM's prefix cache keys them:
:mod:`.prefix_keys`), the scheduler vLLM's version runs (:mod:`.scheduler_config`,
:mod:`.scheduler`), the serving path of prompts one at a time (:mod:`.serving`) and the
data-parallel ranks' per-step sync (:mod:`.data_parallel`).

Imports: :mod:`hisparse_model.model` only.
"""
