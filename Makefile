# Set-up and entry points. `make demo` and `make test` do all the set-up on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export SPARK_LOCAL_IP ?= 127.0.0.1

.PHONY: setup demo demo-shop test test-gate test-pure test-fast test-spark test-e2e test-slow test-compose simulate benchmark benchmark-stream benchmark-stream-piece benchmark-delay-targets benchmark-split-cost benchmark-resident-copy benchmark-object-store benchmark-targets benchmark-thesis-full benchmark-facts crash-matrix airflow-start airflow-stop clean

$(VENV)/.installed: pyproject.toml constraints.txt scripts/setup.sh etl/io/jvm/NioLocalFileSystem.java
	@scripts/setup.sh $(VENV)

setup: $(VENV)/.installed

demo: setup
	@scripts/demo.sh

demo-shop: setup  ## the worked example of docs/model.md: two dimensions, then the orders fact, each through its DAG
	@scripts/demo_shop.sh

test: setup  ## the three tiers below in one session (one Spark session shared); what CI runs
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

test-gate: setup  ## the quick gate: the pure tier, every module imported, and each guarantee's cheapest Spark or process test (tests/gate.py)
	$(PY) -m pytest -m "(gate or not (spark or e2e)) and not slow" $(PYTEST_ARGS)

test-pure: setup  ## tier 1, no JVM: policies, records, config, registry, simulator, DAG wiring, the offline Data Docs in a browser (about two minutes)
	$(PY) -m pytest -m "not spark and not e2e and not slow" $(PYTEST_ARGS)

test-fast: test-pure

test-spark: setup  ## tier 2, the shared local Spark session: ingest, strategies, load, quality, maintenance
	$(PY) -m pytest -m "spark and not e2e and not slow" $(PYTEST_ARGS)

test-e2e: setup  ## tier 3, real processes: SIGKILLs, a Spark cluster, Airflow standalone, a Kafka broker
	$(PY) -m pytest -m "e2e and not slow" $(PYTEST_ARGS)

test-slow: setup  ## the slow tier: random SIGKILLs of whole runs (3 strategies), a full disk, 12 fuzzed landing trees, and the end-to-end tests CI cannot afford yet (docs/guarantees.md)
	ETL_CRASH_REPORT=var/random-kills.json $(PY) -m pytest -m slow $(PYTEST_ARGS)
	ETL_FUZZ_TREES=12 ETL_FUZZ_REPORT=var/fuzz.json $(PY) -m pytest tests/etl/test_ingest_fuzz.py $(PYTEST_ARGS)

test-compose:  ## docker/compose.yaml up for real on images built here (docker/compose.offline.yaml): one load DAG run through the REST API, the tables read, then down -v (heavy; needs a Docker engine and `docker compose`; docs/deployment.md)
	@scripts/compose_test.sh

simulate: setup  ## the thesis's Figures 6.5-6.13 from the simulator (about 9 minutes)
	$(VENV)/bin/etl simulate figures --out docs/results/simulator

benchmark-stream: setup  ## the always-on loader (etl stream) timed live beside the scheduled way on one stream (about 20 minutes)
	$(PY) -m benchmarks.stream_live

benchmark-stream-piece: setup  ## where one piece of the always-on loader goes, call by call (native and partitioned-range, about seven minutes)
	$(PY) -m benchmarks.stream_piece

benchmark-delay-targets: setup  ## issue 46's three delay targets in one run (Kafka beside the hand-written baseline, minute files, the full-size step; about 90 minutes)
	$(PY) -m benchmarks.delay_targets

benchmark-split-cost: setup  ## what the split at a run's end costs at full size (20 M keys seeded in bulk, three run ends; about 8 minutes, 3 GB under var/)
	$(PY) -m benchmarks.split_cost --work var/split-cost --out docs/results/split_cost.json

benchmark-resident-copy: setup  ## a step's join with the resident copy and a commit's fold, at the full-size run's copy (1.3 M rows), held by key against unpartitioned, side by side (about 3 minutes)
	$(PY) -m benchmarks.resident_copy --out docs/results/resident_copy.json

benchmark-object-store: setup  ## a warehouse on an S3 API (a local S3-API server) against the local filesystem, per batch, side by side (about ten minutes)
	$(PY) -m benchmarks.object_store

FULLWORK ?= var/fullwork
benchmark-targets: setup  ## issue 26's targets at full size (20 M keys) in one run: seed, batch time against the hand-written baseline, the always-on loader (about 1.5 hours)
	$(PY) -m benchmarks.strategies --size full --seed-only --work $(FULLWORK)
	$(PY) -m benchmarks.strategies --size full --rates 1000 --minutes 6 --strategies native,partitioned-range,handwritten \
	    --work $(FULLWORK) --out docs/results/targets
	$(PY) -m benchmarks.stream_live --work $(FULLWORK) --rate 1000 --minutes 10 --run-minutes 10 --k 16 \
	    --modes stream:partitioned-range,stream:meshjoin --out docs/results/targets/stream_live-full.json

benchmark-thesis-full: setup  ## issue 47's full-size live runs from Kafka at the thesis's skew, each call timed: seed, partitioned-range for 30 minutes (three 10-minute runs, state carried, the services on), MESHJOIN for 10 (about 1.5 hours with the waits for a schedule boundary, 7 GB under var/)
	$(PY) -m benchmarks.strategies --size full --seed-only --work $(FULLWORK)
	$(PY) -m benchmarks.kafka_stream_calls $(THESIS_FULL) --run-minutes 10 --minutes 30 --deadline-minutes 10 \
	    --modes "stream:partitioned-range:$(THESIS_PIECES):sizes=derived:split_segments_per_run=16" \
	    --out docs/results/thesis_full/partitioned-range-thesis.json
	$(PY) -m benchmarks.kafka_stream_calls $(THESIS_FULL) --run-minutes 5 --minutes 10 --deadline-minutes 5 \
	    --modes "stream:meshjoin:$(THESIS_PIECES)" --out docs/results/thesis_full/meshjoin-thesis.json

THESIS_FULL = --kafka --work $(FULLWORK) --rate 1000 --skew thesis --micro-batch-seconds 10 --k 16 --driver-memory 8g
THESIS_PIECES = piece_seconds=10:micro_batch_seconds=10:stream_grace_seconds=1:apply_interval_seconds=60

benchmark-facts: setup  ## a fact stream against a 20 M-key dimension, the lookups by native and partitioned-range (docs/model.md "Facts")
	$(PY) -m benchmarks.facts --keys 20000000 --rate 1000 --minutes 4 --strategies native,partitioned-range \
	    --work $(FULLWORK)-facts --out docs/results/facts

benchmark: setup  ## the four strategies and the hand-written baseline in Spark at several rates (small size: about 30 minutes)
	$(PY) -m benchmarks.strategies --size small --out docs/results/strategies

crash-matrix: setup  ## SIGKILL at every commit point of every strategy, in chains, with each batch applied at once, with the MERGEs at the run's end, and with each apply beside the next batch's decisions (about 30 minutes a mode on a quiet 2-core machine), and each strategy killed at the table service's commit point (about 4 minutes)
	ETL_CRASH_MATRIX=chain ETL_CRASH_REPORT=var/crash-matrix.json $(PY) -m pytest -m "not slow" tests/etl/test_crash.py $(PYTEST_ARGS)
	ETL_CRASH_MATRIX=chain ETL_CRASH_APPLY_INTERVAL=3600 ETL_CRASH_REPORT=var/crash-matrix-deferred.json $(PY) -m pytest -m "not slow" tests/etl/test_crash.py $(PYTEST_ARGS)
	ETL_CRASH_MATRIX=chain ETL_CRASH_APPLY_INTERVAL=0.001 ETL_CRASH_REPORT=var/crash-matrix-beside.json $(PY) -m pytest -m "not slow" tests/etl/test_crash.py $(PYTEST_ARGS)
	ETL_CRASH_MATRIX=full ETL_CRASH_APPLY_INTERVAL=0.001 ETL_CRASH_SERVICES=1 ETL_CRASH_DELETION_VECTORS=on ETL_CRASH_REPORT=var/crash-matrix-services.json $(PY) -m pytest -m "not slow" tests/etl/test_crash.py -k "services" $(PYTEST_ARGS)

airflow-start: setup  ## Airflow standalone on http://127.0.0.1:8080 (SQLite, this project's DAGs)
	@scripts/airflow.sh start

airflow-stop:
	@scripts/airflow.sh stop

clean:
	rm -rf var spark-warehouse metastore_db derby.log
