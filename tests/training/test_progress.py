"""A run is never silent for a minute: it says what it reads, its plan, its first step at once, a line at least every
LINE_SECONDS while it steps and, whatever it does, a line after QUIET_SECONDS of silence; a terminal that reports no
size still gets its progress bar (gridify.training.progress)."""

import os
import sys
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("lightning")

from gridify.training import progress as P  # noqa: E402
from tests.helpers import ROOT  # noqa: E402


def test_the_voice_says_what_the_run_does_after_a_silence(capsys):
    voice = P.RunVoice(quiet=0.2)
    voice.doing("reading the data: modelnet40, the train and val splits")
    assert voice.check() is False and capsys.readouterr().out == ""
    time.sleep(0.25)
    assert voice.check() is True
    line = capsys.readouterr().out.strip()
    assert line.startswith("[train] reading the data: modelnet40, the train and val splits (still running, ")
    assert voice.check() is False  # the line it just said starts the silence again


def test_the_watch_speaks_while_the_main_thread_is_busy_and_stops_with_the_run(capsys):
    with P.RunVoice(quiet=0.1) as voice:
        voice.doing("epoch 1/25 step 3/277")
        time.sleep(0.35)  # one long step: nothing else prints
    said = capsys.readouterr().out.splitlines()
    assert len(said) >= 2 and all(s.startswith("[train] epoch 1/25 step 3/277 (still running, ") for s in said), said
    time.sleep(0.2)
    assert capsys.readouterr().out == ""  # stopped: nothing after the run
    silent = P.RunVoice(quiet=0.05, enabled=False).start()  # other ranks of a distributed run
    time.sleep(0.15)
    silent.stop()
    assert capsys.readouterr().out == ""


def _bar(every, seconds, voice):
    bar = P.LineProgress(every, voice, seconds=seconds)
    bar._trainer = SimpleNamespace(num_training_batches=277, max_epochs=25, max_steps=-1)
    bar.get_metrics = lambda trainer, module: {"train_loss": 2.5}
    return bar


def test_the_first_step_is_shown_at_once_then_every_n_steps_or_seconds(capsys):
    trainer = SimpleNamespace(current_epoch=0, max_epochs=25, optimizers=[])
    bar = _bar(every=20, seconds=0.2, voice=P.RunVoice(quiet=60))
    for i in range(3):
        bar.on_train_batch_end(trainer, None, None, None, i)
    time.sleep(0.25)  # a slow stretch: the next step is shown whatever log_every_n_steps says
    for i in range(3, 6):
        bar.on_train_batch_end(trainer, None, None, None, i)
    bar.on_train_batch_end(trainer, None, None, None, 19)
    steps = [line.split(" | ")[0] for line in capsys.readouterr().out.splitlines()]
    assert steps == [f"[train] epoch 1/25 step {s}/277" for s in (1, 4, 20)], steps


def test_a_slow_data_read_is_not_a_silent_start(tmp_path, monkeypatch, capsys):
    """Reading the data (estimating normals, sampling meshes) before any step: the run says it starts reading,
    then that it still is, then the plan of the training before its first step, then that step."""
    from gridify.training import main, runner

    real = runner.build_data

    def slow(cfg):
        time.sleep(0.6)
        return real(cfg)

    monkeypatch.setattr(runner, "build_data", slow)
    monkeypatch.setattr(P, "QUIET_SECONDS", 0.25)
    main(
        [
            "--config",
            str(ROOT / "configs" / "procedural.yaml"),
            f"output_dir={tmp_path}",
            "data.num_points=96",
            "data.num_samples_per_class=2",
            "data.classes=[box, sphere]",
            "data.val={num_samples_per_class: 1}",
            "data.test={num_samples_per_class: 1}",
            "data.batch_size=4",
            "model.resolution=4",
            "model.k=4",
            "model.hidden_channels=8",
            "model.depth=1",
            "model.kernel_size=3",
            "trainer.max_epochs=1",
            "trainer.num_threads=1",
            "trainer.plots=false",
            "trainer.log_every_n_steps=50",
        ]
    )
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[train] ")]
    assert said[0] == "[train] reading the data: procedural, the train and val splits", said
    assert said[1].startswith("[train] reading the data: procedural, the train and val splits (still running, "), said
    plan = next(i for i, line in enumerate(said) if line.startswith("[train] training "))
    assert said[plan] == "[train] training epoch 1, 1 step each", said
    # then the first step (the watch, 0.25 s here, may say more between on a busy machine)
    step = next(i for i, line in enumerate(said) if line.startswith("[train] epoch 1/1 step 1/1 | train_loss "))
    assert step > plan and all("(still running, " in line for line in said[plan + 1 : step]), said


def test_the_plan_says_what_makes_the_first_epoch_slower():
    from gridify.training.runner import first_epoch_note

    assert first_epoch_note({"data": {"name": "procedural"}}) == ""
    assert first_epoch_note({"data": {"keep_in_memory": True, "estimate_normals": 30}}) == (
        "the first epoch reads every sample from its file, estimates its normals (30 neighbours) and keeps it: "
        "slower than the next"
    )
    assert first_epoch_note({"data": {"estimate_normals": 10}}) == (
        "every sample's normals are estimated (10 neighbours) as it is read"
    )


def _pty_read(master):
    import select

    out = b""
    while select.select([master], [], [], 0.3)[0]:
        out += os.read(master, 65536)
    return out.decode("utf-8", "replace")


def test_a_terminal_without_a_size_still_gets_its_progress_bar(monkeypatch):
    """A pseudo-terminal opened without a size reports 0 x 0 (as `script`, `docker exec -t` and many editors' and
    agents' terminals open it); tqdm then draws nothing at all, so Lightning's own bar stays blank; gridify's is
    drawn at $COLUMNS x $LINES (80 x 24)."""
    import pty

    from lightning.pytorch.callbacks import TQDMProgressBar

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    shown = {}
    for name, bar in (("lightning", TQDMProgressBar()), ("gridify", P.TerminalProgress(P.RunVoice()))):
        master, slave = pty.openpty()
        assert os.get_terminal_size(slave) == (0, 0)
        with os.fdopen(slave, "w") as term:
            monkeypatch.setattr(sys, "stdout", term)
            tq = bar.init_train_tqdm()
            tq.reset(total=3)
            tq.update(2)
            tq.refresh()
            term.flush()
            shown[name] = _pty_read(master)
            tq.close()
        os.close(master)
    assert "2/3" not in shown["lightning"], shown["lightning"]
    assert "2/3" in shown["gridify"] and "|" in shown["gridify"], shown["gridify"]


@pytest.mark.slow
def test_a_run_in_a_pseudo_terminal_without_a_size_draws_its_bar(tmp_path):
    """``gridify train`` with its output on a new pseudo-terminal (0 x 0, as `script` or `docker exec -t` open it)."""
    import pty
    import subprocess

    from tests.training.test_train import tiny

    master, slave = pty.openpty()
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    env.pop("COLUMNS", None), env.pop("LINES", None)
    argv = [sys.executable, "-m", "gridify.training", *tiny(tmp_path / "out", "trainer.progress_bar=true")]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=300)
    os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, text[-3000:]
    assert "epoch 1/2:" in text and "epoch 2/2:" in text and "Epoch 0" not in text, text[-3000:]  # counted from 1
    assert "2/2 [" in text and "it/s" in text, text[-3000:]
