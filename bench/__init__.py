"""oncelog's benchmarks (issue 7). ``python -m bench --help``; results in docs/PERFORMANCE.md.

Modules: ``systems`` (oncelog, Tansu, librdkafka's mock cluster as child processes),
``mock_cluster`` (the mock's child process), ``clients`` (confluent-kafka measurements),
``scenarios`` (named sets of cases), ``report`` (Markdown, plots, the docs section),
``common`` (RSS/CPU sampling, Markdown tables). The older standalone scripts
(``produce_consume``, ``idempotence``, ``transactions``, ``spark_pipeline``) reuse them.
"""
