"""MkDocs hooks: the tutorials are served from ``tutorials/`` at the repository root.

The notebooks stay where they are (``make notebooks`` and the tests execute them
there); this hook adds them to the site's files as ``tutorials/*.ipynb`` before
mkdocs-jupyter turns them into pages, rendered from their committed outputs.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]


@event_priority(100)  # before mkdocs-jupyter's on_files
def on_files(files: Files, config: MkDocsConfig) -> Files:
    for notebook in sorted((ROOT / "tutorials").glob("*.ipynb")):
        uri = f"tutorials/{notebook.name}"
        if files.get_file_from_path(uri) is None:
            files.append(
                File(
                    uri,
                    src_dir=str(ROOT),
                    dest_dir=config.site_dir,
                    use_directory_urls=config.use_directory_urls,
                )
            )
    return files
