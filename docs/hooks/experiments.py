"""MkDocs hook: the committed experiments' figures become files of the site, so the papers pages
show the figures the committed code produced (experiments/<...>/figure.png) without a copy."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File


def on_files(files, config):
    root = Path(config["config_file_path"]).parent
    for figure in sorted((root / "experiments").rglob("*.png")):
        files.append(File(str(figure.relative_to(root)), str(root), config["site_dir"],
                          config["use_directory_urls"]))
    return files
