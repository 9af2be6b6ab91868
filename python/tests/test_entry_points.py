"""The built package on PYTHONPATH is found as an installed distribution would be: its entry
points are pyproject.toml's, so vLLM finds `--load-format qload` (it looks for general plugins
only through entry points, in every worker process) without `pip install`."""
import importlib.metadata
import importlib.util
import pathlib
import sys

import pytest

import qload

ROOT = pathlib.Path(__file__).resolve().parents[2]


def declared_entry_points() -> dict:
    tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {group: dict(points) for group, points in project["entry-points"].items()}


def test_the_built_package_has_pyprojects_entry_points():
    here = pathlib.Path(qload.__file__).resolve().parent.parent
    dist = next(d for d in importlib.metadata.distributions(path=[str(here)]) if d.metadata["Name"] == "qload")
    assert dist.version == qload.__version__
    found = {}
    for point in dist.entry_points:
        found.setdefault(point.group, {})[point.name] = point.value
    assert found == declared_entry_points()


def test_vllms_plugin_group_finds_the_loader():
    points = [p for p in importlib.metadata.entry_points(group="vllm.general_plugins") if p.name == "qload"]
    assert points and all(p.value == "qload.vllm:register" for p in points)
    # Loading it imports torch (not installed here): the vLLM suite loads it through vLLM.
    assert importlib.util.find_spec(points[0].module) is not None
