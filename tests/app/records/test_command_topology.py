"""``manage.py topology FILE [--json] [--table N]`` on the real outputs of
``../shared/data/topology/`` and on bad input (exit 2, nothing on stdout)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.edge.test_topology_nvidia_smi import REAL, real_file


def run(*args: str) -> str:
    out = StringIO()
    call_command("topology", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "table"), [(name, t) for name, tables in REAL.items() for t in range(len(tables))]
)
def test_json_of_every_real_file(name, table):
    args = [str(real_file(name)), "--json"]
    if len(REAL[name]) > 1:
        args += ["--table", str(table + 1)]
    gpus, domains, numa = REAL[name][table]
    assert json.loads(run(*args)) == {"gpus": gpus, "nvlink_domains": domains, "numa": numa}


def test_text_output():
    text = run(str(real_file("dgx_a100_sxm4_80gb_topo_m__DeepEP_issue13.txt")))
    assert "NVLink domain 0: GPUs 0, 1, 2, 3, 4, 5, 6, 7" in text
    assert "GPU3=0, GPU4=1" in text


def test_several_matrices_without_table_is_refused():
    with pytest.raises(
        CommandError, match=r"holds 3 matrices; choose one with --table 1\.\.3"
    ) as e:
        run(str(real_file("hgx_h100_topo_m__excerpts_partial.txt")))
    assert e.value.returncode == 2


@pytest.mark.parametrize(
    ("content", "message"),
    [("no matrix here\n", "no `nvidia-smi topo -m` matrix found"), (None, "No such file")],
)
def test_bad_file_exits_2(tmp_path, content, message):
    path = tmp_path / "topo.txt"
    if content is not None:
        path.write_text(content)
    with pytest.raises(CommandError, match=message) as caught:
        run(str(path), "--json")
    assert caught.value.returncode == 2
