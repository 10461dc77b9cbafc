"""The entity's sequence definition (``<meta_root>/sequence.json``): recorded at the first ingest,
checked before every later one, so a model edit that changes how versions are ordered (an
attribute instead of the log position, another connector, other ``sequence_bits``) is refused
before it writes: ``key_map`` holds sequences of the old definition, and sequences of two
definitions do not compare (every later change would be judged stale, silently)."""

from __future__ import annotations

import json

from etl.core.config import ConfigError, EtlConfig
from etl.core.model import sequence_definition
from etl.io.files import write_json

SEQUENCE_FILE = "sequence.json"  # under meta_root


def check_sequence_definition(cfg: EtlConfig) -> None:
    """Refuse a definition other than the recorded one; record it the first time."""
    entity = cfg.entity_model
    now = sequence_definition(entity)
    path = cfg.meta_path / SEQUENCE_FILE
    if not path.exists():
        write_json(path, now)
        return
    recorded = json.loads(path.read_text())
    if recorded != now:
        changed = sorted(k for k in set(recorded) | set(now) if recorded.get(k) != now.get(k))
        raise ConfigError(
            f"model file {cfg.model.path!r}, entity {entity.name!r}: the order of versions changed for "
            f"{', '.join(changed)} (recorded {json.dumps({k: recorded.get(k) for k in changed})}, now "
            f"{json.dumps({k: now.get(k) for k in changed})}): this warehouse's key_map holds sequences of the "
            f"recorded definition, and sequences of two definitions do not compare. Put the model back, or load "
            f"the entity into a new warehouse (another 'directory' or warehouse root) (docs/sources.md)")
