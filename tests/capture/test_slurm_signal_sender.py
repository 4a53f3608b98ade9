"""Which signals the wrapper does not forward again: only slurmstepd's, where Slurm signals every process of the
step (issue 37). The real Slurm cases: tests/slurm/test_slurm_signals.py; here the reading of slurm.conf and the
refusals that keep a signal forwarded (twice rather than never)."""

from __future__ import annotations

import os

import pytest
from trainledger.sources.capture.signals import delivered_by_slurm, is_ancestor, slurm_proctrack


@pytest.mark.parametrize("text, expected", [
    ("ClusterName=x\nProctrackType=proctrack/linuxproc\n", "proctrack/linuxproc"),
    ("proctracktype = proctrack/PGID  # comment\n", "proctrack/pgid"),
    ("ClusterName=x\n", "proctrack/cgroup"),  # Slurm's default
    ("#ProctrackType=proctrack/pgid\nProctrackType=proctrack/cgroup\n", "proctrack/cgroup"),
    ("ClusterName=x\nInclude /etc/slurm/more.conf\n", None),  # it may be set there: unknown
    ("Include /etc/slurm/more.conf\nProctrackType=proctrack/pgid\n", "proctrack/pgid"),
    (b"ProctrackType=proctrack/pgid\n\xff\x00\n", "proctrack/pgid"),  # bad bytes never raise
])
def test_proctrack_is_read_from_slurm_conf(tmp_path, text, expected):
    conf = tmp_path / "slurm.conf"
    conf.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert slurm_proctrack({"SLURM_CONF": str(conf)}) == expected


def test_without_a_readable_slurm_conf_the_proctrack_is_unknown(tmp_path, monkeypatch):
    import trainledger.sources.capture.signals as signals

    monkeypatch.setattr(signals, "SLURM_CONF_PATHS", ())
    assert slurm_proctrack({"SLURM_CONF": str(tmp_path / "missing.conf")}) is None


def test_only_slurmstepd_under_a_job_is_not_forwarded_again(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ProctrackType=proctrack/linuxproc\n")
    env = {"SLURM_JOB_ID": "7", "SLURM_CONF": str(conf)}
    assert is_ancestor(os.getppid()) and not is_ancestor(os.getpid())
    # pytest's parent is no slurmstepd; no sender, init, ourselves, a pid that does not exist: forwarded
    for sender in (os.getppid(), None, 0, 1, os.getpid(), 2 ** 22 + 12345):
        assert delivered_by_slurm(sender, env) is False
    assert delivered_by_slurm(os.getppid(), {"SLURM_CONF": str(conf)}) is False  # not under Slurm
