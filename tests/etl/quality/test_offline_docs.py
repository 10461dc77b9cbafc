"""Data Docs that work offline (etl.quality.offline_docs): the rewrite of a page as a pure function,
then a real GX site (pandas, no Spark) opened in a headless Chromium with the network shut: styled,
its lists rendered by bootstrap-table, and no request for anything off the machine."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from etl.quality.offline_docs import ASSETS_CACHE, CDN_ASSETS, make_site_offline, offline_html, site_paths

PATHS = {
    "https://cdn.example/lib@1/lib.min.js": "static/offline/lib@1/lib.min.js",
    "https://cdn.example/lib@1/lib.css": "static/offline/lib@1/lib.css",
    "https://assets.example/logo.png": "static/images/logo.png",
}


def test_a_cdn_script_and_stylesheet_point_at_the_copies_relative_to_the_page():
    html = ('<link rel="stylesheet" href="https://cdn.example/lib@1/lib.css"/>\n'
            "<script src='https://cdn.example/lib@1/lib.min.js'></script>")
    assert offline_html(html, PATHS, "../../") == (
        '<link rel="stylesheet" href="../../static/offline/lib@1/lib.css"/>\n'
        "<script src='../../static/offline/lib@1/lib.min.js'></script>")


def test_a_rewritten_tag_loses_integrity_and_crossorigin_which_a_file_url_cannot_satisfy():
    html = ('<script src="https://cdn.example/lib@1/lib.min.js" integrity="sha384-abc" crossorigin="anonymous"></script>'
            '<script src="https://elsewhere.example/x.js" integrity="sha384-def" crossorigin></script>')
    assert offline_html(html, PATHS) == (
        '<script src="static/offline/lib@1/lib.min.js"></script>'
        '<script src="https://elsewhere.example/x.js" integrity="sha384-def" crossorigin></script>')


def test_an_image_with_a_query_string_and_a_css_url_point_at_the_copy():
    html = ('<img class="NO-CACHE" src="https://assets.example/logo.png?d=20260101T000000Z&dataContextId=1"/>'
            "<style>.navbar-brand a { background: url('https://assets.example/logo.png') 0 0 no-repeat; }</style>")
    assert offline_html(html, PATHS, "../") == (
        '<img class="NO-CACHE" src="../static/images/logo.png"/>'
        "<style>.navbar-brand a { background: url('../static/images/logo.png') 0 0 no-repeat; }</style>")


def test_links_text_and_unknown_addresses_stay_and_a_second_pass_changes_nothing():
    html = ('<a href="https://cdn.example/lib@1/lib.css">docs</a> https://cdn.example/lib@1/lib.min.js '
            '<script src="https://cdn.example/lib@1/lib.min.js.map"></script>'
            '<link href="https://cdn.example/lib@1/lib.css">')
    once = offline_html(html, PATHS)
    assert once == html.replace('<link href="https://cdn.example/lib@1/lib.css">', '<link href="static/offline/lib@1/lib.css">')
    assert offline_html(once, PATHS) == once


def test_every_address_the_installed_gx_templates_load_has_a_copy():
    """A GX upgrade that loads something new fails here, not offline in front of a reader."""
    templates = Path(importlib.util.find_spec("great_expectations").submodule_search_locations[0]) / "render/view/templates"
    loaded = set()
    for template in templates.glob("*.j2"):
        for tag in re.findall(r"<(?:script|link)\b[^>]*>", template.read_text()):
            loaded |= set(re.findall(r"""\b(?:src|href)\s*=\s*["'](https?://[^"']+)""", tag))
    assert loaded and loaded <= set(CDN_ASSETS), sorted(loaded - set(CDN_ASSETS))


def test_make_site_offline_copies_the_fetched_files_and_keeps_the_cdn_link_of_one_not_fetched(tmp_path):
    url, (package, version, file) = next(iter(CDN_ASSETS.items()))
    cache = tmp_path / "cache"
    (cache / f"{package}@{version}" / file).parent.mkdir(parents=True)
    (cache / f"{package}@{version}" / file).write_text("/* local */")
    missing = next(u for u, (p, _, _) in CDN_ASSETS.items() if p != package)
    site = tmp_path / "site"
    (site / "validations" / "s").mkdir(parents=True)
    page = f'<link href="{url}"><script src="{missing}"></script>'
    (site / "index.html").write_text(page)
    (site / "validations" / "s" / "r.html").write_text(page)

    assert make_site_offline(site, cache) == 2
    local = site_paths()[url]
    assert (site / local).read_text() == "/* local */"
    assert (site / "index.html").read_text() == f'<link href="{local}"><script src="{missing}"></script>'
    assert (site / "validations" / "s" / "r.html").read_text() == f'<link href="../../{local}"><script src="{missing}"></script>'
    assert make_site_offline(site, cache) == 0


def test_make_site_offline_reads_only_pages_written_since_its_last_pass_unless_the_copies_changed(tmp_path):
    url, (package, version, file) = next(iter(CDN_ASSETS.items()))
    later, (package2, version2, file2) = next((u, a) for u, a in CDN_ASSETS.items() if a[0] != package)
    cache, site = tmp_path / "cache", tmp_path / "site"
    (cache / f"{package}@{version}" / file).parent.mkdir(parents=True)
    (cache / f"{package}@{version}" / file).write_text("/* local */")
    (site / "validations").mkdir(parents=True)
    assert make_site_offline(site, cache) == 0
    old, new = site / "validations" / "old.html", site / "validations" / "new.html"
    for page in (old, new):
        page.write_text(f'<link href="{url}">')
    os.utime(old, (time.time() - 60, time.time() - 60))  # older than the last pass: not read
    assert make_site_offline(site, cache) == 1 and new.read_text() == f'<link href="../{site_paths()[url]}">'
    assert old.read_text() == f'<link href="{url}">'

    (cache / f"{package2}@{version2}" / file2).parent.mkdir(parents=True)
    (cache / f"{package2}@{version2}" / file2).write_text("/* fetched later */")
    assert make_site_offline(site, cache) == 1 and old.read_text() == new.read_text()  # other copies: every page


# --- the browser ---------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# Appended to a copy of a page (beside it, so its relative paths hold): once the page's scripts
# ran, what the browser made of it, as JSON in the DOM that --dump-dom prints.
PROBE = """<script>
window.addEventListener("load", () => setTimeout(() => {
  const icon = document.querySelector("i.fas");
  const out = {
    row_display: getComputedStyle(document.querySelector(".row")).display,
    navbar_display: getComputedStyle(document.querySelector("nav.navbar")).display,
    table_rows: document.querySelectorAll("table[data-toggle] tbody tr[data-index]").length,
    jquery: typeof window.jQuery,
    bootstrap_js: typeof (window.jQuery && jQuery.fn.modal),
    vega: typeof window.vega,
    icon_font: icon ? getComputedStyle(icon).fontFamily : null,
    icon_fonts_loaded: [...document.fonts].filter(f => f.family.includes("Font Awesome") && f.status === "loaded").length,
  };
  const pre = document.createElement("pre");
  pre.id = "offline-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 300));
</script>"""


def open_in_browser(page: Path, work: Path) -> tuple[dict, list[str]]:
    """``page`` in headless Chromium with the network shut (every host unresolvable, every request
    through a proxy on a closed port): the probe's findings, and the http(s) URLs the page asked
    for, from Chromium's net log (requests with an initiator; the browser's own background
    requests to its update and account services have none)."""
    probe = page.with_name(f"probe-{page.name}")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    work.mkdir(parents=True, exist_ok=True)
    net_log = work / "net-log.json"
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions",
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--proxy-server=http://127.0.0.1:9",
         f"--user-data-dir={work / 'profile'}", f"--log-net-log={net_log}",
         "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=90)
    probe.unlink()
    found = re.search(r'<pre id="offline-probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"no probe result: rc {done.returncode}\n{done.stderr[-3000:]}"
    log = json.loads(net_log.read_text())
    kinds = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    asked = [e["params"]["url"] for e in log["events"]
             if kinds.get(e["type"]) == "URL_REQUEST_START_JOB"
             and e.get("params", {}).get("initiator", "not an origin") != "not an origin"
             and e["params"].get("url", "").startswith(("http://", "https://"))]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&")), asked


def build_site(root: Path) -> Path:
    """A GX file context under ``root``, one pandas suite through a checkpoint with
    UpdateDataDocsAction (gate.py's API), one failing expectation; the Data Docs site's folder."""
    import great_expectations as gx
    import pandas as pd
    from great_expectations.checkpoint import UpdateDataDocsAction
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="file", project_root_dir=str(root))
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    batch = context.data_sources.add_or_update_pandas(name="warehouse").add_dataframe_asset(name="customer") \
        .add_batch_definition_whole_dataframe("whole")
    suite = context.suites.add_or_update(gx.ExpectationSuite(name="customer_suite", expectations=[
        gx.expectations.ExpectColumnValuesToNotBeNull(column="surrogate_key"),
        gx.expectations.ExpectColumnValuesToBeBetween(column="version", min_value=1, max_value=2),
    ]))
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name="customer_gate", data=batch, suite=suite))
    checkpoint = context.checkpoints.add_or_update(gx.Checkpoint(
        name="customer_gate", validation_definitions=[definition],
        actions=[UpdateDataDocsAction(name="update_data_docs")], result_format="SUMMARY"))
    frame = pd.DataFrame({"surrogate_key": [1, 2, 3], "version": [1, 2, 3]})
    checkpoint.run(batch_parameters={"dataframe": frame}, run_id=RunIdentifier(run_name="20261122T0305-20261122T0310"))
    return root / "gx" / "uncommitted" / "data_docs" / "local_site"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not found: install it with 'apt-get install chromium' "
                                               "(make setup does when run as root)")
def test_data_docs_render_in_a_browser_without_network(tmp_path, monkeypatch):
    if not (ASSETS_CACHE / "bootstrap@4.3.1").is_dir():
        pytest.skip(f"Data Docs assets not fetched into {ASSETS_CACHE}: run 'make setup' "
                    "(or '.venv/bin/python -m etl.quality.offline_docs'), which needs the npm registry once")
    monkeypatch.setenv("GX_ANALYTICS_ENABLED", "false")
    site = build_site(tmp_path / "gx")
    index = site / "index.html"
    result = next(site.glob("validations/**/*.html"))

    # As GX builds it: the browser asks the CDNs, gets nothing, and the index's list stays empty.
    seen, asked = open_in_browser(index, tmp_path / "before")
    assert seen["table_rows"] == 0 and seen["row_display"] == "block", seen
    assert "https://code.jquery.com/jquery-3.7.1.min.js" in asked, asked

    make_site_offline(site)
    for page in site.rglob("*.html"):
        if page.relative_to(site).parts[0] != "static":
            for tag in re.findall(r"<(?:script|link|img)\b[^>]*>", page.read_text()):
                assert not re.search(r"""\b(?:src|href)\s*=\s*["']https?:""", tag), (page, tag)

    seen, asked = open_in_browser(index, tmp_path / "index")
    assert asked == []
    assert seen["row_display"] == "flex" and seen["navbar_display"] == "flex", seen  # Bootstrap's grid and navbar
    assert seen["table_rows"] >= 2, seen  # the validation results and the suites, rendered by bootstrap-table
    assert (seen["jquery"], seen["bootstrap_js"], seen["vega"]) == ("function", "function", "object"), seen
    assert seen["icon_font"] == '"Font Awesome 6 Free"' and seen["icon_fonts_loaded"] >= 1, seen

    seen, asked = open_in_browser(result, tmp_path / "result")  # four folders down: ../../../../static/
    assert asked == []
    assert (seen["row_display"], seen["bootstrap_js"]) == ("flex", "function"), seen
