"""The entity's sequence definition (``<meta_root>/sequence.json``): how each source's versions
are ordered, recorded by the first ingest or load and checked before every later one. A model edit
that changes it for a source the warehouse has read (an attribute instead of the log position,
another connector, other ``sequence_bits``) is refused before anything is written: ``key_map``
holds that source's sequences of the old definition, and sequences of two definitions do not
compare (every later change would be judged stale, silently). A source added to the model takes
its own definition. ``*`` stands for any source the model does not name."""

from __future__ import annotations

import json

from etl.core.config import ConfigError, EtlConfig
from etl.core.model import sequence_definition
from etl.io.files import write_json

SEQUENCE_FILE = "sequence.json"  # under meta_root


def check_sequence_definition(cfg: EtlConfig, tables, adopt: bool = False) -> None:
    """Refuse a definition other than the recorded one for a source both name; record it (with any
    new sources) otherwise. A warehouse with loaded keys and no record (made by a version before
    the record; ``tables.holds_keys()``) is refused unless ``adopt`` (``etl init``: the operator says this model loaded it)."""
    entity = cfg.entity_model
    now = sequence_definition(entity)
    path = cfg.meta_path / SEQUENCE_FILE
    if not path.exists():
        if not adopt and tables.holds_keys():
            raise ConfigError(
                f"model file {cfg.model.path!r}, entity {entity.name!r}: this warehouse holds keys but no record of how "
                f"their versions are ordered ({path}; made by an older version). If this model orders them as they "
                f"were loaded, record it with `etl init` (same settings); a model that orders them otherwise needs a "
                f"new warehouse (docs/sources.md, 'The order is recorded with the warehouse')")
        write_json(path, now)
        return
    recorded = json.loads(path.read_text())

    def either(definition: dict, source: str):
        return definition.get(source, definition.get("*"))

    changed = sorted(s for s in set(recorded) | set(now)
                     if either(recorded, s) is not None and either(now, s) is not None and either(recorded, s) != either(now, s))
    if changed:
        raise ConfigError(
            f"model file {cfg.model.path!r}, entity {entity.name!r}: the order of versions changed for source "
            f"{', '.join(changed)} (recorded {json.dumps({s: either(recorded, s) for s in changed})}, now "
            f"{json.dumps({s: either(now, s) for s in changed})}): this warehouse's key_map holds sequences of the "
            f"recorded definition, and sequences of two definitions do not compare. Put the model back, or load "
            f"the entity into a new warehouse (another 'directory' or warehouse root) (docs/sources.md)")
    merged = {**now, **recorded}  # new sources join; a source the model dropped keeps its record
    if merged != recorded:
        write_json(path, merged)

