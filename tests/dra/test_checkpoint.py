"""The prepared-claims checkpoint: survives a new process, writes whole files only, and refuses to start
on a file it cannot read (rather than forget specs it would never remove)."""

from __future__ import annotations

import json

import pytest

from webhook.dra import checkpoint

PREPARED = checkpoint.Prepared(
    uid="u1",
    namespace="ns",
    name="c1",
    devices=(checkpoint.Device(("gpu",), "node-1", "gpu-0", ("v.io/gpu=u1-gpu",), "s-1"),),
    spec_file="v.io-gpu_u1.json",
    spec={"cdiVersion": "0.5.0", "kind": "v.io/gpu", "devices": []},
)


def test_what_is_put_is_read_back_by_a_new_process_and_removed_for_good(tmp_path):
    path = tmp_path / "checkpoint.json"
    checkpoint.Checkpoint(path).put(PREPARED)
    again = checkpoint.Checkpoint(path)
    assert again.get("u1") == PREPARED
    again.remove("u1")
    again.remove("u1")  # gone already: nothing to do
    assert checkpoint.Checkpoint(path).all() == ()
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.json"]  # no temporary file left
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_missing_file_is_an_empty_checkpoint(tmp_path):
    assert checkpoint.Checkpoint(tmp_path / "none.json").all() == ()


@pytest.mark.parametrize(
    "content",
    ["{", json.dumps({"version": 9, "claims": {}}), json.dumps({"version": 1, "claims": {"u": {}}})],
    ids=["not-json", "other-version", "missing-fields"],
)
def test_an_unreadable_file_stops_the_start_saying_what_to_do(tmp_path, content):
    path = tmp_path / "checkpoint.json"
    path.write_text(content)
    with pytest.raises(checkpoint.CheckpointError, match=r"is unreadable .*drain the node, remove the file"):
        checkpoint.Checkpoint(path)


def test_a_failed_write_keeps_the_old_state_and_says_so(tmp_path):
    store = checkpoint.Checkpoint(tmp_path / "gone" / "checkpoint.json")  # its folder does not exist
    with pytest.raises(checkpoint.CheckpointError, match="No such file or directory"):
        store.put(PREPARED)
    assert store.all() == ()
