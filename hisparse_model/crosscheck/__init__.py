"""Cross-checks of the model against vLLM's own code, installed --no-deps and run on CPU."""
