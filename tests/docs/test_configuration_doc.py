"""docs/configuration.md is kept beside `etl.core.config.EtlConfig`: every field is named there, and
its settings table names no setting that does not exist. Pure: reads the page and the dataclass."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from etl.core.config import EtlConfig

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
BACKTICKED = re.compile(r"`([^`]+)`")


def _text() -> str:
    return PAGE.read_text(encoding="utf-8")


def _table_first_column() -> list[str]:
    """The first cell of each row of the table headed ``| setting | default | meaning |``."""
    cells: list[str] = []
    in_table = False
    for line in _text().splitlines():
        stripped = line.strip()
        if not in_table:
            in_table = stripped.replace(" ", "").startswith("|setting|default|")
            continue
        if not stripped.startswith("|"):
            break
        first = stripped.strip("|").split("|")[0].strip()
        if set(first) <= set("-: "):  # the separator row
            continue
        cells.append(first)
    return cells


def _settings_in_table() -> set[str]:
    return {name for cell in _table_first_column() for name in BACKTICKED.findall(cell)}


FIELDS = sorted(f.name for f in dataclasses.fields(EtlConfig))


def test_the_page_has_a_settings_table():
    assert len(_table_first_column()) >= 20, f"no settings table found in {PAGE}"


def test_every_setting_is_documented_in_the_settings_table():
    missing = sorted(set(FIELDS) - _settings_in_table())
    assert not missing, (
        f"settings of EtlConfig without a row in the table of docs/configuration.md: {', '.join(missing)}")


def test_every_setting_is_named_in_backticks_on_the_page():
    named = set(BACKTICKED.findall(_text()))
    assert not [f for f in FIELDS if f not in named]


def test_the_table_names_no_setting_that_does_not_exist():
    unknown = sorted(_settings_in_table() - set(FIELDS))
    assert not unknown, f"docs/configuration.md names settings EtlConfig does not have: {', '.join(unknown)}"


def test_the_readme_starts_the_stream_on_the_schedule_the_demo_loaded_with():
    """After `make demo`, the README's `etl stream` must go on after the demo's run: on another
    schedule its first interval overlaps the demo's and is refused (issue 45)."""
    root = Path(__file__).resolve().parents[2]
    demo = re.search(r'ETL_SCHEDULE=\$\{ETL_SCHEDULE:-"([^"]+)"\}', (root / "scripts" / "demo-env.sh").read_text())
    assert demo, "scripts/demo-env.sh no longer sets the demo's schedule"
    assert f"ETL_SCHEDULE='{demo[1]}' etl stream" in (root / "README.md").read_text()
