"""Session fixtures of the process-level tests (crash harness, concurrent jobs): one stream landed
and ingested once, and each strategy's uninterrupted run, computed when first needed and shared."""

from __future__ import annotations

import pytest

from etl import jobs
from etl.io import memory_tables
from etl.generator import StreamSpec, generate_stream
from tests.helpers import CRASH_RUN, CRASH_T0, crash_config, deterministic_tables, reference_in_memory


@pytest.fixture(scope="session")
def crash_landing(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash-landing")
    generate_stream(
        StreamSpec(start=CRASH_T0, duration_s=120, rate=6, seed=31, key_domain=300, p=0.6, q=0.1, r=0.25, s=0.05), root
    )
    return root


@pytest.fixture(scope="session")
def crash_ingested(spark, crash_landing, tmp_path_factory):
    """The interval ingested once; a case that crashes in the load starts from a copy of it."""
    root = tmp_path_factory.mktemp("crash-ingested")
    jobs.ingest(spark, crash_config(root, crash_landing), CRASH_RUN)
    return root


@pytest.fixture(scope="session")
def uninterrupted(spark, crash_landing, tmp_path_factory):
    """Per strategy, the deterministic tables of the uninterrupted run."""
    root = tmp_path_factory.mktemp("crash-reference")
    cache: dict[str, dict] = {}

    def get(strategy: str) -> dict:
        if strategy not in cache:
            # In memory (a reference: tests.helpers.reference_in_memory); the killed runs are Delta's.
            cfg = reference_in_memory(crash_config(root / strategy, crash_landing), root / strategy)
            jobs.ingest(spark, cfg, CRASH_RUN)
            jobs.load(spark, cfg, CRASH_RUN, strategy=strategy)
            cache[strategy] = deterministic_tables(spark, cfg)
            memory_tables.forget_under(str(root / strategy))  # only the deterministic tables are kept
        return cache[strategy]

    return get
