"""One training run from a resolved config: start or resume, build, fit, test, report.

:func:`run_process` is the whole run of one process, in the order of its steps:

1. :func:`setup_process`: the launcher's world size (torchrun), CPU threads, console noise;
2. :func:`resume_checkpoint` / :func:`prepare_fresh_start`: continue a checkpoint (a Lightning
   checkpoint, not an exported model, and of the model this run builds: :func:`check_resume_fits`),
   or refuse to start afresh over an earlier run unless asked to replace it;
3. :func:`build_data` and :func:`build_module`: datasets, augmentations, model and LR schedule;
4. :func:`~.report.write_run_files`: ``config.yaml`` and ``run_info.json`` (rank 0);
5. :func:`build_trainer`, then :func:`fit`;
6. :func:`test_and_report`: test the best (or last) checkpoint and write ``test_metrics.json``,
   ``checkpoints/model.pt``, the final ``run_info.json``, the plots and, in TensorBoard, the test
   confusion matrix and the hyper-parameters with the test metrics (rank 0).

``trainer.limit_{val,test}_batches`` reach the trainer only as 0 (no validation / test); other
values choose a stratified subset in the data module (:func:`~.data.eval_subset`), so a quick run
scores every class. The errors a user can fix (:data:`RUN_ERRORS`) end the run with one line.

:func:`run` first checks the output folder and locks it for the run's lifetime (a second run on it
fails at once; :func:`gridify._paths.folder_lock`), then runs it in this process, or, for
``trainer.strategy: ddp_spawn``, in one process per device started by :func:`spawn_run` (see there
why Lightning's own ``ddp_spawn`` is not used).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import lightning.pytorch as pl
import torch
import torch.multiprocessing as mp
from lightning.fabric.plugins.environments.lightning import find_free_network_port
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.trainer.states import TrainerStatus

from gridify._paths import LOCK_NAME, PathError, check_input_file, check_output_dir, folder_lock
from gridify._version import __version__
from gridify._pretrained import PRETRAINED, pretrained_file, shipped_name
from gridify.checkpoint import CheckpointError, export_model, load_checkpoint, load_weights, plain
from gridify.datasets import DatasetError, DatasetNotFoundError, DownloadError
from gridify.tasks import get_task

from .callbacks import StepCurves, atomic_checkpoint_io, checkpoint_callbacks, make_loggers
from .config import ConfigError, parse_augmentations
from .config_errors import trainer_error
from .data import (
    EpochAugment,
    build_dataset,
    dataset_info,
    fill_model_kwargs,
    graph_builder_of,
    inference_info,
    train_class_weights,
)
from .epochs import shown_epoch
from .module import PointCloudData, PointCloudTask
from .plots import STEPS_FILE
from .progress import RunVoice, interactive, progress_callbacks
from .report import (
    RunRecord,
    export_run_model,
    test_report,
    write_plots,
    write_run_files,
    write_tensorboard,
    write_test_outputs,
)
from .schedule import steps_per_epoch, world_size_guess

__all__ = [
    "RUN_ERRORS",
    "run",
    "run_process",
    "spawn_run",
    "is_spawn_strategy",
    "setup_process",
    "resume_checkpoint",
    "check_resume_fits",
    "apply_init_weights",
    "prepare_fresh_start",
    "build_data",
    "build_module",
    "build_trainer",
    "first_epoch_note",
    "fit",
    "test_checkpoint",
    "test_and_report",
]

#: the errors a run reports as a one-line message (bad config, checkpoint or data), not a traceback
RUN_ERRORS = (ConfigError, CheckpointError, DatasetNotFoundError, DownloadError, DatasetError, PathError)

#: what a run writes into its output_dir: checked before the run starts (a file where a folder goes, ...)
RUN_FOLDERS = ("checkpoints", "csv", "tensorboard", "plots")
RUN_FILES = ("config.yaml", "run_info.json", "test_metrics.json", "checkpoints/last.ckpt", "checkpoints/model.pt")


def _env_rank() -> int:
    """Rank of this process before Lightning starts (torchrun sets RANK, Lightning's launcher LOCAL_RANK)."""
    for var in ("RANK", "LOCAL_RANK"):
        if os.environ.get(var) not in (None, ""):
            return int(os.environ[var])
    return 0


def _apply_torchrun(tr: Dict[str, Any]) -> None:
    """Under torchrun, size the Lightning trainer from the launcher's environment."""
    if "LOCAL_WORLD_SIZE" not in os.environ or "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    local = int(os.environ["LOCAL_WORLD_SIZE"])
    world = int(os.environ.get("WORLD_SIZE", local))
    if tr["devices"] in (1, "1", "auto", None):
        tr["devices"] = local
    tr["num_nodes"] = max(1, world // max(1, local))
    if tr["strategy"] == "auto" and world > 1:
        tr["strategy"] = "ddp"


def _not_a_tip(record: logging.LogRecord) -> bool:
    """Drops Lightning's advertising ("Tip: ... try installing ...") from the run's log."""
    return not record.getMessage().lstrip().startswith("\N{ELECTRIC LIGHT BULB} Tip")


def setup_process(tr: Dict[str, Any]) -> None:
    """Size the trainer under torchrun, set the CPU threads and quiet Lightning's small-run warnings and tips."""
    _apply_torchrun(tr)
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if _not_a_tip not in rank_zero.filters:
        rank_zero.addFilter(_not_a_tip)
    if tr["num_threads"]:
        torch.set_num_threads(int(tr["num_threads"]))
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
    # the epoch-end learning rate (lr_epoch) keeps the LR curve when an epoch is shorter than the interval
    warnings.filterwarnings("ignore", message=r".*smaller than the logging interval.*")
    logging.getLogger("lightning.pytorch.trainer.connectors.logger_connector").setLevel(logging.WARNING)


def resume_checkpoint(resume: Optional[str], ckpt_dir: Path, rank0: bool) -> Optional[str]:
    """The checkpoint ``--resume`` names (``auto``: ``last.ckpt`` if present), read once to fail early."""
    if not resume:
        return None
    if resume == "auto":
        last = ckpt_dir / "last.ckpt"
        ckpt_path = str(last) if last.is_file() else None
        if rank0:
            what = f"resuming from {ckpt_path}" if ckpt_path else f"no {last}, starting afresh"
            print(f"[train] --resume auto: {what}")
    else:
        if not Path(resume).exists():
            raise CheckpointError(f"--resume: checkpoint not found: {resume}")
        check_input_file(resume, "--resume")  # a folder, a FIFO, an unreadable file: said as such
        ckpt_path = resume
    if ckpt_path and load_checkpoint(ckpt_path)["kind"] != "lightning":  # fail early on a bad file
        raise CheckpointError(
            f"--resume {ckpt_path}: this is an exported model (model.pt: the weights and "
            f"inference settings, without the optimizer, scheduler and epoch of a Lightning "
            f"checkpoint), so a run cannot continue from it; resume from "
            f"<output_dir>/checkpoints/last.ckpt, or use the model.pt with gridify "
            f"evaluate/predict"
        )
    return ckpt_path


def _differences(theirs: Dict[str, Any], ours: Dict[str, Any]) -> List[str]:
    """``key: checkpoint X, this run Y`` for every hyper-parameter that differs."""
    keys = sorted(set(theirs) | set(ours))
    return [
        f"{k}: checkpoint {theirs.get(k, '(unset)')!r}, this run {ours.get(k, '(unset)')!r}"
        for k in keys
        if plain(theirs.get(k)) != plain(ours.get(k))
    ]


def check_resume_fits(ckpt_path: Optional[str], module: PointCloudTask, record: RunRecord) -> None:
    """Refuse (``CheckpointError``) to resume from a checkpoint of another model than this run builds:
    another task or model name, or weights whose names or shapes differ. The message says what
    differs (the hyper-parameters too), before Lightning loads anything."""
    if ckpt_path is None:
        return
    payload = load_checkpoint(ckpt_path)
    ours, theirs = dict(module.model.state_dict()), payload["state_dict"]
    problems = []
    if payload["task"] != record.cfg["task"] or payload["model_name"] != record.model_name:
        problems.append(
            f"it holds a {payload['task']} model {payload['model_name']!r}, this run trains a "
            f"{record.cfg['task']} model {record.model_name!r}"
        )
    missing, extra = [k for k in ours if k not in theirs], [k for k in theirs if k not in ours]
    shapes = [
        f"{k} {tuple(theirs[k].shape)} vs {tuple(v.shape)}"
        for k, v in ours.items()
        if k in theirs and tuple(theirs[k].shape) != tuple(v.shape) and not k.endswith("rep_weight")
    ]
    if missing or extra or shapes:
        hparams = _differences(dict(payload["model_kwargs"]), dict(record.model_kwargs))
        for words, keys, shown in (
            ("hyper-parameter(s) differ", hparams, 6),
            ("weight(s) missing from the checkpoint", missing, 2),
            ("weight(s) not in this run's model", extra, 2),
            ("weight(s) of another shape (checkpoint vs this run)", shapes, 2),
        ):
            if keys:
                problems.append(f"{len(keys)} {words}: {', '.join(keys[:shown])}{' ...' if len(keys) > shown else ''}")
    if problems:
        raise CheckpointError(
            f"--resume {ckpt_path} is a checkpoint of another model: {'; '.join(problems)}. "
            f"Resume with the config it was trained with (its config.yaml), or start afresh "
            f"without --resume"
        )


def apply_init_weights(source: Optional[str], module: PointCloudTask, record: RunRecord) -> Optional[str]:
    """``init_weights``: start a fresh run from trained weights (fine-tuning), a shipped model's name
    (``gridify list models``) or a ``model.pt`` / ``.ckpt`` file of the same model with the same
    arguments; returns the file read (None without ``init_weights``). Only the model's weights are taken:
    the optimizer, the schedule and the epoch count start afresh. Anything that does not fit raises
    :class:`CheckpointError` naming ``init_weights`` before training starts."""
    if not source:
        return None
    path = pretrained_file(source) if shipped_name(source) else Path(source)  # the one rule of model names
    where = f"init_weights {source}"
    if not path.exists():
        raise CheckpointError(
            f"{where}: no such file and not a shipped model (shipped: {', '.join(sorted(PRETRAINED))})"
        )
    check_input_file(str(path), "init_weights")
    payload = load_checkpoint(path)
    if payload["model_name"] != record.model_name:
        raise CheckpointError(
            f"{where} holds a {payload['model_name']!r} model but this run builds {record.model_name!r}; "
            f"set model.name (and its arguments) to the file's"
        )
    load_weights(module.model, payload, where)
    return str(path)


def prepare_fresh_start(out: Path, overwrite: bool) -> None:
    """Refuse to start afresh over an earlier run in ``out``; with ``overwrite``, delete its outputs."""
    existing = [d for d in ("checkpoints", "csv", "tensorboard", "plots") if (out / d).exists()]
    if existing and (out / "checkpoints" / "last.ckpt").exists() and not overwrite:
        raise ConfigError(
            f"output_dir {out} already holds a run ({', '.join(existing)}); pass --resume auto "
            f"to continue it, --overwrite to replace it, or choose another output_dir"
        )
    if overwrite:
        for d in existing:
            shutil.rmtree(out / d)


def _check_labelled(ds: Any, split: str, used: bool) -> None:
    """A scene split without one labelled point (label files missing, every class outside the class list)
    would train on nothing and score NaN: a DatasetError naming the split and what to look for."""
    if not used or not callable(getattr(ds, "label_counts", None)) or len(ds) == 0:
        return
    if int(ds.label_counts().sum()) == 0:
        raise DatasetError(
            f"the {split} split ({type(ds).__name__}, {getattr(ds, 'scene_count', lambda: len(ds))()} scenes) has no "
            f"labelled point: are its label files there (SemanticKITTI labels/*.label, Pointcept segment.npy), and "
            f"are its classes in the class list (data.classes)?"
        )


def build_data(cfg: Dict[str, Any]) -> Tuple[Any, Any, Optional[EpochAugment], Dict[str, Any]]:
    """``(train set, val set, train augmentations, dataset info)``; the info includes :func:`~.data.inference_info`."""
    specs = parse_augmentations(cfg["data"].get("augmentations"))
    # scenes stay in metres; the unit-box tasks fit an augmented cloud back into [-1, 1]^3
    augment = EpochAugment(specs, cfg["seed"], fit=get_task(cfg["task"]).normalized) if specs else None
    train_set = build_dataset(cfg, "train", augment)
    val_set = build_dataset(cfg, "val")
    for split, ds in (("train", train_set), ("val", val_set)):
        _check_labelled(ds, split, cfg["trainer"]["limit_val_batches"] != 0 or split == "train")
    info = dataset_info(train_set, cfg["task"])
    info.update(inference_info(cfg))
    weights = train_class_weights(train_set, cfg["optim"].get("class_weights", "none"))
    if weights is not None:
        info["class_weights"] = weights
    return train_set, val_set, augment, info


def build_module(
    cfg: Dict[str, Any], info: Dict[str, Any], num_train: int, world: int
) -> Tuple[PointCloudTask, RunRecord]:
    """The task module, its LR schedule sized for ``num_train`` samples over ``world`` processes, and
    the run's record. The model kwargs filled from the data are written back into ``cfg["model"]``."""
    tr, data = cfg["trainer"], cfg["data"]
    model_name, model_kwargs = fill_model_kwargs(cfg, info)
    cfg["model"] = {"name": model_name, **model_kwargs}
    spe = steps_per_epoch(
        num_train,
        int(data["batch_size"]),
        world,
        bool(data.get("drop_last")),
        tr["limit_train_batches"],
        int(tr["accumulate_grad_batches"]),
    )
    module = PointCloudTask(
        model_name=model_name,
        model_kwargs=plain(model_kwargs),
        task=cfg["task"],
        optim=plain(cfg["optim"]),
        info=plain(info),
        config=plain(cfg),
        seed=cfg["seed"],
        steps_per_epoch=spe,
        gridify_version=__version__,
    )
    model = module.model
    num_params = (
        model.num_parameters() if hasattr(model, "num_parameters") else sum(p.numel() for p in model.parameters())
    )
    return module, RunRecord(cfg, info, model_name, model_kwargs, int(num_params))


def _run_info(
    record: RunRecord, num_train: int, num_val: int, spe: int, ckpt_path: Optional[str], argv: Sequence[str]
) -> Dict[str, Any]:
    """The content of ``run_info.json`` at the start of a run."""
    cfg = record.cfg
    return {
        "gridify_version": __version__,
        "torch_version": torch.__version__,
        "lightning_version": pl.__version__,
        "dataset": cfg["data"]["name"],
        "source_format": record.info["source_format"],
        "num_parameters": record.num_params,
        "model": record.model_name,
        "task": cfg["task"],
        "num_train": num_train,
        "num_val": num_val,
        "steps_per_epoch": spe,
        "resumed_from": ckpt_path,
        "command": [sys.executable, sys.argv[0], *argv],
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def is_spawn_strategy(strategy: Any) -> bool:
    """Whether ``strategy`` is ``ddp_spawn`` (or one of its ``ddp_spawn_*`` variants)."""
    return isinstance(strategy, str) and strategy.startswith("ddp_spawn")


#: ``trainer.precision`` values that autocast to bf16 (the weights stay float32)
BF16_MIXED = ("bf16-mixed", "bf16")


def cpu_precision(tr: Dict[str, Any]) -> Any:
    """``trainer.precision`` as the run uses it: bf16 autocast on a CPU without native bf16 arithmetic (no
    ``avx512_bf16`` / ``amx_bf16``: oneDNN emulates it, slower than fp32) falls back to ``32-true`` with a
    warning, as :func:`gridify.precision.resolve_precision` does for inference. Anything else as given."""
    from gridify.precision import cpu_has_native_bf16  # noqa: PLC0415

    precision, accelerator = tr["precision"], str(tr["accelerator"]).lower()
    on_cpu = accelerator == "cpu" or (
        accelerator == "auto" and not torch.cuda.is_available() and not torch.backends.mps.is_available()
    )
    if str(precision) not in BF16_MIXED or not on_cpu or cpu_has_native_bf16():
        return precision
    warnings.warn(
        f"trainer.precision={precision}: this CPU has no native bf16 arithmetic (no avx512_bf16 / amx_bf16 "
        f"flag), where bf16 autocast runs emulated and slower than fp32; training in fp32 (32-true) instead",
        UserWarning,
        stacklevel=2,
    )
    return "32-true"


def build_trainer(
    tr: Dict[str, Any],
    out: Path,
    callbacks: List[pl.Callback],
    rank0: bool,
    voice: Optional[RunVoice] = None,
    note: str = "",
) -> pl.Trainer:
    """The Lightning trainer of the ``trainer`` section ``tr`` (atomic checkpoints, CSV + TensorBoard logs,
    the console's callbacks speaking through ``voice``: :func:`~.progress.progress_callbacks`, ``note``: what
    makes the first epoch slower).

    ``ddp_spawn*`` strategies become ``ddp*``: the processes are already started (:func:`spawn_run`).
    Validation and test limits other than 0 are subsets chosen by the data module, not passed on.
    A value Lightning refuses (an accelerator this machine lacks, ...) is a ``ConfigError`` naming it.
    """
    limits = {
        k: tr[k]
        for k in ("limit_train_batches", "limit_val_batches", "limit_test_batches")
        if tr[k] is not None and (k == "limit_train_batches" or tr[k] == 0)
    }
    strategy = tr["strategy"].replace("ddp_spawn", "ddp", 1) if is_spawn_strategy(tr["strategy"]) else tr["strategy"]
    try:
        return pl.Trainer(
            accelerator=tr["accelerator"],
            devices=tr["devices"],
            num_nodes=int(tr["num_nodes"]),
            strategy=strategy,
            precision=cpu_precision(tr),
            max_epochs=int(tr["max_epochs"]),
            max_steps=int(tr["max_steps"]),
            log_every_n_steps=int(tr["log_every_n_steps"]),
            check_val_every_n_epoch=int(tr["check_val_every_n_epoch"]),
            num_sanity_val_steps=int(tr["num_sanity_val_steps"]),
            gradient_clip_val=tr["gradient_clip_val"],
            accumulate_grad_batches=int(tr["accumulate_grad_batches"]),
            deterministic=tr["deterministic"],
            enable_progress_bar=bool(tr["progress_bar"]),
            enable_model_summary=rank0 and bool(tr["progress_bar"]) and interactive(),
            callbacks=callbacks + progress_callbacks(tr, voice if voice is not None else RunVoice(enabled=rank0), note),
            logger=make_loggers(out),
            use_distributed_sampler=False,
            default_root_dir=str(out),
            plugins=[atomic_checkpoint_io()],
            **limits,
        )
    except (MisconfigurationException, ValueError, TypeError, ImportError) as exc:  # no GPU, no deepspeed, ...
        raise trainer_error(tr, exc) from None


class TrainingInterrupted(SystemExit):
    """Ctrl-C during ``trainer.fit``: the message says what was written and how to continue."""


def fit(
    trainer: pl.Trainer,
    module: PointCloudTask,
    datamodule: PointCloudData,
    ckpt_path: Optional[str],
    record: Optional[RunRecord] = None,
) -> float:
    """Train (from ``ckpt_path`` when resuming); returns the wall-clock seconds.

    Ctrl-C (Lightning stops gracefully, then exits): rank 0 saves the state reached as
    ``checkpoints/last.ckpt`` (mid-epoch: a resumed run skips the batches already seen), the current
    weights as ``checkpoints/model.pt`` (usable with ``gridify predict``) and the plots of the steps taken,
    then ends with :class:`TrainingInterrupted`, whose message names them and the ``--resume auto`` to
    continue. A run that fails after some steps writes its plots before the error goes on."""
    t0 = time.time()
    handler = signal.getsignal(signal.SIGINT)
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    except SystemExit:
        if trainer.state.status != TrainerStatus.INTERRUPTED or record is None:
            raise
        raise TrainingInterrupted(_save_interrupted(trainer, module, record, time.time() - t0)) from None
    except Exception:
        if record is not None and trainer.is_global_zero and trainer.global_step > 0:
            _plot_so_far(trainer, record)
        raise
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores Ctrl-C while it shuts down; give it back
    return time.time() - t0


def _plot_so_far(trainer: pl.Trainer, record: RunRecord) -> Optional[Path]:
    """The plots of a run that stopped before its end (the steps recorded so far written first)."""
    for callback in trainer.callbacks:
        if isinstance(callback, StepCurves):
            callback.flush()
    return write_plots(record)


def _save_interrupted(trainer: pl.Trainer, module: PointCloudTask, record: RunRecord, seconds: float) -> str:
    """Write what an interrupted run can (rank 0): ``last.ckpt`` of the state reached, ``model.pt`` of the
    current weights and the plots; returns the one-line message."""
    out = record.out
    epoch, step = shown_epoch(trainer.current_epoch), trainer.global_step
    written = []
    if trainer.is_global_zero and step > 0:
        last = out / "checkpoints" / "last.ckpt"
        try:
            trainer.save_checkpoint(last, weights_only=False)  # the whole state: a resume continues it
            written.append(str(last))
        except Exception as exc:  # noqa: BLE001 - the epoch's own last.ckpt is still there
            warnings.warn(f"could not save the interrupted state ({type(exc).__name__}: {exc})")
        export_model(
            out / "checkpoints" / "model.pt",
            module.eval_model,
            {
                "model_name": record.model_name,
                "model_kwargs": record.model_kwargs,
                "class_names": record.info["class_names"],
                "gridify_version": __version__,
                "task": record.cfg["task"],
                "info": record.info,
                "config": record.cfg,
                "source_format": record.info["source_format"],
                "num_parameters": record.num_params,
                "checkpoint": f"interrupted at epoch {epoch}, step {step} (current weights, not tested)",
            },
        )
        written.append(str(out / "checkpoints" / "model.pt"))
        plots = _plot_so_far(trainer, record)
        written += [f"the plots in {plots}"] if plots is not None else []
    listed = f"{', '.join(written[:-1])} and {written[-1]}" if len(written) > 1 else "".join(written)
    saved = f"wrote {listed}; " if listed else ""
    return (
        f"interrupted at epoch {epoch}, step {step} after {seconds:.0f} s; {saved}continue with the same "
        f"command and --resume auto (or --resume {out / 'checkpoints' / 'last.ckpt'})"
    )


def test_checkpoint(tr: Dict[str, Any], best: Optional[Any], ckpt_dir: Path) -> Optional[str]:
    """The checkpoint to test: the best one (``trainer.test_ckpt: best``, when there is one), else
    ``last.ckpt``, else None (the final weights)."""
    if tr["test_ckpt"] == "best" and best is not None and best.best_model_path:
        return best.best_model_path
    last = ckpt_dir / "last.ckpt"
    return str(last) if last.is_file() else None


def test_and_report(
    trainer: pl.Trainer,
    module: PointCloudTask,
    datamodule: PointCloudData,
    record: RunRecord,
    test_ckpt: Optional[str],
    train_seconds: float,
) -> Dict[str, Any]:
    """Test ``test_ckpt``; rank 0 writes the test outputs. Returns the report (empty on other ranks).

    The report's ``epoch`` is the tested checkpoint's (counted from 1); for the final weights, the last
    epoch trained."""
    trained = trainer.current_epoch  # after fit: the epochs trained, i.e. the number of the last one
    module.loaded_epoch = None
    trainer.test(module, datamodule=datamodule, ckpt_path=test_ckpt, verbose=False)
    if not trainer.is_global_zero:
        return {}
    record.run_info["epochs_trained"] = trained
    report = test_report(
        record,
        dict(module.test_results),
        checkpoint=test_ckpt,
        epoch=trained if module.loaded_epoch is None else shown_epoch(module.loaded_epoch),
        global_step=trainer.global_step,
        train_seconds=train_seconds,
        num_samples=len(datamodule.test_set) if datamodule.test_set is not None else None,
        subset=datamodule.subsets.get("test"),
    )
    tested = bool(report["metrics"])  # trainer.limit_test_batches: 0 tests nothing, by request
    nothing = tested and get_task(record.cfg["task"]).scored_nothing(report["metrics"], dict(module.test_results))
    if nothing:  # a result of 0.00 or NaN would read as the model's score: the run fails, its weights kept
        weights = export_run_model(record, module.eval_model, report["checkpoint"])
        raise DatasetError(
            f"the test {nothing} ({report['num_samples']} samples of {record.cfg['data']['name']}'s test split): "
            f"nothing was measured, no test_metrics.json written; the trained weights are in {weights}"
        )
    write_test_outputs(record, report, module.eval_model, train_seconds)
    for logger in trainer.loggers:
        if isinstance(logger, pl.loggers.TensorBoardLogger):
            write_tensorboard(logger.experiment, record, report, trainer.global_step)
    return report


def first_epoch_note(cfg: Dict[str, Any]) -> str:
    """What makes the first epoch slower than the next, from the ``data`` section (said before the first step)."""
    d = cfg["data"]
    normals = d.get("estimate_normals")
    estimating = f", estimates its normals ({normals} neighbours)" if normals else ""
    if d.get("keep_in_memory"):
        return f"the first epoch reads every sample from its file{estimating} and keeps it: slower than the next"
    return f"every sample's normals are estimated ({normals} neighbours) as it is read" if normals else ""


def _data_words(cfg: Dict[str, Any]) -> str:
    """``procedural, the train and val splits`` (``from ROOT`` when the config names a root)."""
    d = cfg["data"]
    return f"{d['name']}, the train and val splits" + (f" from {d['root']}" if d.get("root") else "")


def _build_run(
    cfg: Dict[str, Any], ckpt_path: Optional[str], argv: Sequence[str], rank0: bool, voice: RunVoice
) -> Tuple[PointCloudTask, PointCloudData, RunRecord, int]:
    """The run's data, model and data module, and its record (its files written on rank 0), saying what it
    reads; also the number of processes the schedule was sized for."""
    tr, t0 = cfg["trainer"], time.time()
    voice.doing(f"reading the data: {_data_words(cfg)}", announce=True)
    train_set, val_set, augment, info = build_data(cfg)
    voice.doing("building the model")
    world = world_size_guess(tr["devices"], tr["num_nodes"], tr["accelerator"])
    module, record = build_module(cfg, info, len(train_set), world)
    check_resume_fits(ckpt_path, module, record)
    init_path = None if ckpt_path else apply_init_weights(cfg.get("init_weights"), module, record)
    record.run_info = _run_info(
        record, len(train_set), len(val_set), int(module.hparams.steps_per_epoch), ckpt_path, argv
    )
    record.run_info["init_weights"] = init_path
    datamodule = PointCloudData(cfg, train_set, val_set, augment, graph_builder_of(module.model, cfg))
    if tr["limit_test_batches"] != 0:  # a missing or broken test split fails now, not after training
        voice.doing("reading the test split")
        datamodule.test_set = build_dataset(cfg, "test")
    if rank0:
        write_run_files(record)
        voice.say(
            f"gridify {__version__} | {cfg['data']['name']} ({info['source_format']}): "
            f"{len(train_set)} train / {len(val_set)} val (read in {time.time() - t0:.1f} s) | "
            f"{record.model_name}: {record.num_params:,} parameters | output {record.out}"
        )
    return module, datamodule, record, world


def run_process(
    cfg: Dict[str, Any], resume: Optional[str] = None, overwrite: bool = False, argv: Sequence[str] = ()
) -> Dict[str, Any]:
    """This process's part of the run (all of it, or one DDP rank); returns ``{"config", "output_dir",
    "train_seconds"}`` plus, on rank 0, the test report. Rank 0 says what it does from start to end, at
    least every half minute (:class:`~.progress.RunVoice`)."""
    tr = cfg["trainer"]
    setup_process(tr)
    out = Path(cfg["output_dir"])
    ckpt_dir = out / "checkpoints"
    rank0 = _env_rank() == 0
    with RunVoice(enabled=rank0) as voice:
        ckpt_path = resume_checkpoint(resume, ckpt_dir, rank0)
        if ckpt_path is None and rank0:
            prepare_fresh_start(out, overwrite)
        pl.seed_everything(cfg["seed"], workers=True, verbose=False)
        module, datamodule, record, world = _build_run(cfg, ckpt_path, argv, rank0, voice)

        validate = tr["limit_val_batches"] != 0 and len(datamodule.val_set) > 0
        monitor = f"val_{get_task(cfg['task']).primary_metric}" if validate else None
        steps_file = out / "csv" / STEPS_FILE if rank0 else None
        callbacks, best = checkpoint_callbacks(tr, ckpt_dir, monitor, ckpt_path is not None, steps_file)
        voice.doing("starting the trainer")
        trainer = build_trainer(tr, out, callbacks, rank0, voice, first_epoch_note(cfg))
        if trainer.world_size != world and rank0:
            warnings.warn(
                f"steps per epoch were computed for {world} processes but the trainer runs "
                f"{trainer.world_size}; the LR schedule length may be off"
            )
        train_seconds = fit(trainer, module, datamodule, ckpt_path, record if rank0 else None)
        test_ckpt = test_checkpoint(tr, best, ckpt_dir)
        voice.doing(f"testing {test_ckpt or 'the final weights'}")
        report = test_and_report(trainer, module, datamodule, record, test_ckpt, train_seconds)
    return {"config": cfg, "output_dir": str(out), "train_seconds": train_seconds, **report}


def _spawned_process(
    local_rank: int, cfg: Dict[str, Any], resume: Optional[str], argv: Sequence[str], port: str, results: Any
) -> None:
    """Process ``local_rank`` of :func:`spawn_run`: a DDP rank, found by Lightning as under its ``ddp`` launcher."""
    os.environ.update(
        MASTER_ADDR=os.environ.get("MASTER_ADDR", "127.0.0.1"), MASTER_PORT=port, LOCAL_RANK=str(local_rank)
    )
    try:
        summary: Any = run_process(cfg, resume=resume, argv=argv)
    except RUN_ERRORS as exc:  # the same on every rank: raised again, as itself, by spawn_run
        summary = exc
    if local_rank == 0:
        results.put(summary)


def spawn_run(
    cfg: Dict[str, Any], resume: Optional[str] = None, overwrite: bool = False, argv: Sequence[str] = ()
) -> Dict[str, Any]:
    """``trainer.strategy: ddp_spawn``: start one process per device with ``torch.multiprocessing``
    (spawn) and run :func:`run_process` in each, as a DDP rank; returns the summary of rank 0.

    The script is not run again (unlike ``ddp``), so this works wherever the command cannot be
    re-run, e.g. from Python or the ``gridify`` console script. Lightning's own ``ddp_spawn`` starts
    new processes for ``fit`` and again for ``test`` and brings back only the weights and logged
    scalars: the test report, the tested weights for ``model.pt``, the step counts and the log
    folders would be lost or split. Here the whole run happens in the spawned processes, exactly
    as under ``ddp``. Resuming and output-folder checks happen once, here, before any process starts.
    """
    tr = cfg["trainer"]
    out = Path(cfg["output_dir"])
    ckpt_path = resume_checkpoint(resume, out / "checkpoints", rank0=True)
    if ckpt_path is None:
        prepare_fresh_start(out, overwrite)
    port = os.environ.get("MASTER_PORT") or str(find_free_network_port())
    results = mp.get_context("spawn").SimpleQueue()
    procs = mp.start_processes(
        _spawned_process,
        args=(cfg, ckpt_path, argv, port, results),
        join=False,
        nprocs=world_size_guess(tr["devices"], 1, tr["accelerator"]),
        start_method="spawn",
    )
    summary = None
    while not procs.join(timeout=1.0):  # raises when a process fails; rank 0 may be waiting to hand its summary
        if summary is None and not results.empty():
            summary = results.get()
    summary = results.get() if summary is None else summary
    if isinstance(summary, BaseException):
        raise summary
    return summary


def run(
    cfg: Dict[str, Any], resume: Optional[str] = None, overwrite: bool = False, argv: Sequence[str] = ()
) -> Dict[str, Any]:
    """Train and test as ``cfg`` says (``resume``: a checkpoint path or ``auto``; ``overwrite``: replace
    an earlier run in the output folder); returns ``{"config", "output_dir", "train_seconds"}`` plus,
    on rank 0, the test report.

    Before anything else, the output folder is checked (:func:`gridify._paths.check_output_dir`:
    a file, a path below a file, a read-only folder, a file where the run writes a folder) and, on
    rank 0, locked for the run's lifetime (:func:`gridify._paths.folder_lock`): a second run on the
    same folder fails at once, naming the first; the lock goes with the process, so a killed run
    never blocks its resume."""
    out = check_output_dir(cfg["output_dir"], "output_dir", folders=RUN_FOLDERS, files=RUN_FILES)
    spawn = is_spawn_strategy(cfg["trainer"]["strategy"]) and "LOCAL_RANK" not in os.environ
    if _env_rank() != 0:  # the other ranks of a run whose rank 0 holds the lock
        return run_process(cfg, resume, overwrite, argv)
    created = not out.exists()
    try:
        with folder_lock(out, "output_dir", owner=" ".join(["gridify train", *argv])):
            return spawn_run(cfg, resume, overwrite, argv) if spawn else run_process(cfg, resume, overwrite, argv)
    except BaseException:
        if created and out.is_dir() and [p.name for p in out.iterdir()] == [LOCK_NAME]:
            shutil.rmtree(out, ignore_errors=True)  # a run that failed before it wrote anything leaves nothing
        raise
