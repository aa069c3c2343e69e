"""Recordings of real engine runs, compared with the model row by row.

One-rank runs (:mod:`.recordings`), workloads served step by step
(:mod:`.workload_recordings`), per-rank DP/TP runs (:mod:`.rank_recordings`) and traces
replayed over HTTP against a real ``vllm serve`` (:mod:`.serve_recordings`), each read from
``tests/recorded/`` and compared with what the model predicts.

Imports: the layers below (model, schedule, inputs, answers, text).
"""
