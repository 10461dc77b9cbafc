import hashlib
import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from etl.generator import SKEWS, StreamSpec, b_model_volumes, generate_stream, pqrs_points, skew
from etl.io.landing import piece_of

T0 = datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)


def _read_all(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*.jsonl"))}


def test_same_seed_same_files_other_seed_other_files(tmp_path):
    spec = StreamSpec(start=T0, duration_s=120, rate=30, seed=3)
    generate_stream(spec, tmp_path / "a")
    generate_stream(spec, tmp_path / "b")
    generate_stream(StreamSpec(start=T0, duration_s=120, rate=30, seed=4), tmp_path / "c")
    assert _read_all(tmp_path / "a") == _read_all(tmp_path / "b")
    assert _read_all(tmp_path / "a") != _read_all(tmp_path / "c")


@pytest.mark.parametrize("piece_seconds", [60, 15])
def test_files_are_per_source_and_arrival_piece(tmp_path, piece_seconds):
    generate_stream(StreamSpec(start=T0, duration_s=150, rate=20, malformed_share=0), tmp_path, piece_seconds=piece_seconds)
    files = sorted(tmp_path.rglob("*.jsonl"))
    assert {f.parent.parent.parent.name for f in files} == {"source_id=crm", "source_id=web"}
    for f in files:
        start = piece_of(f.name)
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            arrival = datetime.fromisoformat(rec["arrival_ts"].replace("Z", "+00:00"))
            assert start <= arrival < start + timedelta(seconds=piece_seconds), f.name
            assert f"source_id={rec['source_id']}" == f.parent.parent.parent.name
    assert len(files) > (2 * 150 // piece_seconds) * 0.8  # about one file a source and piece


def test_refuses_to_overwrite_landed_data(tmp_path):
    spec = StreamSpec(start=T0, duration_s=60, rate=5)
    generate_stream(spec, tmp_path)
    with pytest.raises(FileExistsError):
        generate_stream(spec, tmp_path)
    generate_stream(spec, tmp_path, overwrite=True)


def test_b_model_conserves_volume_and_bias_makes_bursts():
    rng = np.random.default_rng(1)
    smooth = b_model_volumes(100_000, 10, 0.5, rng)
    bursty = b_model_volumes(100_000, 10, 0.8, rng)
    assert smooth.sum() == bursty.sum() == 100_000
    assert smooth.max() / smooth.mean() < 1.5
    assert bursty.max() / bursty.mean() > 10


def test_pqrs_skews_keys_and_couples_time_and_key():
    rng = np.random.default_rng(2)
    times, keys = pqrs_points(50_000, 1 << 16, 0.4, 0.1, 0.1, 0.4, rng)
    low = keys < (1 << 15)
    early = times < 0.5
    assert abs(low.mean() - 0.5) < 0.02  # p + r = 0.5
    # p = s = 0.4 >> q = r = 0.1: early tuples go to low keys, late to high keys.
    assert abs((early & low).mean() - 0.4) < 0.02
    _, skewed = pqrs_points(50_000, 1 << 16, 0.45, 0.15, 0.3, 0.1, rng)
    assert abs((skewed < (1 << 15)).mean() - 0.75) < 0.02  # p + r


def test_one_definition_of_each_skew_for_the_benchmarks_and_the_simulator():
    """The thesis's experiments' skew is the simulator's; the generator's own is milder; every
    result states which one it ran (issue 47: the live benchmark ran one, the simulator the other)."""
    from etl.simulator.model import SimParams

    assert SimParams().pqrs == SKEWS["thesis"]
    assert (StreamSpec(start=T0).p, StreamSpec(start=T0).s) == (SKEWS["default"][0], SKEWS["default"][3])
    thesis = StreamSpec(start=T0, rate=1000, key_domain=20_000_000, **skew("thesis"))
    assert {k: v for k, v in thesis.described().items() if k in ("skew", "p", "b", "rate")} == {
        "skew": "thesis", "p": 0.6, "b": 0.6, "rate": 1000}
    assert StreamSpec(start=T0, p=0.7, q=0.1, r=0.1, s=0.1).described()["skew"] is None  # a skew of its own
    # The thesis's skew puts more of the stream on fewer keys than the default's.
    rng = np.random.default_rng(4)
    hottest = {name: float((pqrs_points(40_000, 1 << 16, *SKEWS[name], rng)[1] < (1 << 13)).mean())
               for name in ("thesis", "default")}
    assert hottest["thesis"] > 2 * hottest["default"]
    with pytest.raises(ValueError, match="unknown skew 'zipf'"):
        skew("zipf")


def test_shares_of_each_kind(tmp_path):
    spec = StreamSpec(start=T0, duration_s=600, rate=50, new_key_share=0.1, duplicate_share=0.05,
                      unchanged_share=0.05, malformed_share=0.02)
    out = generate_stream(spec, tmp_path)
    assert out.lines == 30_000
    for kind, share in (("new_key", 0.1), ("redelivered", 0.05), ("unchanged", 0.05), ("malformed", 0.02)):
        assert abs(out.kinds[kind] / out.lines - share) < 0.01, kind


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="p\\+q\\+r\\+s"):
        StreamSpec(start=T0, p=0.5, q=0.5, r=0.5, s=0.5)
    with pytest.raises(ValueError, match="b"):
        StreamSpec(start=T0, b=0.4)


# ----------------------------------------------------------------------------- declared entities

from collections import Counter  # noqa: E402

from etl.core.model import load_model  # noqa: E402
from etl.core.records import Reject, check_line  # noqa: E402
from tests.helpers import ROOT  # noqa: E402

MODELS = [ROOT / "examples" / "shop" / "model.toml", *sorted((ROOT / "tests" / "models").glob("*.toml"))]


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.stem)
def test_a_declared_entity_s_stream_follows_its_model(tmp_path, model):
    declared = load_model(model)
    for entity in declared.entities:
        spec = StreamSpec(start=T0, duration_s=120, rate=30, seed=3, key_domain=200, malformed_share=0.05,
                          unchanged_share=0.2, sources=entity.sources or ("crm", "web"))
        out = generate_stream(spec, tmp_path / entity.name, entity=entity, model=declared)
        again = generate_stream(spec, tmp_path / f"{entity.name}-again", entity=entity, model=declared)
        assert _read_all(tmp_path / entity.name) == _read_all(tmp_path / f"{entity.name}-again") and out.lines == again.lines
        valid, rejected, keys = 0, Counter(), Counter()
        for path in sorted((tmp_path / entity.name).rglob("*.jsonl")):
            source = path.parent.parent.parent.name.removeprefix("source_id=")
            for line in path.read_bytes().splitlines():
                try:
                    u = check_line(line, source, 65536, entity.sources, entity)
                except Reject as exc:
                    rejected[exc.reason] += 1
                    continue
                valid += 1
                keys[(u.source_id, u.natural_key)] += 1
                assert set(u.key) == set(entity.key_names)
                assert all(v is not None for k, v in u.attributes.items() if k in entity.compare)
                if entity.is_fact:  # each reference names a key of its dimension's stream (numbers below key_domain)
                    assert u.attributes["customer_id"] < 200 and int(u.attributes["sku"].removeprefix("sku-")) < 200
        # Every line the generator meant to be valid is; every malformed one is rejected.
        assert valid == out.lines - out.kinds["malformed"] and sum(rejected.values()) == out.kinds["malformed"]
        assert len(keys) > 20 and max(keys.values()) > 1  # keys repeat: matches and duplicates happen


# SHA-256 over (relative path, bytes) of the files this spec gave before the warehouse model
# (etl/generator.py at db60ed9, numpy as pinned in constraints.txt).
CUSTOMER_STREAM_BEFORE_THE_MODEL = "46275a1359e2209381737c2c9d9c1a8eca759906d8b3d3a2e04fda8410adf56f"


def test_the_customer_stream_is_the_one_it_always_was(tmp_path):
    """The default model's entity, given or not, writes the bytes it wrote before the model (the
    demo's stream)."""
    spec = StreamSpec(start=T0, duration_s=60, rate=30, seed=5, malformed_share=0.1)
    generate_stream(spec, tmp_path / "a")
    generate_stream(spec, tmp_path / "b", entity=load_model().entity())
    assert _read_all(tmp_path / "a") == _read_all(tmp_path / "b")
    digest = hashlib.sha256()
    for path, content in _read_all(tmp_path / "a").items():
        digest.update(str(path).encode())
        digest.update(content)
    assert digest.hexdigest() == CUSTOMER_STREAM_BEFORE_THE_MODEL
