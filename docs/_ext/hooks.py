"""MkDocs hooks: the tutorials are served from ``tutorials/`` at the repository
root, and MathJax from the site itself.

The notebooks stay where they are (``make notebooks`` and the tests execute them
there); this hook adds them to the site's files as ``tutorials/*.ipynb`` before
mkdocs-jupyter turns them into pages, rendered from their committed outputs.

MathJax 3 comes from the ``django-static-mathjax`` wheel (the ``docs`` extra; it
holds MathJax's own files and needs no Django): its single-file SVG build and
its license are added as ``javascripts/mathjax/``, so that formulas render with
no network.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
#: What the site serves from the installed MathJax, under javascripts/mathjax/.
MATHJAX_FILES = ("es5/tex-svg.js", "LICENSE")


def mathjax_dir() -> Path:
    """The installed MathJax distribution (``django-static-mathjax``)."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "MathJax is not installed: the docs serve it from the site itself; "
            'install it with `pip install -e ".[docs]"` (django-static-mathjax).'
        )
    return Path(spec.submodule_search_locations[0]) / "static" / "mathjax"


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
    source = mathjax_dir()
    for name in MATHJAX_FILES:
        uri = f"javascripts/mathjax/{Path(name).name}"
        files.append(File.generated(config, uri, abs_src_path=str(source / name)))
    return files
