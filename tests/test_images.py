"""The container images hold every package the project installs (a package added to
pyproject.toml but not copied into an image breaks `docker-compose up` with a
ModuleNotFoundError only when the containers run: this test says so at once)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def packages() -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = [p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    assert names and all((ROOT / name / "__init__.py").is_file() for name in names), names
    return names


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.sim"])
def test_every_package_is_copied_into_the_image(dockerfile):
    text = (ROOT / dockerfile).read_text()
    copied = set(re.findall(r"^COPY\s+(?:--\S+\s+)*(\S+)\s", text, re.M))
    missing = [name for name in packages() if name not in copied]
    assert not missing, f"{dockerfile} does not COPY {missing}"


def test_the_simulation_image_stubs_every_package_for_its_dependency_layer():
    # the dependency layer installs from pyproject.toml alone, with each package an empty stub
    touched = " ".join(line for line in (ROOT / "Dockerfile.sim").read_text().splitlines() if "touch " in line)
    for name in packages():
        assert f"{name}/__init__.py" in touched.split(), name
