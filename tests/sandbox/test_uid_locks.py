"""Two grading runs on one machine never lease the same sandbox uid, although each points
``tempfile.tempdir`` at a folder of its own (as ``autograde.cli`` does)."""
from __future__ import annotations

import tempfile

from sandbox import handle, multirank
from sandbox.locks import lock_folder, machine_temp_folder


def test_the_lock_folder_does_not_follow_a_runs_temporary_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert lock_folder("autograde-uids").parent == machine_temp_folder() != tmp_path


def test_leases_taken_under_two_temporary_folders_get_two_uids(tmp_path, monkeypatch):
    """The same process id (and so the same first uid tried), two runs' temporary folders: the
    second lease must see the first one's lock."""
    leases = []
    try:
        for run in ("run-a", "run-b"):
            (tmp_path / run).mkdir()
            monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / run))
            leases.append(handle._UidLease(thorough=False))
        assert leases[0].uid != leases[1].uid
    finally:
        for lease in leases:
            lease.release()
    ranks = []
    try:
        for run in ("run-a", "run-b"):
            monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / run))
            ranks.append(multirank._UidLease())
        assert ranks[0].uid != ranks[1].uid
    finally:
        for lease in ranks:
            lease.release()
