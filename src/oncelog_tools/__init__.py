"""Tools around oncelog that are not the product (installed with it, never imported by it):

- ``oncelog_tools.demo``: ``make demo`` — a broker, a transactional generator, the exactly-once
  Spark pipeline (``demo/pipeline.py``), faults and the read_committed checker;
- ``oncelog_tools.verify``: the fault harnesses behind ``oncelog verify copy|queue|torn`` (they
  mount tmpfs, kill processes and need clients the product does not);
- ``oncelog_tools.spark``: a loopback-only SparkSession and a process-tree killer, shared by the
  demo, the Spark tests and the Spark benchmarks.

The product (``oncelog``) does not import this package, except the command line, which offers
``oncelog verify`` when it is installed (checked by tests/unit/test_layers.py). What the product's
own testing API needs lives in the product: the PostgreSQL server behind
``oncelog.testing.Cluster`` is ``oncelog.testing.pgserver``, which the tools import from there.
"""
