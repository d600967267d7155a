"""Parts of the online serving benchmark ``python -m sglang_v4.bench_serving``.

* ``datasets``: the tokenizer wrapper and the dataset samplers (random, random-ids, ShareGPT,
  generated shared prefix, multi-turn).
* ``request_funcs``: one streaming HTTP client per API shape (SGLang ``/generate``, OpenAI
  completions and chat) and the multi-turn conversation driver.
* ``metrics``: ``BenchmarkMetrics``, ``calculate_metrics`` and the printed summary block.

``sglang_v4.bench_serving`` holds the runner and the CLI and re-exports these names.
"""
