"""A Slurm cluster's ``slurm_conf`` names a file only inside the deploy-time folder (issue #12:
no setting names a file the server will read): the commands run as the worker and read it."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.edge.errors import SchedulerError
from diagnosis.edge.schedulers.slurm.adapter import CONF_DIR_ENV, SlurmAdapter


@pytest.fixture
def conf_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "etc-slurm"
    folder.mkdir()
    monkeypatch.setenv(CONF_DIR_ENV, str(folder))
    return folder


def test_a_slurm_conf_inside_the_deploy_folder_is_taken(conf_dir: Path) -> None:
    adapter = SlurmAdapter({"slurm_conf": str(conf_dir / "slurm.conf")})

    assert adapter.settings.slurm_conf == str(conf_dir / "slurm.conf")


@pytest.mark.parametrize("outside", ["/proc/self/environ", "/etc/passwd"])
def test_a_slurm_conf_outside_the_deploy_folder_is_refused(conf_dir: Path, outside: str) -> None:
    with pytest.raises(SchedulerError, match=r"scheduler_config\.slurm_conf: must be a file in"):
        SlurmAdapter({"slurm_conf": outside})


def test_a_dot_dot_path_cannot_climb_out(conf_dir: Path) -> None:
    with pytest.raises(SchedulerError, match="must be a file in"):
        SlurmAdapter({"slurm_conf": str(conf_dir / ".." / "elsewhere.conf")})


def test_a_link_out_of_the_folder_is_refused(conf_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "theirs.conf"
    target.write_text("ClusterName=theirs\n")
    (conf_dir / "slurm.conf").symlink_to(target)

    with pytest.raises(SchedulerError, match="must be a file in"):
        SlurmAdapter({"slurm_conf": str(conf_dir / "slurm.conf")})
