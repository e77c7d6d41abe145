"""Observability: one snapshot of broker state (``observe.py``) that both the Prometheus
metrics (``metrics.py``, served by ``metrics_http.py``) and the console render, so the two
never disagree.

May import: oncelog's pure layers, the root modules, broker/configuration, broker/partitions,
broker/coordinators and broker/membership (it reads them; it changes nothing). The broker
(root), the handlers (for counters) and ``oncelog.console`` import it.
"""
