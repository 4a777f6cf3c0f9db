"""Resuming training after faults: a run SIGKILLed mid-epoch resumes (``--resume auto``) to the result of an
uninterrupted run, the loader skips the consumed batches, a corrupt ``last.ckpt`` is a clear error.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning")
pytest.importorskip("yaml")

from gridify import training as T  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

#: 4 classes x 2 shapes, batch 2: four optimizer steps per epoch, 2 epochs, a checkpoint every 2 steps
FAULT_RUN = [
    "task=classification",
    "data.name=procedural",
    "data.num_points=64",
    "data.num_samples_per_class=2",
    "data.classes=[box, sphere, cylinder, torus]",
    "data.val={num_samples_per_class: 1}",
    "data.test={num_samples_per_class: 2}",
    "data.batch_size=2",
    "data.augmentations=[rotate_z, {name: scale, low: 0.9, high: 1.2}, jitter]",
    "model.name=gridified_classifier",
    "model.resolution=4",
    "model.k=4",
    "model.hidden_channels=8",
    "model.depth=1",
    "model.kernel_size=3",
    "model.dropout=0.2",
    "optim.lr=5e-3",
    "optim.warmup_epochs=1",
    "trainer.max_epochs=2",
    "trainer.num_threads=1",
    "trainer.progress_bar=false",
    "trainer.log_every_n_steps=1",
    "trainer.plots=false",
    "trainer.test_ckpt=last",
    "trainer.checkpoint.every_n_train_steps=2",
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
    return [
        str(ROOT / "scripts" / "train.py"),
        "--config",
        str(ROOT / "configs" / "procedural.yaml"),
        *FAULT_RUN,
        f"output_dir={out_dir}",
        *extra,
    ]


def _env(**extra):
    # PYTHONPATH: the subprocess runs this checkout's gridify, whichever one is installed
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT), **extra)
    env.pop("LOCAL_RANK", None)
    return env


def _run(cmd, env, timeout=240):
    return subprocess.run([sys.executable, *cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


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
    proc = subprocess.run(
        [sys.executable, str(killer), *_train_cmd(killed)],
        cwd=ROOT,
        env=_env(GRIDIFY_KILL_AT_STEP=str(kill_at)),
        capture_output=True,
        text=True,
        timeout=240,
    )
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
        return T.EpochDataLoader(
            data,
            batch_size=3,
            sampler=sampler,
            collate_fn=collate_points,
            epoch_fn=lambda: epoch[0],
            progress_fn=lambda: consumed[0],
        )

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


def test_resume_from_corrupt_checkpoint_fails_clearly(tmp_path):
    ck = tmp_path / "checkpoints"
    ck.mkdir()
    (ck / "last.ckpt").write_bytes(b"PK\x03\x04 half a checkpoint")
    with pytest.raises(SystemExit, match=r"train.py: error: cannot read checkpoint .*last.ckpt: the file is corrupt"):
        T.main(
            [
                "--config",
                str(ROOT / "configs" / "procedural.yaml"),
                *FAULT_RUN,
                f"output_dir={tmp_path}",
                "--resume",
                "auto",
            ]
        )
