"""Checkpoint writes and reads of gridify.training: atomic and weights-only; interrupted writes keep the
previous file; corrupt files are a CheckpointError naming the file."""

import io
import os

import pytest
import torch

pytest.importorskip("lightning")
pytest.importorskip("yaml")

from gridify import training as T  # noqa: E402
from gridify.checkpoint import CheckpointError, load_checkpoint  # noqa: E402


# --------------------------------------------------------------------------------------
# checkpoint writes and reads
# --------------------------------------------------------------------------------------
def test_interrupted_checkpoint_write_keeps_the_previous_one(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    good = {"state_dict": {"w": torch.arange(4.0)}, "global_step": 2}
    T.atomic_torch_save(good, path)
    before = path.read_bytes()
    real_save = torch.save

    def dying_save(obj, fh, *args, **kwargs):
        buf = io.BytesIO()
        real_save(obj, buf)
        fh.write(buf.getvalue()[: len(buf.getvalue()) // 2])  # half the bytes reach the disk...
        raise KeyboardInterrupt("killed mid-write")  # ...then the process is interrupted

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        T.atomic_torch_save({"state_dict": {"w": torch.zeros(1000)}, "global_step": 3}, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert torch.load(path, weights_only=True)["global_step"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left


def test_lightning_checkpoint_io_is_atomic_and_weights_only(tmp_path):
    io_ = T.atomic_checkpoint_io()
    path = tmp_path / "sub" / "a.ckpt"
    io_.save_checkpoint({"state_dict": {"w": torch.ones(2)}, "epoch": 1}, path)
    assert io_.load_checkpoint(path)["epoch"] == 1
    import argparse

    torch.save({"state_dict": {}, "obj": argparse.Namespace(x=1)}, tmp_path / "evil.ckpt")
    with pytest.raises(Exception, match="Weights only load failed|Unsupported global"):
        io_.load_checkpoint(tmp_path / "evil.ckpt", weights_only=False)  # the caller cannot turn it off
    with pytest.raises(FileNotFoundError, match="not found"):
        io_.load_checkpoint(tmp_path / "missing.ckpt")


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "flip"])
def test_corrupt_checkpoint_clear_error(tmp_path, damage):
    path = tmp_path / "last.ckpt"
    T.atomic_torch_save(
        {
            "state_dict": {"w": torch.randn(64, 64)},
            "model_name": "x",
            "model_kwargs": {},
            "task": "classification",
            "info": {},
            "config": {},
        },
        path,
    )
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(raw)))
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # a flipped byte in the zip central directory
        b = bytearray(raw)
        b[-30] ^= 0xFF
        path.write_bytes(bytes(b))
    with pytest.raises(CheckpointError, match=f"cannot read checkpoint {path}: the file is corrupt"):
        load_checkpoint(path)
