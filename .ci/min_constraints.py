"""Print pip constraints pinning every dependency of pyproject.toml (core and
extras) to its lower bound, for the CI job that tests the lower bounds."""

import re
import tomllib
from pathlib import Path

pyproject = Path(__file__).parents[1] / "pyproject.toml"
project = tomllib.loads(pyproject.read_text())
requirements = list(project["project"]["dependencies"])
for extra in project["project"]["optional-dependencies"].values():
    requirements += extra
pins = {}
for requirement in requirements:
    found = re.fullmatch(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?>=([^,;\s]+)", requirement)
    if found:
        pins[found.group(1).lower()] = found.group(3)
for name, version in sorted(pins.items()):
    print(f"{name}=={version}")
