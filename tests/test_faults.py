"""Fault injection: killed training runs, interrupted checkpoint writes, corrupt checkpoints,
truncated dataset files and half-downloaded archives.

Every fault must either be survived without losing more than one checkpoint interval, or be
reported by an error that names the file and the problem.
"""
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("lightning")
pytest.importorskip("yaml")

from gridify import training as T  # noqa: E402
from gridify.checkpoint import CheckpointError, load_checkpoint  # noqa: E402
from gridify.datasets.download import download_and_extract, download_file, sha256_of  # noqa: E402
from gridify.io import read_points, write_ply  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: 4 classes x 2 shapes, batch 2: four optimizer steps per epoch, 2 epochs, a checkpoint every 2 steps
FAULT_RUN = [
    "task=classification", "data.name=procedural", "data.num_points=64", "data.num_samples_per_class=2",
    "data.classes=[box, sphere, cylinder, torus]", "data.val={num_samples_per_class: 1}",
    "data.test={num_samples_per_class: 2}", "data.batch_size=2",
    "data.augmentations=[rotate_z, {name: scale, low: 0.9, high: 1.2}, jitter]",
    "model.name=gridified_classifier", "model.resolution=4", "model.k=4", "model.hidden_channels=8",
    "model.depth=1", "model.kernel_size=3", "model.dropout=0.2",
    "optim.lr=5e-3", "optim.warmup_epochs=1",
    "trainer.max_epochs=2", "trainer.num_threads=1", "trainer.progress_bar=false", "trainer.log_every_n_steps=1",
    "trainer.plots=false", "trainer.test_ckpt=last", "trainer.checkpoint.every_n_train_steps=2",
]
STEPS_PER_EPOCH = 4
CHECKPOINT_EVERY = 2

#: runs scripts/train.py, but SIGKILLs itself when the optimizer is about to take step KILL_AT
#: (a real SIGKILL: no cleanup, no atexit, no checkpoint flush), deterministically mid-epoch
_KILLER = textwrap.dedent("""
    import os, runpy, signal, sys
    from torch.optim.optimizer import register_optimizer_step_pre_hook
    kill_at = int(os.environ["GRIDIFY_KILL_AT_STEP"])
    calls = [0]
    def hook(opt, args, kwargs):
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    register_optimizer_step_pre_hook(hook)
    sys.argv = [sys.argv[1], *sys.argv[2:]]
    runpy.run_path(sys.argv[0], run_name="__main__")
""")


def _train_cmd(out_dir, *extra):
    return [str(ROOT / "scripts" / "train.py"), "--config", str(ROOT / "configs" / "procedural.yaml"), *FAULT_RUN,
            f"output_dir={out_dir}", *extra]


def _env(**extra):
    # PYTHONPATH: the subprocess runs this checkout's gridify, whichever one is installed
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT), **extra)
    env.pop("LOCAL_RANK", None)
    return env


def _run(cmd, env, timeout=240):
    return subprocess.run([sys.executable, *cmd], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


# --------------------------------------------------------------------------------------
# SIGKILL mid-epoch, then --resume auto
# --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted_run(tmp_path):
    full, killed = tmp_path / "full", tmp_path / "killed"
    proc = _run(_train_cmd(full), _env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]

    kill_at = 8  # the 8th optimizer step: steps 1-7 done, checkpoints written after steps 2, 4, 6
    killer = tmp_path / "killer.py"
    killer.write_text(_KILLER)
    proc = subprocess.run([sys.executable, str(killer), *_train_cmd(killed)], cwd=ROOT,
                          env=_env(GRIDIFY_KILL_AT_STEP=str(kill_at)), capture_output=True, text=True, timeout=240)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
    assert not (killed / "test_metrics.json").exists()
    last = killed / "checkpoints" / "last.ckpt"
    state = torch.load(last, map_location="cpu", weights_only=True)
    step = int(state["global_step"])
    # at most one checkpoint interval lost, and the checkpoint is from inside an epoch
    assert kill_at - 1 - step < CHECKPOINT_EVERY and step % STEPS_PER_EPOCH != 0, step
    assert not list((killed / "checkpoints").glob(".*.tmp")), "a temporary checkpoint file was left behind"

    proc = _run([*_train_cmd(killed), "--resume", "auto"], _env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "resuming from" in proc.stdout
    assert "dataloader is not resumable" not in proc.stdout + proc.stderr

    a = json.loads((full / "test_metrics.json").read_text())
    b = json.loads((killed / "test_metrics.json").read_text())
    assert a["global_step"] == b["global_step"] == 2 * STEPS_PER_EPOCH
    for key in ("oa", "macc", "loss"):
        assert b["metrics"][key] == pytest.approx(a["metrics"][key], abs=1e-5), key
    # stronger than the metric: the final weights are the same (same batches, same order)
    wa = torch.load(full / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    wb = torch.load(last, weights_only=True)["state_dict"]
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-5, atol=1e-6, msg=k)


def test_mid_epoch_resume_skips_the_consumed_batches():
    """The train loader's state round-trips and the next iteration of that epoch skips exactly."""
    from gridify.datasets import collate_points

    data = [{"pos": torch.full((2, 3), float(i)), "y": torch.tensor(i)} for i in range(10)]
    epoch = [1]
    consumed = [0]

    def make():
        sampler = T.ShardSampler(10, shuffle=True, seed=3)
        return T.EpochDataLoader(data, batch_size=3, sampler=sampler, collate_fn=collate_points,
                                 epoch_fn=lambda: epoch[0], progress_fn=lambda: consumed[0])

    full = [b["y"].tolist() for b in make()]
    assert len(full) == 4
    loader = make()
    it = iter(loader)
    next(it), next(it)
    consumed[0] = 2
    state = loader.state_dict()
    assert state == {"epoch": 1, "batches": 2}
    resumed = make()
    resumed.load_state_dict(state)
    assert [b["y"].tolist() for b in resumed] == full[2:]
    assert [b["y"].tolist() for b in resumed] == full  # one-shot: the next pass is a whole epoch
    other = make()
    other.load_state_dict({"epoch": 0, "batches": 2})  # a state from another epoch never skips
    assert [b["y"].tolist() for b in other] == full
    with pytest.warns(UserWarning, match="malformed train dataloader state"):
        make().load_state_dict({"bogus": 1})
    with pytest.raises(ValueError, match="count must be a non-negative integer"):
        T.ShardSampler(4, shuffle=False).skip_next(-1)


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
    T.atomic_torch_save({"state_dict": {"w": torch.randn(64, 64)}, "model_name": "x", "model_kwargs": {},
                         "task": "classification", "info": {}, "config": {}}, path)
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


def test_resume_from_corrupt_checkpoint_fails_clearly(tmp_path):
    ck = tmp_path / "checkpoints"
    ck.mkdir()
    (ck / "last.ckpt").write_bytes(b"PK\x03\x04 half a checkpoint")
    with pytest.raises(SystemExit, match=r"train.py: error: cannot read checkpoint .*last.ckpt: the file is corrupt"):
        T.main(["--config", str(ROOT / "configs" / "procedural.yaml"), *FAULT_RUN, f"output_dir={tmp_path}",
                "--resume", "auto"])


# --------------------------------------------------------------------------------------
# truncated dataset files
# --------------------------------------------------------------------------------------
def test_truncated_dataset_files_name_the_file(tmp_path):
    pts = np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32)
    ply = write_ply(tmp_path / "a.ply", pts)
    raw = ply.read_bytes()
    ply.write_bytes(raw[:-37])
    with pytest.raises(ValueError, match=rf"{ply}: truncated PLY"):
        read_points(ply)
    npy = tmp_path / "a.npy"
    np.save(npy, pts)
    npy.write_bytes(npy.read_bytes()[:-20])
    with pytest.raises(ValueError, match=rf"{npy}: "):
        read_points(npy)


def test_truncated_file_inside_a_dataset_names_the_file(tmp_path):
    """A ModelNet folder with one cut-off OFF mesh: reading that sample raises naming the file."""
    from gridify.datasets import ModelNet

    root = tmp_path / "ModelNet10"
    tetra = "OFF\n4 4 0\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 1 2\n3 0 1 3\n3 0 2 3\n3 1 2 3\n"
    for cls in ("chair", "table"):
        for split in ("train", "test"):
            d = root / cls / split
            d.mkdir(parents=True)
            for i in range(2):
                (d / f"{cls}_{i:04d}.off").write_text(tetra)
    bad = root / "chair" / "train" / "chair_0001.off"
    bad.write_text(tetra[:-30])  # the last faces are missing
    with pytest.warns(UserWarning, match="class folders found"):
        ds = ModelNet(root=str(root), name="10", split="trainval", num_points=32, use_normals=False, cache=False)
    assert len(ds) == 4
    ds[0]  # the intact files read fine
    with pytest.raises(ValueError, match=r"chair_0001\.off.*truncated OFF file"):
        for i in range(len(ds)):
            ds[i]


# --------------------------------------------------------------------------------------
# half-downloaded archives
# --------------------------------------------------------------------------------------
def _zip(members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_half_downloaded_archive_is_detected_and_refetched(tmp_path):
    data = _zip({"toy/a.txt": b"hello", "toy/b.bin": os.urandom(50_000)})
    digest = hashlib.sha256(data).hexdigest()
    mirror = tmp_path / "mirror" / "toy.zip"
    mirror.parent.mkdir()
    mirror.write_bytes(data)
    root = tmp_path / "root"
    root.mkdir()
    # a previous download died half-way, leaving a truncated archive under the final name
    (root / "toy.zip").write_bytes(data[: len(data) // 2])
    with pytest.warns(UserWarning, match=r"toy.zip: sha256 mismatch .* re-fetching"):
        out = download_and_extract("toy", root, [mirror.as_uri()], digest)
    assert (out / "a.txt").read_bytes() == b"hello"
    assert sha256_of(root / "toy.zip") == digest
    assert list(root.glob("toy.zip.corrupt*"))  # the bad copy is kept aside, not silently deleted


def test_half_downloaded_archive_reported_when_no_mirror_works(tmp_path):
    data = _zip({"toy/a.txt": b"hello"})
    digest = hashlib.sha256(data).hexdigest()
    root = tmp_path / "root"
    root.mkdir()
    (root / "toy.zip").write_bytes(data[:40])
    with pytest.raises(ValueError, match=r"toy.zip: sha256 mismatch"):
        with pytest.warns(UserWarning):
            download_and_extract("toy", root, [(tmp_path / "nowhere" / "toy.zip").as_uri()], digest)


def test_partial_part_file_with_wrong_bytes_is_restarted(tmp_path):
    """A stale ``.part`` (e.g. from another version) is resumed, fails the sha256, and is fetched afresh."""
    data = os.urandom(20_000)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    dest = tmp_path / "out" / "src.bin"
    dest.parent.mkdir()
    (dest.parent / "src.bin.part").write_bytes(os.urandom(5_000))
    download_file(src.as_uri(), dest, sha256=hashlib.sha256(data).hexdigest(), progress=False)
    assert dest.read_bytes() == data
