"""The declared config keys: the defaults every config starts from and the spec of every key.

:data:`SCHEMA` mirrors :data:`DEFAULTS` (the top-level keys and the sections ``data``, ``optim``,
``trainer``): every key has a :class:`~gridify.training.specs.Spec` that says what it accepts. The
dataset arguments of ``data`` (and ``data.train/val/test``) and the model arguments of ``model`` are
free-form keyword arguments of the chosen dataset / model: their names are checked against its
constructor's signature (:mod:`gridify.training.config_errors`), their values against
:data:`DATASET_KEYS` / :data:`MODEL_KEYS`. Also here: the values of the keys with a fixed vocabulary
(:data:`TASKS`, :data:`DATASET_ALIASES`, :data:`PRECISIONS`, :data:`STRATEGIES`, :data:`ACCELERATORS`,
:data:`SCHEDULES`).

Nothing goes in (importing it registers the models and datasets ``data.name`` / ``model.name`` may
name); out come the tables, read by the config check (:mod:`gridify.training.config`), the section
checks (:mod:`gridify.training.config_errors`) and the key listing and docs
(:mod:`gridify.training.config_docs`); all of it is re-exported by :mod:`gridify.training.schema`.
A new config key is declared here. No YAML, no Lightning.
"""

from __future__ import annotations

from typing import Any, Dict, List

import gridify.baselines  # noqa: F401  (registers the baseline models)
import gridify.datasets  # noqa: F401  (registers the datasets data.name may name)
import gridify.models  # noqa: F401  (registers the models model.name may name)
from gridify._clinames import MIN_VOXEL_SIZE
from gridify.models.gridified import POOLS
from gridify.models.temporal import READOUTS, RNNS, TIME_SCALE_RANGE
from gridify.nn.cfc import CFC_ACTIVATIONS, CFC_MODES
from gridify.nn.gridification import AGGREGATIONS, MESSAGES
from gridify.datasets.dynamic import FRAME_INTERVAL_RANGE, SAMPLINGS
from gridify.datasets.scene_base import SCENE_FEATURES
from gridify.datasets.scene_layouts import LAYOUTS
from gridify.transforms import CROP_CENTRES
from gridify.registry import BACKBONES, DATASETS, KERNELS, POS_EMBEDDINGS
from gridify.tasks import CLASS_WEIGHTS, task_names

from .specs import AnyOf, Bool, Choice, Devices, Int, ListOf, Mapping, Num, PerAxis, Spec, Str

__all__ = [
    "DEFAULTS",
    "TASKS",
    "DATASET_ALIASES",
    "SCHEMA",
    "DATASET_KEYS",
    "RUN_DATA_KEYS",
    "MODEL_KEYS",
    "FORWARDED_KWARGS",
    "PRECISIONS",
    "STRATEGIES",
    "ACCELERATORS",
    "SCHEDULES",
    "dataset_names",
]

#: the defaults every config starts from; files and overrides are merged on top
DEFAULTS: Dict[str, Any] = {
    "seed": 0,
    "task": "classification",
    "output_dir": "outputs/run",
    "init_weights": None,
    "data": {
        "name": "procedural",
        "batch_size": 16,
        "eval_batch_size": None,
        "num_workers": 0,
        "drop_last": False,
        "prefetch_graph": "auto",
        "augmentations": [],
        "train": {},
        "val": {},
        "test": {},
    },
    "model": {"name": "gridified_classifier"},
    "optim": {
        "lr": 1e-3,
        "weight_decay": 0.0,
        "betas": [0.9, 0.999],
        "warmup_epochs": 0,
        "min_lr": 0.0,
        "kernel_l2": 0.0,
        "label_smoothing": 0.0,
        "lovasz_weight": 0.0,
        "ema_decay": 0.0,
        "class_weights": "none",
        "schedule": "warmup_cosine",
    },
    "trainer": {
        "max_epochs": 10,
        "max_steps": -1,
        "accelerator": "auto",
        "devices": 1,
        "num_nodes": 1,
        "strategy": "auto",
        "precision": "32-true",
        "log_every_n_steps": 10,
        "limit_train_batches": None,
        "limit_val_batches": None,
        "limit_test_batches": None,
        "check_val_every_n_epoch": 1,
        "num_sanity_val_steps": 0,
        "gradient_clip_val": None,
        "accumulate_grad_batches": 1,
        "deterministic": False,
        "progress_bar": True,
        "num_threads": None,
        "checkpoint": {"every_n_epochs": 1, "every_n_train_steps": None, "keep_all": False},
        "test_ckpt": "best",
        "test_votes": 1,
        "stop_after_epochs": None,
        "plots": True,
        "recalibrate_bn": False,
    },
}

#: the registered tasks (:mod:`gridify.tasks`) a config's ``task`` may name
TASKS = tuple(task_names())
#: ``data.name`` spellings that are not registry names: the dataset they mean
DATASET_ALIASES: Dict[str, str] = {"modelnet10": "modelnet", "modelnet40": "modelnet"}
#: ``trainer.precision`` values Lightning accepts (with the legacy spellings 32, 16, 64, "bf16")
PRECISIONS = (
    "32-true",
    "16-mixed",
    "bf16-mixed",
    "16-true",
    "bf16-true",
    "64-true",
    32,
    16,
    64,
    "32",
    "16",
    "64",
    "bf16",
)
#: ``trainer.strategy`` values (Lightning's registry names a config may use; ``auto`` picks one)
STRATEGIES = (
    "auto",
    "ddp",
    "ddp_spawn",
    "ddp_fork",
    "ddp_notebook",
    "ddp_find_unused_parameters_true",
    "ddp_find_unused_parameters_false",
    "ddp_spawn_find_unused_parameters_true",
    "ddp_spawn_find_unused_parameters_false",
    "ddp_fork_find_unused_parameters_true",
    "ddp_fork_find_unused_parameters_false",
    "fsdp",
    "fsdp_cpu_offload",
    "deepspeed",
    "deepspeed_stage_1",
    "deepspeed_stage_2",
    "deepspeed_stage_3",
)
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")
#: ``optim.schedule`` values (:mod:`gridify.training.schedule`)
SCHEDULES = ("warmup_cosine", "one_cycle")


def dataset_names() -> List[str]:
    """Every ``data.name`` a config may use: the registered datasets and :data:`DATASET_ALIASES`."""
    return sorted(set(DATASETS.names()) | set(DATASET_ALIASES))


_LIMIT = AnyOf(
    Int(min=0),
    Num(min=0.0, max=1.0),
    nullable=True,
    text="null, a number of batches (integer >= 0) or a fraction in [0, 1]",
    doc="batches per epoch (validation / test: a seeded, class-stratified subset of that many batches)",
)

#: the declared keys of the top level and of the sections data (its loader keys), optim and trainer
SCHEMA: Dict[str, Any] = {
    "seed": Int(min=0, max=2**32 - 1, text="an integer in [0, 2**32 - 1]", doc="seed of everything random"),
    "task": Choice(
        task_names,
        doc="what the model predicts (gridify/tasks.py): one label per cloud "
        "(classification), per point of a shape (segmentation), per point of a scene in metres "
        "(scene_segmentation) or per sequence of clouds observed at (irregular) times "
        "(sequence_classification)",
    ),
    "output_dir": Str(doc="the run folder (checkpoints, logs, metrics, plots)"),
    "init_weights": Str(
        nullable=True,
        doc="start from trained weights (fine-tuning): a shipped model's name or a model.pt / .ckpt file of the "
        "same model and arguments; only the weights are taken (null: random initialization)",
    ),
    "data": {
        "name": Choice(dataset_names, doc="the dataset (a registry name or modelnet10 / modelnet40)"),
        "batch_size": Int(min=1, doc="clouds per training batch (per process)"),
        "eval_batch_size": Int(min=1, nullable=True, doc="clouds per validation / test batch (null: batch_size)"),
        "num_workers": Int(min=0, doc="DataLoader worker processes"),
        "drop_last": Bool(doc="drop the last incomplete training batch"),
        "prefetch_graph": Bool(
            also=("auto",),
            doc="build a gridified model's training graphs in the DataLoader "
            "workers (num_workers > 0), overlapping the step; auto: when training on a GPU",
        ),
        "augmentations": ListOf(
            AnyOf(Str(), Mapping()),
            nullable=True,
            text="a list of augmentations (names or mappings with 'name')",
            doc="training augmentations: rotate_z, rotate, scale, flip, "
            "jitter, point_dropout, resample, drop_strength (scenes: with probability p, a crop's intensity "
            "zeroed and has_strength 0), each a name or {name: ..., arguments}",
        ),
        "archive": Str(
            nullable=True,
            doc="the archive gridify download --config fetches for this config (gridify download --list), for a "
            "folder layout it unpacks into (the ModelNet40 recipes on data.name=folder: ModelNet40, the official "
            "OFF meshes in <class>/{train,test}/); null: the dataset's own",
        ),
        "train": Mapping(nullable=True, doc="dataset arguments for the train split only"),
        "val": Mapping(nullable=True, doc="dataset arguments for the validation split only"),
        "test": Mapping(nullable=True, doc="dataset arguments for the test split only"),
    },
    "optim": {
        "lr": Num(min=0.0, min_open=True, doc="AdamW learning rate (peak of the warm-up + cosine schedule)"),
        "weight_decay": Num(min=0.0, doc="AdamW weight decay"),
        "betas": ListOf(Num(min=0.0, max=1.0, max_open=True), length=2, doc="AdamW betas"),
        "warmup_epochs": Num(min=0.0, doc="epochs of linear warm-up (fractions allowed)"),
        "min_lr": Num(min=0.0, doc="learning rate at the end of the cosine (<= lr)"),
        "kernel_l2": Num(min=0.0, doc="weight of the kernel L2 penalty"),
        "label_smoothing": Num(min=0.0, max=1.0, max_open=True, doc="label smoothing of the cross-entropy"),
        "lovasz_weight": Num(
            min=0.0,
            max=1e6,
            doc="weight of the Lovász-softmax loss added to the cross-entropy (scene_segmentation only; 0: none)",
        ),
        "ema_decay": Num(
            min=0.0,
            max=1.0,
            max_open=True,
            doc="decay d of an exponential moving average of the weights (0: none): after step s, "
            "ema <- d_s * ema + (1 - d_s) * weights with d_s = min(d, (1 + s) / (10 + s)); the average "
            "validates, tests and is the run's model.pt",
        ),
        "class_weights": Choice(
            CLASS_WEIGHTS,
            doc="class weights of the cross-entropy from the training labels' "
            "counts n_c (datasets with label_counts(): scenes): inverse 1/n_c, inverse_sqrt "
            "1/sqrt(n_c), normalized to mean 1 over the classes with points (0 for the others)",
        ),
        "schedule": Choice(
            SCHEDULES,
            doc="the learning-rate schedule per step: warmup_cosine (linear warm-up over "
            "warmup_epochs, cosine down to min_lr) or one_cycle (torch's OneCycleLR: cosine from lr/25 "
            "up to lr over warmup_epochs, then down to lr/25e4; AdamW's beta1 cycles 0.95 -> 0.85 -> "
            "0.95; min_lr unused)",
        ),
    },
    "trainer": {
        "max_epochs": Int(min=1, doc="epochs to train"),
        "max_steps": Int(min=1, also=(-1,), doc="optimizer steps to train (-1: max_epochs decides)"),
        "accelerator": Choice(ACCELERATORS, doc="Lightning accelerator"),
        "devices": Devices(doc="devices per node (Lightning's devices)"),
        "num_nodes": Int(min=1, doc="machines"),
        "strategy": Choice(STRATEGIES, doc="Lightning strategy (ddp_spawn runs the whole run in each process)"),
        "precision": Choice(PRECISIONS, doc="Lightning precision (bf16-mixed: bf16 autocast)"),
        "log_every_n_steps": Int(
            min=1,
            doc="steps between logged training losses (CSV, TensorBoard) and console lines (also every 20 s; "
            "the plots draw every step)",
        ),
        "limit_train_batches": _LIMIT,
        "limit_val_batches": _LIMIT,
        "limit_test_batches": _LIMIT,
        "check_val_every_n_epoch": Int(min=1, doc="epochs between validations"),
        "num_sanity_val_steps": Int(min=-1, doc="validation batches run before training (-1: all)"),
        "gradient_clip_val": Num(min=0.0, nullable=True, doc="gradient norm clip (null: none)"),
        "accumulate_grad_batches": Int(min=1, doc="batches per optimizer step"),
        "deterministic": Bool(also=("warn",), doc="deterministic algorithms (Lightning's deterministic)"),
        "progress_bar": Bool(doc="progress bars in a terminal (lines otherwise; false: neither)"),
        "num_threads": Int(min=1, nullable=True, doc="torch CPU threads (null: torch's default)"),
        "checkpoint": {
            "every_n_epochs": Int(min=0, nullable=True, doc="epochs between last.ckpt saves"),
            "every_n_train_steps": Int(min=0, nullable=True, doc="steps between last.ckpt saves (null: none)"),
            "keep_all": Bool(doc="also keep one checkpoint per epoch"),
        },
        "test_ckpt": Choice(("best", "last"), doc="the checkpoint tested after training"),
        "test_votes": Int(min=1, doc="test-time views averaged per cloud"),
        "stop_after_epochs": Int(min=1, nullable=True, doc="stop this process after that many epochs (resumable)"),
        "plots": Bool(doc="write plots/*.png"),
        "recalibrate_bn": Bool(
            doc="re-estimate the BatchNorm running statistics on the training data (no "
            "gradient) before each validation and the test, so eval mode uses statistics of the "
            "current weights (those of the saved checkpoints too)"
        ),
    },
}

_PROB = dict(min=0.0, max=1.0, max_open=True)
#: the declared dataset arguments (``data.<key>`` and ``data.<split>.<key>``) of the registered datasets
DATASET_KEYS: Dict[str, Spec] = {
    "root": Str(nullable=True, doc="data root (default: --data-root, $GRIDIFY_DATA, datasets/)"),
    "seed": Int(min=0, max=2**32 - 1, text="an integer in [0, 2**32 - 1]", doc="dataset seed (default: seed)"),
    "version": Choice(("10", "40", 10, 40), doc="modelnet: 10 or 40 (modelnet10 / modelnet40 set it)"),
    "source": Str(doc="which release of the dataset to read (see the dataset)"),
    "num_points": Int(min=1, nullable=True, doc="points per cloud (null: every point)"),
    "use_normals": Bool(doc="features x = xyz + normals"),
    "estimate_normals": Int(
        min=1,
        nullable=True,
        doc="estimate the normals from xyz with this many neighbours (local PCA, "
        "gridify.ops.estimate_normals) instead of reading them (null: the files' own); needs use_normals",
    ),
    "normalize": Bool(
        also=("sphere", "cube"),
        doc="centre and scale each cloud: true or sphere (the centroid at 0, into the unit sphere), cube (the bounding "
        "box centred, its longest side spanning the grid box [-1, 1]^3); false: as read",
    ),
    "val_fraction": Num(min=0.0, max=1.0, max_open=True, doc="share of each class of train held out for validation"),
    "test_fraction": Num(
        min=0.0, max=1.0, min_open=True, max_open=True, nullable=True, doc="folder: share carved out as the test split"
    ),
    "columns": ListOf(Str(), min_len=1, nullable=True, doc="folder: column names of text / npy files"),
    "num_classes": Int(min=1, nullable=True, doc="folder: number of classes / parts"),
    "mesh_samples": Int(min=1, doc="points sampled from each mesh"),
    "num_samples_per_class": Int(min=1, doc="procedural: shapes per class; dynamic_shapes: sequences per class"),
    "classes": ListOf(
        Str(),
        min_len=1,
        nullable=True,
        doc="procedural: the shape classes (null: all); "
        "dynamic_shapes: the motion classes (null: all); scenes: the class names (null: the layout's)",
    ),
    "categories": ListOf(Str(), min_len=1, nullable=True, doc="shapenet: the categories (null: all)"),
    "noise_std": Num(min=0.0, doc="procedural: Gaussian noise on the points"),
    "cache": Bool(doc="modelnet: cache sampled meshes; scenes: keep the scenes read in memory"),
    "keep_in_memory": Bool(
        doc="modelnet, folder: keep every sample in memory once read and normalized (later epochs skip the files; "
        "each DataLoader worker keeps its own)"
    ),
    "cache_dir": Str(nullable=True, doc="modelnet: cache folder"),
    "align_up_axis": Bool(doc="modelnet: rotate so z is up"),
    "download": Bool(doc="fetch the archive when missing"),
    "skip_missing": Bool(doc="skip files listed but missing"),
    "layout": Choice(lambda: sorted(LAYOUTS), doc="scene: the folder layout of the scenes"),
    "features": AnyOf(
        Choice(lambda: list(SCENE_FEATURES)),
        ListOf(Choice(lambda: list(SCENE_FEATURES))),
        nullable=True,
        text=f"null, a feature name or a list of them ({', '.join(SCENE_FEATURES)})",
        doc="scenes: the columns of x (null: the dataset's own): xyz, color, normal, strength (alias intensity), "
        "height (z above the scene's 1st percentile of z), strength_scan (intensity minus the scan's median over its "
        "p90 - p10), ground_height (z above the local ground), verticality and planarity (local PCA of the 16 "
        "nearest 0.1 m voxels), has_strength (1 where the scan has intensity, 0 where it has none: strength 0 "
        "then; with the drop_strength augmentation one model labels both); the scene-level ones are computed on "
        "the whole scan, before any crop",
    ),
    "scenes": ListOf(Str(), min_len=1, nullable=True, doc="scenes: read only these scene names (null: all)"),
    "sequences": ListOf(
        AnyOf(Str(), Int(min=0), text="a name or a number"),
        min_len=1,
        nullable=True,
        doc="semantickitti: the sequences to read instead of the split's official ones",
    ),
    "test_area": Int(min=1, max=6, doc="s3dis: the Area held out for val / test"),
    "unknown": Str(doc="s3dis: what another class becomes (ignore, error or a class name)"),
    "voxel_size": Num(
        min=MIN_VOXEL_SIZE,
        nullable=True,
        doc="scenes: grid subsampling voxel edge in metres "
        "before cropping (train; null: none); whole-scene evaluation uses it too; at least 1e-6 (a micrometre: "
        "finer voxels overflow the voxel coordinates of a scene)",
    ),
    "max_points": Int(
        min=1,
        nullable=True,
        doc="scenes: points of a training crop around a random centre (null: "
        "the whole scene); whole-scene evaluation cuts larger fragments into crops of it",
    ),
    "crop_centre": Choice(
        CROP_CENTRES,
        doc="scenes: how a training crop's centre is drawn: random (a point drawn uniformly: crops land "
        "where the points are dense) or class_balanced (a class drawn uniformly among the scene's, then one of "
        "its points)",
    ),
    "num_scenes": Int(min=1, doc="scene_procedural: scenes in the split"),
    "kind": Choice(("indoor", "outdoor"), doc="scene_procedural: rooms or LiDAR scans"),
    "beams": Int(min=1, doc="scene_procedural: beams of the outdoor sensor"),
    "max_range": Num(min=0.0, min_open=True, doc="scene_procedural: range of the outdoor sensor (metres)"),
    "num_frames": Int(min=1, doc="dynamic_shapes: frames of a regular sequence (the most of an irregular one)"),
    "sampling": Choice(
        SAMPLINGS,
        doc="dynamic_shapes: observation times: regular, irregular (jittered, frames "
        "dropped) or mixed (one of the two per sequence)",
    ),
    "frame_interval": Num(
        min=FRAME_INTERVAL_RANGE[0],
        max=FRAME_INTERVAL_RANGE[1],
        doc="dynamic_shapes: time between regular frames (1e-6 to 1e6: the times are float32, where a "
        "finer or coarser interval underflows to 0 or overflows)",
    ),
    "jitter": Num(
        min=0.0, max=0.5, max_open=True, doc="dynamic_shapes: irregular times move by up to jitter * frame_interval"
    ),
    "drop_prob": Num(**_PROB, doc="dynamic_shapes: probability that an irregular frame is dropped"),
    "min_frames": Int(min=1, doc="dynamic_shapes: frames an irregular sequence keeps at least"),
    "noise": Num(min=0.0, max=0.02, doc="dynamic_shapes: Gaussian noise on the points"),
    "resample": Bool(doc="dynamic_shapes: fresh surface points in every frame (false: one set moves with the object)"),
}
#: dataset arguments the run sets itself, with what to do instead
RUN_DATA_KEYS = {
    "split": "the run reads each split itself (set per-split arguments in data.train/val/test)",
    "task": "it follows the top-level task",
    "transform": "use data.augmentations",
}

#: the declared model arguments (``model.<key>``) of the registered models
MODEL_KEYS: Dict[str, Spec] = {
    "in_channels": Int(min=1, doc="point features (default: from the data)"),
    "num_classes": Int(min=1, doc="classes / parts (default: from the data)"),
    "num_categories": Int(min=0, doc="object categories of a segmenter (default: from the data)"),
    "resolution": PerAxis(Int(min=2), doc="grid resolution R (R^3 nodes; scene segmenter: also per axis)"),
    "extent": ListOf(
        Num(min=0.0, min_open=True),
        length=3,
        nullable=True,
        doc="scene segmenter: per-axis grid box size in metres (null: fit each cloud's box)",
    ),
    "box_trim": Num(
        min=0.0,
        max=0.5,
        max_open=True,
        doc="scene segmenter: share of a crop's points left beyond each end of every axis of its box (0: bounds)",
    ),
    "scale_input": Bool(doc="scene segmenter: every point also gets its crop's box size log(s / 10 m) (3 inputs)"),
    "k": Int(min=1, doc="neighbours per grid node / point"),
    "hidden_channels": Int(min=1, doc="width C"),
    "backbone": Choice(BACKBONES.names, doc="grid backbone"),
    "depth": Int(min=1, doc="blocks"),
    "dropout": Num(**_PROB, doc="dropout probability"),
    "kernel_size": AnyOf(
        Int(min=1, odd=True),
        Choice(("global",)),
        text="an odd positive integer or 'global'",
        doc="backbone kernel size",
    ),
    "omega0": Num(min=0.0, max=1e4, min_open=True, doc="frequency scale of the positional field / kernels"),
    "aggr": Choice(AGGREGATIONS, doc="gridification aggregation"),
    "message": Choice(MESSAGES, doc="gridification message"),
    "pos_embedding": Choice(POS_EMBEDDINGS.names, doc="positional field"),
    "pool": Choice(POOLS, doc="global pooling over the grid"),
    "backbone_kwargs": Mapping(nullable=True, doc="extra backbone arguments"),
    "bounds": ListOf(
        AnyOf(Num(), ListOf(Num(), length=3), text="a number or 3 numbers"), length=2, doc="grid box (lower, upper)"
    ),
    "outside": Choice(("error", "allow"), doc="points outside the grid box"),
    "message_channels": Int(min=1, nullable=True, doc="width of the per-edge messages"),
    "pos_hidden_channels": Int(min=1, nullable=True, doc="hidden width of the positional field"),
    "point_channels": Int(min=1, doc="segmenter: point branch width"),
    "kernel_net": Choice(KERNELS.names, doc="point CCNN: kernel network"),
    "kernel_hidden": Int(min=1, doc="point CCNN: kernel network width"),
    "kernel_layers": Int(min=1, doc="point CCNN: kernel network layers"),
    "radius": Num(min=0.0, min_open=True, doc="point CCNN: neighbourhood radius"),
    "learnable_radius": Bool(doc="point CCNN: learn the radius"),
    "mask": Bool(doc="point CCNN: Gaussian mask"),
    "mask_init": Num(min=0.0, min_open=True, doc="point CCNN: initial mask width"),
    "chunk_size": Int(min=1, nullable=True, doc="point CCNN: points per chunk"),
    "checkpoint": Bool(doc="point CCNN: activation checkpointing"),
    "ratios": ListOf(Num(min=0.0, max=1.0, min_open=True), min_len=1, doc="PointNet++: sampling ratios"),
    "radii": ListOf(Num(min=0.0, min_open=True), min_len=1, doc="PointNet++: ball radii"),
    "max_num_neighbors": Int(min=1, doc="PointNet++: neighbours per ball"),
    "rnn": Choice(RNNS, doc="temporal: recurrent cell"),
    "rnn_hidden": Int(min=1, doc="temporal: RNN state size"),
    "cfc_mode": Choice(CFC_MODES, doc="temporal: CfC mode"),
    "cfc_backbone_units": Int(min=1, doc="temporal: CfC backbone width"),
    "cfc_backbone_layers": Int(min=0, doc="temporal: CfC backbone layers"),
    "cfc_backbone_activation": Choice(lambda: sorted(CFC_ACTIVATIONS), doc="temporal: CfC backbone activation"),
    "cfc_backbone_dropout": Num(**_PROB, doc="temporal: CfC backbone dropout"),
    "time_scale": Num(
        min=TIME_SCALE_RANGE[0],
        max=TIME_SCALE_RANGE[1],
        doc="temporal: multiplies the elapsed times (1e-12 to 1e12: the scaled times are float32)",
    ),
    "first_timespan": Num(
        min=0.0, max=TIME_SCALE_RANGE[1], doc="temporal: elapsed time of the first frame (float32: at most 1e12)"
    ),
    "frame_readout": Choice(READOUTS, doc="temporal: per-frame readout"),
    "readout_channels": Int(min=1, doc="temporal: channels of the flatten readout"),
    "frame_features": Int(min=1, doc="temporal: frame embedding size"),
    "frame_delta": Bool(doc="temporal: also feed the change of the embedding"),
}
#: models that forward their other keyword arguments to another model's constructor
FORWARDED_KWARGS = {"temporal_cfc": "gridified_classifier"}
