"""Data Docs that work offline. GX's pages load Bootstrap, jQuery, bootstrap-table, Vega and Font
Awesome from CDNs: without network the index renders unstyled and its list of validations stays
empty. Set-up fetches the very same files once from the npm registry into the tools cache
(``python -m etl.quality.offline_docs``); after each build the gate copies them into the site and
points every page at its copies, by relative paths, so the site folder can be moved or opened
through file://. docs/decisions/offline-data-docs.md

Pure Python (no GX import): the rewrite is a function of the page's text.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from etl.core.spark_conf import DEFAULT_TOOLS_CACHE

log = logging.getLogger(__name__)

# Every URL the templates of great_expectations 1.24.1 load (render/view/templates/*.j2) -> the npm
# package, its exact version and the file in it that the CDN serves. The three major-only URLs
# (vega@5, vega-lite@5, vega-embed@6) are pinned to the newest release of that major, the file
# jsdelivr serves for them (their package.json's "jsdelivr" field).
CDN_ASSETS: dict[str, tuple[str, str, str]] = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": ("bootstrap", "4.3.1", "dist/css/bootstrap.min.css"),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": ("bootstrap", "4.3.1", "dist/js/bootstrap.min.js"),
    "https://code.jquery.com/jquery-3.7.1.min.js": ("jquery", "3.7.1", "dist/jquery.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": ("popper.js", "1.12.9", "dist/umd/popper.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": ("bootstrap-table", "1.19.1", "dist/bootstrap-table.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": ("bootstrap-table", "1.19.1", "dist/bootstrap-table.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js":
        ("bootstrap-table", "1.19.1", "dist/extensions/filter-control/bootstrap-table-filter-control.min.js"),
    # GX's pages take the filter-control stylesheet from 1.19.0, the rest of bootstrap-table from 1.19.1.
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css":
        ("bootstrap-table", "1.19.0", "dist/extensions/filter-control/bootstrap-table-filter-control.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css":
        ("bootstrap-table", "1.19.0", "dist/extensions/filter-control/bootstrap-table-filter-control.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css":
        ("bootstrap-datepicker", "1.9.0", "dist/css/bootstrap-datepicker.min.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js":
        ("bootstrap-datepicker", "1.9.0", "dist/js/bootstrap-datepicker.min.js"),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css":
        ("@forevolve/bootstrap-dark", "1.1.0", "dist/css/bootstrap-prefers-dark.css"),
    "https://cdn.jsdelivr.net/npm/vega@5": ("vega", "5.33.1", "build/vega.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-lite@5": ("vega-lite", "5.23.0", "build/vega-lite.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-embed@6": ("vega-embed", "6.29.0", "build/vega-embed.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css":
        ("@fortawesome/fontawesome-free", "6.6.0", "css/all.min.css"),
}
# What a stylesheet above loads relative to itself (all.min.css: ../webfonts/fa-*.woff2).
COMPANION_DIRS: dict[tuple[str, str], tuple[str, ...]] = {("@fortawesome/fontawesome-free", "6.6.0"): ("webfonts",)}
# GX's logo comes from its own bucket (with the project's id in the query string); the site has
# the image itself under static/images/. The dark variant is not shipped: the light one stands in.
_GX_ASSETS = "https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/"
SITE_IMAGES = {_GX_ASSETS + "logo-long.png": "static/images/logo-long.png",
               _GX_ASSETS + "full_logo_dark.png": "static/images/logo-long.png"}

ASSETS_CACHE = DEFAULT_TOOLS_CACHE / "data-docs-assets"
SITE_ASSETS = "static/offline"  # under the site's root


def package_dir(package: str, version: str) -> str:
    return f"{package}@{version}"


def site_paths() -> dict[str, str]:
    """Each URL the pages load -> its copy's path relative to the site's root."""
    paths = {url: f"{SITE_ASSETS}/{package_dir(p, v)}/{f}" for url, (p, v, f) in CDN_ASSETS.items()}
    return {**paths, **SITE_IMAGES}


_TAG = re.compile(r"<(?:script|link|img)\b[^>]*>", re.IGNORECASE)
_ATTR_URL = re.compile(r"""(\b(?:src|href)\s*=\s*)(["'])(https?://[^"']*)\2""", re.IGNORECASE)
_CHECKS = re.compile(r"""\s+(?:integrity|crossorigin)(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s>]+))?""", re.IGNORECASE)
_CSS_URL = re.compile(r"""url\(\s*(["']?)(https?://[^"')\s]+)\1\s*\)""", re.IGNORECASE)


def offline_html(html: str, paths: Mapping[str, str], to_root: str = "") -> str:
    """``html`` with each ``<script src>``, ``<link href>``, ``<img src>`` and CSS ``url()`` whose
    address (query string aside) is a key of ``paths`` pointed at ``to_root + paths[address]``.
    A rewritten tag loses ``integrity`` and ``crossorigin``: a CORS request for a file:// script
    fails, and the hash was of the CDN's copy. Anything else is left as it is."""
    def local(url: str) -> str | None:
        target = paths.get(url.split("?", 1)[0])
        return None if target is None else to_root + target

    def tag(match: re.Match) -> str:
        text = match.group(0)
        new = _ATTR_URL.sub(lambda m: m.group(1) + m.group(2) + (local(m.group(3)) or m.group(3)) + m.group(2), text)
        return text if new == text else _CHECKS.sub("", new)

    def css(match: re.Match) -> str:
        target = local(match.group(2))
        return match.group(0) if target is None else f"url('{target}')"

    return _CSS_URL.sub(css, _TAG.sub(tag, html))


def make_site_offline(site: Path, cache: Path = ASSETS_CACHE) -> int:
    """Copy the fetched assets into ``site/static/offline`` and point the site's pages at them;
    returns the number of pages changed. An asset that was not fetched (set-up could not reach
    the registry) keeps its CDN link, so the pages work online as before.

    The site gains pages with every run: only those written since the last pass are read (a
    stamp records when it started and with which copies; other copies mean every page again)."""
    site = Path(site)
    if not site.is_dir():
        return 0
    started = time.time()
    for package, version in wanted_files():  # not the whole cache: it may hold other versions
        _copy_new(cache / package_dir(package, version), site / SITE_ASSETS / package_dir(package, version))
    paths = {url: path for url, path in site_paths().items() if (site / path).is_file()}
    missing = sorted({CDN_ASSETS[u][0] for u in CDN_ASSETS if u not in paths})
    if missing:
        log.warning("Data Docs under %s load %s from CDNs: not fetched into %s (make setup fetches them)",
                    site, ", ".join(missing), cache)
    stamp = site / SITE_ASSETS / ".pages-rewritten"
    same = stamp.is_file() and stamp.read_text() == "\n".join(sorted(paths.values()))
    since = stamp.stat().st_mtime - 2 if same else 0  # 2 s: file systems with a coarse clock
    changed = 0
    for page in site.rglob("*.html"):
        depth = len(page.relative_to(site).parts) - 1
        if (depth and page.relative_to(site).parts[0] == "static") or page.stat().st_mtime < since:
            continue  # the assets, or a page rewritten already
        text = page.read_text(encoding="utf-8")
        new = offline_html(text, paths, "../" * depth)
        if new != text:  # a file of this process's own, then renamed: two validations at once do not collide
            fd, tmp = tempfile.mkstemp(dir=page.parent, prefix=f".{page.name}.", suffix=".offline-tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(new)
            os.replace(tmp, page)
            changed += 1
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text("\n".join(sorted(paths.values())))
    os.utime(stamp, (started, started))
    return changed


def _copy_new(source: Path, target: Path) -> None:
    """The files of ``source`` that ``target`` lacks or holds in another size."""
    if not source.is_dir():
        return
    for file in source.rglob("*"):
        dest = target / file.relative_to(source)
        if file.is_file() and not (dest.is_file() and dest.stat().st_size == file.stat().st_size):
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, dest)


def wanted_files() -> dict[tuple[str, str], set[str]]:
    """Per (package, version): the files and folders to keep from its tarball."""
    out: dict[tuple[str, str], set[str]] = {}
    for package, version, file in CDN_ASSETS.values():
        out.setdefault((package, version), set()).add(file)
    for key, dirs in COMPANION_DIRS.items():
        out[key] |= set(dirs)
    return out


def missing_packages(cache: Path = ASSETS_CACHE) -> list[str]:
    """The packages not fetched yet."""
    return [package_dir(p, v) for p, v in sorted(wanted_files()) if not (cache / package_dir(p, v)).is_dir()]


def fetch_assets(cache: Path = ASSETS_CACHE, npm: str = "npm") -> list[str]:
    """Each package not yet in ``cache``, fetched with ``npm pack`` (the tarball only: no install,
    no package scripts) and cut down to the files the pages load, under
    ``cache/<package>@<version>/``; a folder there is complete (renamed into place). Returns the
    packages fetched now: none when all were there. Raises when npm is missing or fails."""
    fetched = []
    for (package, version), keep in sorted(wanted_files().items()):
        final = cache / package_dir(package, version)
        if final.is_dir():
            continue
        if shutil.which(npm) is None:
            raise RuntimeError(f"{npm} was not found (install Node.js and npm, e.g. 'apt-get install npm')")
        final.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=final.parent, prefix=".fetch-") as tmp:
            done = subprocess.run([npm, "pack", f"{package}@{version}", "--loglevel=error", "--pack-destination", tmp],
                                  cwd=tmp, capture_output=True, text=True, timeout=300)
            tarballs = list(Path(tmp).glob("*.tgz"))
            if done.returncode != 0 or len(tarballs) != 1:
                said = [line for line in (done.stderr or done.stdout).splitlines()
                        if not line.removeprefix("npm error").strip().startswith("at ")]  # no stack
                raise RuntimeError(f"npm pack {package}@{version} failed: {' / '.join(said[:5])[:600]}")
            staged = Path(tmp) / "package"
            with tarfile.open(tarballs[0]) as tar:
                members = []
                for m in tar.getmembers():
                    name = m.name.split("/", 1)[-1]  # the tarball's top folder is usually package/
                    if m.isfile() and any(name == k or name.startswith(k + "/") for k in keep):
                        m.name = f"package/{name}"
                        members.append(m)
                tar.extractall(tmp, members=members, filter="data")
            absent = [f for f in keep if not (staged / f).exists()]
            if absent:
                raise RuntimeError(f"{package}@{version} has no {', '.join(absent)}")
            staged.rename(final)
        fetched.append(f"{package}@{version}")
    return fetched


def main() -> int:
    """Set-up's step: fetch what is missing, quiet when nothing is. A failure is reported and
    set-up goes on: Data Docs are still built, with their CDN links."""
    missing = missing_packages()
    if not missing:
        return 0
    print(f"==> fetching the Data Docs' scripts and styles from the npm registry ({len(missing)} packages)")
    try:
        fetched = fetch_assets()
    except Exception as exc:  # noqa: BLE001 - any failure leaves the CDN links, said once here
        print(f"warning: Data Docs assets were not fetched ({exc}); Data Docs will load them from CDNs "
              f"until 'make setup' (or '{sys.executable} -m etl.quality.offline_docs') fetches them into {ASSETS_CACHE}",
              file=sys.stderr)
        return 0
    print(f"Data Docs assets in {ASSETS_CACHE}: {', '.join(fetched)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
