"""``--dist loadgroup`` under pytest 9: the test's group written into its id, as xdist meant.

pytest-xdist (3.8) sends each test marked ``xdist_group`` to one worker by renaming it
``<id>@<group>`` in the worker's collection (it sets ``item._nodeid``); pytest 9 reads a test's
id from ``item._id`` instead, so the rename is lost and every group (the fault suite, Slurm, the
rule recipe) was spread over the workers like ungrouped tests. This hook, after xdist's, does the
rename where xdist's did not take. Loaded with ``-p`` (pyproject.toml); drop it once xdist
renames through pytest's own id again.
"""

from __future__ import annotations

import pytest
from _pytest.nodeid import coerce_node_id


def group_of(item: pytest.Item) -> str:
    """The item's groups as xdist joins them ('' when it has none)."""
    names = {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }
    return "_".join(sorted(names))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):  # set in xdist's workers only
        return
    for item in items:
        group = group_of(item)
        if group and not item.nodeid.endswith(f"@{group}"):
            item._id = coerce_node_id(f"{item.nodeid}@{group}")
