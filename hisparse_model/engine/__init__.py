"""Companion engine module: run the real vLLM + HiSparse engine and record what it does.

Nothing here imports vllm or torch at module level.  :mod:`.llm_args` builds the
``LLM(...)`` arguments (pure Python), :mod:`.instrument` wraps vLLM's own methods
at run time (inside the child process), :mod:`.child` runs one configuration and
:mod:`.live` starts children with timeouts and writes recordings atomically.
"""
