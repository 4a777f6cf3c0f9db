"""The Lightning modules of a run: :class:`PointCloudTask` (model, loss, optimizer) and :class:`PointCloudData`.

:class:`PointCloudTask` wraps a gridify model built from its registry name and keyword arguments.

* Loss: the task's loss (:meth:`gridify.tasks.Task.loss`: cross-entropy of the logits in float32;
  scenes skip label -1 and weigh the classes by ``optim.class_weights``, computed once from the
  training labels and kept in ``info["class_weights"]``), plus the model's kernel L2 penalty when
  ``optim.kernel_l2 = w > 0``: ``L = CE(logits, y) + w * model.kernel_l2()``.
* Optimizer: ``AdamW(lr, weight_decay, betas)`` (:func:`build_optimizer`; torch's refusals name the key).
* Schedule (``optim.schedule: warmup_cosine``), per optimizer step ``s`` (:func:`~.schedule.warmup_cosine`), with
  ``W = round(warmup_epochs * steps_per_epoch)`` warm-up steps, ``T = max_steps`` (or
  ``steps_per_epoch * max_epochs``) steps in all and ``f = min_lr / lr``:
  ``lr(s) = lr * (s + 1) / W`` for ``s < W``, then
  ``lr(s) = lr * (f + (1 - f) * (1 + cos(pi * min(1, (s - W) / max(1, T - W)))) / 2)``,
  a linear warm-up followed by a cosine down to ``min_lr``. ``optim.schedule: one_cycle`` is torch's
  ``OneCycleLR`` over the same ``T`` steps with ``pct_start = warmup_epochs * steps_per_epoch / T``
  (:class:`~.schedule.OneCycle`: cosine from ``lr / 25`` up to ``lr``, then down to ``lr / 25e4``;
  AdamW's beta1 cycles 0.95 -> 0.85 -> 0.95).
* ``optim.ema_decay = d > 0``: an exponential moving average of the weights (``gridify.training.ema``) updated after
  every optimizer step validates and tests in the model's place and is the run's model (``model.pt``;
  the ``ema.*`` entries of a checkpoint); the live weights go on training (``model.*``).
* ``trainer.recalibrate_bn``: before each validation and the test, the BatchNorm running statistics
  are re-estimated on the training split with the current weights (:func:`gridify.nn.recalibrate_batchnorm`,
  no gradient, dropout seeded from (seed, global step)), so eval mode and the saved checkpoints use
  statistics of the weights they hold.
* Dropout is reseeded before every step from (seed, global step, rank), so a resumed run draws
  the same masks as an uninterrupted one.
* Logs: ``train_loss`` (per step; every step's also in :attr:`PointCloudTask.step_loss`, which
  :class:`~.callbacks.StepCurves` records for the plots), ``train_loss_epoch``, ``lr_epoch`` (the rate at the end of
  each epoch, so the LR curve exists even when an epoch is shorter than ``log_every_n_steps``),
  ``val_*`` and ``test_*`` (the task's metrics, :mod:`gridify.tasks`); the test results name the IoU
  of each category (scenes: of each class). A scene task validates and tests on whole scenes
  (:meth:`gridify.tasks.SceneSegmentationTask.eval_logits`: every original point is scored).

:class:`PointCloudData` builds the loaders itself (the trainer runs with
``use_distributed_sampler=False``): each process reads its :class:`~.data.ShardSampler` share,
and the train loader is an :class:`~.data.EpochDataLoader` driven by the fit loop's progress.
``trainer.limit_{val,test}_batches`` select a seeded, class-stratified subset
(:func:`~.data.eval_subset`, recorded in :attr:`PointCloudData.subsets` and announced once).

Shapes:
    logits ``[B, classes]`` (classification) or ``[sum N_i, classes]`` (per-point tasks); y alike.

Both classes live at module level, so they pickle (multiprocessing, Lightning's spawn-based launchers).
"""

from __future__ import annotations

import copy
import functools
import time

from typing import Any, Dict, Optional, Tuple, Type

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader
from torchmetrics import MeanMetric

from gridify.checkpoint import MODEL_TASK, model_task
from gridify.nn import recalibrate_batchnorm
from gridify.tasks import get_task

from .callbacks import StopAfterEpochs
from .config_errors import optimizer_error
from .data import (
    EpochAugment,
    EpochDataLoader,
    GraphCollate,
    ShardSampler,
    build_dataset,
    eval_subset,
    make_model,
    set_train_epoch,
)
from .ema import ema_decay_at, update_ema
from .metrics import eval_settings
from .schedule import OneCycle, warmup_cosine

__all__ = ["PointCloudTask", "PointCloudData", "build_optimizer", "lightning_classes"]


def build_optimizer(params: Any, optim: Dict[str, Any]) -> torch.optim.Optimizer:
    """``AdamW(lr, weight_decay, betas)`` of the ``optim`` section; a value torch refuses is a
    :class:`~.specs.ConfigError` naming its key (``optim.betas: Invalid beta parameter ...``)."""
    try:
        return torch.optim.AdamW(
            params,
            lr=float(optim["lr"]),
            weight_decay=float(optim["weight_decay"]),
            betas=tuple(float(b) for b in optim.get("betas", (0.9, 0.999))),
        )
    except (TypeError, ValueError) as exc:
        raise optimizer_error(exc) from None


class PointCloudTask(pl.LightningModule):
    """Wraps a gridify model: the task's loss and metrics (:mod:`gridify.tasks`), AdamW + warm-up/cosine."""

    def __init__(
        self,
        model_name: str,
        model_kwargs: Dict[str, Any],
        task: str,
        optim: Dict[str, Any],
        info: Dict[str, Any],
        config: Dict[str, Any],
        seed: int = 0,
        steps_per_epoch: int = 1,
        gridify_version: str = "",
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.task = task
        self.task_def = get_task(task)
        self.model = make_model(model_name, model_kwargs)
        # the task the network serves, recorded in every checkpoint for its readers (gridify.checkpoint.check_task)
        self.hparams[MODEL_TASK] = model_task(self.model)
        self.ema_decay = float(optim.get("ema_decay", 0.0))
        # the averaged weights (a submodule: checkpointed under ema.*, moved with the module); None when off
        self.ema = copy.deepcopy(self.model).requires_grad_(False) if self.ema_decay > 0 else None
        self._ema_step = 0  # the optimizer step the average last took in
        self._ema_restored = False  # set when a checkpoint brought the average
        self.train_loss = MeanMetric()
        self.val_metrics = self.task_def.make_metrics(info)
        self.test_metrics = self.task_def.make_metrics(info, confusion=self.task_def.test_confusion)
        weights = info.get("class_weights")
        self.register_buffer(
            "class_weights", None if weights is None else torch.tensor(weights, dtype=torch.float32), persistent=False
        )
        self.test_results: Dict[str, Any] = {}
        #: the last step's cross-entropy (a detached tensor), read by :class:`~.callbacks.StepCurves`
        self.step_loss: Optional[torch.Tensor] = None
        #: Lightning's (0-based) ``epoch`` of the checkpoint loaded last (the tested one, after ``trainer.test``)
        self.loaded_epoch: Optional[int] = None

    @property
    def eval_model(self) -> torch.nn.Module:
        """The model that validates, tests and is saved as the run's model: the weights' moving
        average when ``optim.ema_decay > 0``, else the trained model itself."""
        return self.model if self.ema is None else self.ema

    def forward(self, batch: Dict[str, Any]) -> torch.Tensor:
        return self.task_def.forward_batch(self.model, batch)

    def _eval_logits(self, batch: Dict[str, Any], votes: int = 1) -> torch.Tensor:
        """The evaluation logits: the task's views (whole scenes for a scene task)."""
        return self.task_def.eval_logits(
            self.eval_model, batch, votes=votes, seed=int(self.hparams.seed), **eval_settings(self.hparams.info)
        )

    def on_fit_start(self) -> None:
        # a fresh run's average starts at the weights training starts from (init_weights included)
        if self.ema is not None and not self._ema_restored:
            self.ema.load_state_dict(self.model.state_dict())

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = int(self.global_step)  # optimizer steps taken; unchanged on an accumulation batch
        if self.ema is not None and step != self._ema_step:
            self._ema_step = step
            update_ema(self.ema, self.model, ema_decay_at(self.ema_decay, step))

    def on_load_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        """A checkpoint of a run without the average resumed with ``optim.ema_decay > 0`` starts the
        average at its weights; one with an average resumed without keeps the live weights only."""
        self.loaded_epoch = None if checkpoint.get("epoch") is None else int(checkpoint["epoch"])
        state = checkpoint.get("state_dict", {})
        has = any(k.startswith("ema.") for k in state)
        if self.ema is not None and not has:
            state.update({"ema." + k[len("model.") :]: v for k, v in list(state.items()) if k.startswith("model.")})
        elif self.ema is None and has:
            for k in [k for k in state if k.startswith("ema.")]:
                del state[k]
        self._ema_restored = self.ema is not None

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # dropout randomness as a function of (seed, step, rank): identical after a resume
        s = np.random.SeedSequence([self.hparams.seed, self.global_step, self.global_rank]).generate_state(2)
        torch.manual_seed(int(s[0]) << 31 ^ int(s[1]))

    def training_step(self, batch: Dict[str, Any], batch_idx: int) -> torch.Tensor:
        logits = self(batch)
        smoothing = float(self.hparams.optim.get("label_smoothing", 0.0))
        extra = {}
        lovasz = float(self.hparams.optim.get("lovasz_weight", 0.0))
        if lovasz > 0:  # refused for tasks without it when the config is checked
            extra["lovasz"] = lovasz
        ce = self.task_def.loss(logits, batch["y"], label_smoothing=smoothing, weight=self.class_weights, **extra)
        loss = ce
        weight = float(self.hparams.optim.get("kernel_l2", 0.0))
        if weight > 0:
            reg = self.model.kernel_l2()
            loss = loss + weight * reg
            self.log("train_kernel_l2", reg.detach(), on_step=True, on_epoch=False)
        n = int(batch["y"].numel())
        self.step_loss = ce.detach()
        self.log("train_loss", self.step_loss, on_step=True, on_epoch=False, prog_bar=True, batch_size=n)
        self.train_loss.update(ce.detach(), weight=n)
        self.log("train_loss_epoch", self.train_loss, on_step=False, on_epoch=True)
        return loss

    def on_train_epoch_end(self) -> None:
        self.log("lr_epoch", float(self.trainer.optimizers[0].param_groups[0]["lr"]), on_step=False, on_epoch=True)

    def validation_step(self, batch: Dict[str, Any], batch_idx: int) -> None:
        t = self.task_def
        logits = self._eval_logits(batch)  # a scene task: whole scenes, every original point
        t.update_metrics(self.val_metrics, logits, batch, t.loss(logits, batch["y"]))

    def on_validation_epoch_start(self) -> None:
        self._recalibrate_bn()

    def on_test_epoch_start(self) -> None:
        self._recalibrate_bn()

    def _recalibrate_bn(self) -> int:
        """``trainer.recalibrate_bn``: re-estimate the BatchNorm statistics on the training split (the
        number of batches used; 0 when off, without a training split or without BatchNorm)."""
        data = getattr(self.trainer, "datamodule", None)
        if not self.hparams.config.get("trainer", {}).get("recalibrate_bn") or data is None:
            return 0
        loader = data.recalibration_loader()
        if loader is None:
            return 0
        # dropout draws as a function of (seed, step): the same statistics after a resume
        s = np.random.SeedSequence([self.hparams.seed, self.global_step, 11]).generate_state(2)
        torch.manual_seed(int(s[0]) << 31 ^ int(s[1]))
        device = self.device
        batches = ({k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in b.items()} for b in loader)
        with torch.inference_mode(False), torch.no_grad():  # Lightning evaluates in inference mode
            return recalibrate_batchnorm(self.eval_model, batches, forward=self.task_def.forward_batch)

    def on_validation_epoch_end(self) -> None:
        values, _ = self.task_def.compute_metrics(self.val_metrics)
        primary = self.task_def.primary_metric
        for k, v in values.items():
            # already reduced over processes by torchmetrics; sync_dist only keeps Lightning quiet
            self.log(f"val_{k}", v, prog_bar=(k == primary), sync_dist=True)

    def test_step(self, batch: Dict[str, Any], batch_idx: int) -> None:
        votes = int(self.hparams.config.get("trainer", {}).get("test_votes", 1))
        t0 = time.time()
        logits = self._eval_logits(batch, votes)
        self.task_def.update_metrics(self.test_metrics, logits, batch, self.task_def.loss(logits, batch["y"]))
        if self.task_def.whole_scenes and self.trainer.is_global_zero:  # minutes of silence otherwise
            total = self.trainer.num_test_batches[0] if self.trainer.num_test_batches else "?"
            print(
                f"[test] batch {batch_idx + 1}/{total}: {int(batch['y'].numel()):,} points of whole scenes scored "
                f"in {time.time() - t0:.1f} s",
                flush=True,
            )

    def on_test_epoch_end(self) -> None:
        values, extra = self.task_def.compute_metrics(self.test_metrics, self.task_def.result_names(self.hparams.info))
        for k, v in values.items():
            self.log(f"test_{k}", v, sync_dist=True)
        self.test_results = {"metrics": values, **extra}

    def configure_optimizers(self) -> Dict[str, Any]:
        o = self.hparams.optim
        opt = build_optimizer(self.model.parameters(), o)  # not the average's copy
        spe = int(self.hparams.steps_per_epoch)
        max_steps = self.trainer.max_steps
        total = max_steps if max_steps and max_steps > 0 else spe * int(self.trainer.max_epochs)
        warmup = int(round(float(o["warmup_epochs"]) * spe))
        floor = float(o.get("min_lr", 0.0)) / float(o["lr"])
        if o.get("schedule", "warmup_cosine") == "one_cycle":  # OneCycleLR's pct_start * T, unrounded
            sched: Any = OneCycle(opt, warmup=float(o["warmup_epochs"]) * spe, total=total)
        else:
            # a partial object: LambdaLR saves no state for it, so a resumed run uses the config's schedule
            fn = functools.partial(warmup_cosine, warmup=warmup, total=total, floor=floor)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, fn)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 1}}


class PointCloudData(pl.LightningDataModule):
    """Train/val/test loaders with epoch-seeded, rank-sharded samplers (no Lightning sampler injection)."""

    def __init__(
        self,
        cfg: Dict[str, Any],
        train_set: Any,
        val_set: Any,
        augment: Optional[EpochAugment],
        graph_builder: Optional[Any] = None,
    ) -> None:
        super().__init__()
        self.cfg, self.train_set, self.val_set, self.augment = cfg, train_set, val_set, augment
        #: builds the training batches' graphs in the loader's workers (:class:`~.data.GraphCollate`)
        self.graph_builder = graph_builder
        self.test_set = None
        #: "val" / "test" -> the subset evaluated (see :func:`~.data.eval_subset`), None for the whole split
        self.subsets: Dict[str, Optional[Dict[str, Any]]] = {}

    def _subset(self, ds: Any, stage: str) -> Optional[Dict[str, Any]]:
        """The subset ``trainer.limit_<stage>_batches`` stands for, recorded and announced once (rank 0)."""
        if stage not in self.subsets:
            d, key = self.cfg["data"], f"limit_{stage}_batches"
            limit = self.cfg["trainer"][key]
            sub = eval_subset(
                ds, limit, int(d.get("eval_batch_size") or d["batch_size"]), self.trainer.world_size, self.cfg["seed"]
            )
            self.subsets[stage] = None if sub is None else dict(sub, limit=f"trainer.{key}={limit}")
            if sub is not None and self.trainer.is_global_zero:
                how = "class-stratified" if sub["stratified"] else "random"
                print(
                    f"[train] {stage}: a seeded, {how} subset of {sub['size']} of {sub['of']} samples "
                    f"(trainer.{key}={limit})",
                    flush=True,
                )
        return self.subsets[stage]

    def _loader(self, ds: Any, train: bool, stage: str = "train") -> DataLoader:
        d = self.cfg["data"]
        world, rank = self.trainer.world_size, self.trainer.global_rank
        seed = self.cfg["seed"]
        sub = None if train else self._subset(ds, stage)
        sampler = ShardSampler(
            len(ds) if sub is None else sub["size"],
            shuffle=train,
            seed=seed,
            rank=rank,
            world_size=world,
            pad=train,
            indices=None if sub is None else sub["indices"],
        )
        nw = int(d["num_workers"])
        collate = get_task(self.cfg["task"]).collate  # the task's batches (sequences: padded)
        common = dict(collate_fn=collate, num_workers=nw, pin_memory=False, persistent_workers=False)
        if train:
            if self.graph_builder is not None and nw > 0:  # graphs built ahead, overlapping the step
                common["collate_fn"] = GraphCollate(collate, self.graph_builder)
            fit_loop = self.trainer.fit_loop
            return EpochDataLoader(
                ds,
                batch_size=int(d["batch_size"]),
                sampler=sampler,
                drop_last=bool(d.get("drop_last")),
                epoch_fn=lambda: fit_loop.epoch_progress.current.processed,
                on_epoch=lambda e: set_train_epoch(ds, self.augment, seed, e),
                progress_fn=lambda: fit_loop.epoch_loop.batch_progress.current.processed,
                **common,
            )
        return DataLoader(ds, batch_size=int(d.get("eval_batch_size") or d["batch_size"]), sampler=sampler, **common)

    def recalibration_loader(self) -> Optional[DataLoader]:
        """The training split in order, in evaluation batches (``trainer.recalibrate_bn``); None without one."""
        if self.train_set is None or len(self.train_set) == 0:
            return None
        d = self.cfg["data"]
        return DataLoader(
            self.train_set,
            batch_size=int(d.get("eval_batch_size") or d["batch_size"]),
            shuffle=False,
            collate_fn=get_task(self.cfg["task"]).collate,
            num_workers=int(d["num_workers"]),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, False, "val")

    def test_dataloader(self) -> DataLoader:
        if self.test_set is None:
            self.test_set = build_dataset(self.cfg, "test")
        return self._loader(self.test_set, False, "test")


def lightning_classes() -> Tuple[Any, Type[PointCloudTask], Type[PointCloudData], Type[StopAfterEpochs]]:
    """``(lightning.pytorch, PointCloudTask, PointCloudData, StopAfterEpochs)``, for code written
    against the former single-module ``gridify.training``; import the classes directly instead."""
    return pl, PointCloudTask, PointCloudData, StopAfterEpochs
