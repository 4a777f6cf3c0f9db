"""The values the ``gridify`` command line's parser shows and checks, as plain literals or read from the sources.

The parser is built before anything heavy is imported (``gridify --help``, ``--version`` and
argument errors answer in well under a second, without PyTorch); each value here mirrors the
library's own, and ``tests/cli/test_startup.py`` holds every pair equal.

Four values are not written here but read, without importing anything, from the sources of the modules that
register them, so that a new scene layout or file format is one change in its own place:

* ``LAYOUTS`` (:func:`layout_names`): the names of the ``@LAYOUTS.register("name")`` lines of
  ``gridify/datasets/layouts/*.py``;
* ``SUPPORTED_EXTENSIONS``, ``COLUMN_EXTENSIONS``, ``SAMPLED_EXTENSIONS`` (:func:`reader_extensions`): the
  ``register_reader`` / ``register_mesh_reader`` statements of ``gridify/io/builtin.py``, where every built-in
  format is registered, in their order.

A registration is read when it starts a line (module level, not indented; a layout's possibly as a decorator
``@...``) and spells its name, extensions and ``options`` as literals; anything else there is a ValueError naming
the file and line. They are read on first use (a few milliseconds) and cached.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

#: :data:`gridify.export.EXPORT_FORMATS` and :data:`gridify.export.INSTALL_HINT`
EXPORT_FORMATS = ("onnx",)
EXPORT_HINT = "pip install 'gridify[export]'  (onnx, onnxscript, onnxruntime)"
#: :data:`gridify.vis.DEFAULT_EDGE_NODES`, :data:`~gridify.vis.DEFAULT_MAX_EDGES`, :data:`~gridify.vis.GRID_NODES`
DEFAULT_EDGE_NODES = 8
DEFAULT_MAX_EDGES = 1000
GRID_NODES = ("touched", "all")
#: :data:`gridify.vis.LAYERS` (what ``gridify show --layers`` draws)
VIS_LAYERS = ("points", "grid", "edges")
#: ``S3DIS_TEST_AREA`` (``LAYOUTS``, the names of the scene layouts, is read from their modules: :func:`layout_names`)
S3DIS_TEST_AREA = 5
#: the finest voxel edge (metres) of the scene settings (``data.voxel_size``, ``gridify evaluate --voxel-size``):
#: finer voxels overflow the integer voxel coordinates of a scene (this is the value; the schema reads it)
MIN_VOXEL_SIZE = 1e-6
#: the keys of :data:`gridify.datasets.download.ARCHIVES` and :data:`~gridify.datasets.download.ARCHIVE_ALIASES`
ARCHIVE_NAMES = (
    "ModelNet40", "ModelNet10", "modelnet40_normal_resampled", "modelnet40_ply_hdf5_2048",
    "shapenetcore_partanno_segmentation_benchmark_v0_normal", "shapenet_part_seg_hdf5_data", "shapenetcore_partanno_v0",
)  # fmt: skip
ARCHIVE_ALIASES = ("shapenet", "shapenetpart", "shapenet_part")
#: :meth:`gridify.registry.MODELS.names` and the ``data.name`` values (:data:`gridify.registry.DATASETS` and
#: :data:`gridify.training.schema.DATASET_ALIASES`), as ``gridify list`` prints them
MODEL_NAMES = (
    "gridified_classifier", "gridified_segmenter", "point_ckconv_classifier", "point_ckconv_segmenter",
    "pointnet2_classifier", "pointnet2_segmenter", "scene_segmenter", "temporal_cfc",
)  # fmt: skip
DATASET_NAMES = (
    "dynamic_shapes", "folder", "modelnet", "modelnet10", "modelnet40", "procedural", "s3dis", "scannet", "scene",
    "scene_procedural", "semantickitti", "shapenet",
)  # fmt: skip
#: ``(key, rule, default, meaning)`` of every config key (:func:`gridify.training.schema.key_rows`): what
#: ``gridify list keys`` prints without importing the schema (which imports PyTorch for the registries' names);
#: generated, held equal by ``tests/cli/test_startup.py`` (regenerate: ``python tests/cli/test_startup.py``)
# fmt: off
KEY_ROWS = (
    ('seed', 'an integer in [0, 2**32 - 1]', '0', 'seed of everything random'),
    ('task', "one of ['classification', 'segmentation', 'scene_segmentation', 'sequence_classification']", 'classification', 'what the model predicts (gridify/tasks.py): one label per cloud (classification), per point of a shape (segmentation), per point of a scene in metres (scene_segmentation) or per sequence of clouds observed at (irregular) times (sequence_classification)'),
    ('output_dir', 'a non-empty string', 'outputs/run', 'the run folder (checkpoints, logs, metrics, plots)'),
    ('init_weights', 'null or a non-empty string', 'null', "start from trained weights (fine-tuning): a shipped model's name or a model.pt / .ckpt file of the same model and arguments; only the weights are taken (null: random initialization)"),
    ('data.name', "one of ['dynamic_shapes', 'folder', 'modelnet', 'modelnet10', 'modelnet40', 'procedural', 's3dis', 'scannet', 'scene', 'scene_procedural', 'semantickitti', 'shapenet']", 'procedural', 'the dataset (a registry name or modelnet10 / modelnet40)'),
    ('data.batch_size', 'a positive integer', '16', 'clouds per training batch (per process)'),
    ('data.eval_batch_size', 'null or a positive integer', 'null', 'clouds per validation / test batch (null: batch_size)'),
    ('data.num_workers', 'a non-negative integer', '0', 'DataLoader worker processes'),
    ('data.drop_last', 'true or false', 'false', 'drop the last incomplete training batch'),
    ('data.prefetch_graph', "true or false or 'auto'", 'auto', "build a gridified model's training graphs in the DataLoader workers (num_workers > 0), overlapping the step; auto: when training on a GPU"),
    ('data.augmentations', "null or a list of augmentations (names or mappings with 'name')", '[]', "training augmentations: rotate_z, rotate, scale, flip, jitter, point_dropout, resample, drop_strength (scenes: with probability p, a crop's intensity zeroed and has_strength 0), each a name or {name: ..., arguments}"),
    ('data.archive', 'null or a non-empty string', '(from the dataset / model)', "the archive gridify download --config fetches for this config (gridify download --list), for a folder layout it unpacks into (the ModelNet40 recipes on data.name=folder: ModelNet40, the official OFF meshes in <class>/{train,test}/); null: the dataset's own"),
    ('data.train', 'null or a mapping', '{}', 'dataset arguments for the train split only'),
    ('data.val', 'null or a mapping', '{}', 'dataset arguments for the validation split only'),
    ('data.test', 'null or a mapping', '{}', 'dataset arguments for the test split only'),
    ('model.name', "one of ['gridified_classifier', 'gridified_segmenter', 'point_ckconv_classifier', 'point_ckconv_segmenter', 'pointnet2_classifier', 'pointnet2_segmenter', 'scene_segmenter', 'temporal_cfc']", 'gridified_classifier', 'the model'),
    ('optim.lr', 'a finite number > 0', '0.001', 'AdamW learning rate (peak of the warm-up + cosine schedule)'),
    ('optim.weight_decay', 'a finite number >= 0', '0.0', 'AdamW weight decay'),
    ('optim.betas', 'a list of 2 items, each a number in [0, 1)', '[0.9, 0.999]', 'AdamW betas'),
    ('optim.warmup_epochs', 'a finite number >= 0', '0', 'epochs of linear warm-up (fractions allowed)'),
    ('optim.min_lr', 'a finite number >= 0', '0.0', 'learning rate at the end of the cosine (<= lr)'),
    ('optim.kernel_l2', 'a finite number >= 0', '0.0', 'weight of the kernel L2 penalty'),
    ('optim.label_smoothing', 'a number in [0, 1)', '0.0', 'label smoothing of the cross-entropy'),
    ('optim.lovasz_weight', 'a number in [0, 1e+06]', '0.0', 'weight of the Lovász-softmax loss added to the cross-entropy (scene_segmentation only; 0: none)'),
    ('optim.ema_decay', 'a number in [0, 1)', '0.0', "decay d of an exponential moving average of the weights (0: none): after step s, ema <- d_s * ema + (1 - d_s) * weights with d_s = min(d, (1 + s) / (10 + s)); the average validates, tests and is the run's model.pt"),
    ('optim.class_weights', "one of ['none', 'inverse', 'inverse_sqrt']", 'none', "class weights of the cross-entropy from the training labels' counts n_c (datasets with label_counts(): scenes): inverse 1/n_c, inverse_sqrt 1/sqrt(n_c), normalized to mean 1 over the classes with points (0 for the others)"),
    ('optim.schedule', "one of ['warmup_cosine', 'one_cycle']", 'warmup_cosine', "the learning-rate schedule per step: warmup_cosine (linear warm-up over warmup_epochs, cosine down to min_lr) or one_cycle (torch's OneCycleLR: cosine from lr/25 up to lr over warmup_epochs, then down to lr/25e4; AdamW's beta1 cycles 0.95 -> 0.85 -> 0.95; min_lr unused)"),
    ('trainer.max_epochs', 'a positive integer', '10', 'epochs to train'),
    ('trainer.max_steps', 'a positive integer or -1', '-1', 'optimizer steps to train (-1: max_epochs decides)'),
    ('trainer.accelerator', "one of ['auto', 'cpu', 'gpu', 'cuda', 'mps', 'tpu']", 'auto', 'Lightning accelerator'),
    ('trainer.devices', "a positive count, -1 (all), 'auto', a list of device indices or a string such as '0,1'", '1', "devices per node (Lightning's devices)"),
    ('trainer.num_nodes', 'a positive integer', '1', 'machines'),
    ('trainer.strategy', "one of ['auto', 'ddp', 'ddp_spawn', 'ddp_fork', 'ddp_notebook', 'ddp_find_unused_parameters_true', 'ddp_find_unused_parameters_false', 'ddp_spawn_find_unused_parameters_true', 'ddp_spawn_find_unused_parameters_false', 'ddp_fork_find_unused_parameters_true', 'ddp_fork_find_unused_parameters_false', 'fsdp', 'fsdp_cpu_offload', 'deepspeed', 'deepspeed_stage_1', 'deepspeed_stage_2', 'deepspeed_stage_3']", 'auto', 'Lightning strategy (ddp_spawn runs the whole run in each process)'),
    ('trainer.precision', "one of ['32-true', '16-mixed', 'bf16-mixed', '16-true', 'bf16-true', '64-true', 32, 16, 64, '32', '16', '64', 'bf16']", '32-true', 'Lightning precision (bf16-mixed: bf16 autocast)'),
    ('trainer.log_every_n_steps', 'a positive integer', '10', 'steps between logged training losses (CSV, TensorBoard) and console lines (also every 20 s; the plots draw every step)'),
    ('trainer.limit_train_batches', 'null, a number of batches (integer >= 0) or a fraction in [0, 1]', 'null', 'batches per epoch (validation / test: a seeded, class-stratified subset of that many batches)'),
    ('trainer.limit_val_batches', 'null, a number of batches (integer >= 0) or a fraction in [0, 1]', 'null', 'batches per epoch (validation / test: a seeded, class-stratified subset of that many batches)'),
    ('trainer.limit_test_batches', 'null, a number of batches (integer >= 0) or a fraction in [0, 1]', 'null', 'batches per epoch (validation / test: a seeded, class-stratified subset of that many batches)'),
    ('trainer.check_val_every_n_epoch', 'a positive integer', '1', 'epochs between validations'),
    ('trainer.num_sanity_val_steps', 'an integer >= -1', '0', 'validation batches run before training (-1: all)'),
    ('trainer.gradient_clip_val', 'null or a finite number >= 0', 'null', 'gradient norm clip (null: none)'),
    ('trainer.accumulate_grad_batches', 'a positive integer', '1', 'batches per optimizer step'),
    ('trainer.deterministic', "true or false or 'warn'", 'false', "deterministic algorithms (Lightning's deterministic)"),
    ('trainer.progress_bar', 'true or false', 'true', 'progress bars in a terminal (lines otherwise; false: neither)'),
    ('trainer.num_threads', 'null or a positive integer', 'null', "torch CPU threads (null: torch's default)"),
    ('trainer.checkpoint.every_n_epochs', 'null or a non-negative integer', '1', 'epochs between last.ckpt saves'),
    ('trainer.checkpoint.every_n_train_steps', 'null or a non-negative integer', 'null', 'steps between last.ckpt saves (null: none)'),
    ('trainer.checkpoint.keep_all', 'true or false', 'false', 'also keep one checkpoint per epoch'),
    ('trainer.test_ckpt', "one of ['best', 'last']", 'best', 'the checkpoint tested after training'),
    ('trainer.test_votes', 'a positive integer', '1', 'test-time views averaged per cloud'),
    ('trainer.stop_after_epochs', 'null or a positive integer', 'null', 'stop this process after that many epochs (resumable)'),
    ('trainer.plots', 'true or false', 'true', 'write plots/*.png'),
    ('trainer.recalibrate_bn', 'true or false', 'false', 're-estimate the BatchNorm running statistics on the training data (no gradient) before each validation and the test, so eval mode uses statistics of the current weights (those of the saved checkpoints too)'),
    ('data.root', 'null or a non-empty string', '(from the dataset / model)', 'data root (default: --data-root, $GRIDIFY_DATA, datasets/) (folder, modelnet, s3dis, scannet, scene, semantickitti, shapenet)'),
    ('data.seed', 'an integer in [0, 2**32 - 1]', '(from the dataset / model)', 'dataset seed (default: seed) (dynamic_shapes, folder, modelnet, procedural, s3dis, scannet, scene, scene_procedural, semantickitti, shapenet)'),
    ('data.version', "one of ['10', '40', 10, 40]", '(from the dataset / model)', 'modelnet: 10 or 40 (modelnet10 / modelnet40 set it) (modelnet)'),
    ('data.source', 'a non-empty string', '(from the dataset / model)', 'which release of the dataset to read (see the dataset) (modelnet, shapenet)'),
    ('data.num_points', 'null or a positive integer', '(from the dataset / model)', 'points per cloud (null: every point) (dynamic_shapes, folder, modelnet, procedural, s3dis, scannet, scene, scene_procedural, semantickitti, shapenet)'),
    ('data.use_normals', 'true or false', '(from the dataset / model)', 'features x = xyz + normals (folder, modelnet, procedural, shapenet)'),
    ('data.estimate_normals', 'null or a positive integer', '(from the dataset / model)', "estimate the normals from xyz with this many neighbours (local PCA, gridify.ops.estimate_normals) instead of reading them (null: the files' own); needs use_normals (folder, modelnet)"),
    ('data.normalize', "true or false or 'sphere' or 'cube'", '(from the dataset / model)', 'centre and scale each cloud: true or sphere (the centroid at 0, into the unit sphere), cube (the bounding box centred, its longest side spanning the grid box [-1, 1]^3); false: as read (folder, modelnet, procedural, s3dis, scannet, scene, scene_procedural, semantickitti, shapenet)'),
    ('data.val_fraction', 'a number in [0, 1)', '(from the dataset / model)', 'share of each class of train held out for validation (folder, modelnet)'),
    ('data.test_fraction', 'null or a number in (0, 1)', '(from the dataset / model)', 'folder: share carved out as the test split (folder)'),
    ('data.columns', 'null or a list of 1 or more items, each a non-empty string', '(from the dataset / model)', 'folder: column names of text / npy files (folder)'),
    ('data.num_classes', 'null or a positive integer', '(from the dataset / model)', 'folder: number of classes / parts (folder)'),
    ('data.mesh_samples', 'a positive integer', '(from the dataset / model)', 'points sampled from each mesh (folder, modelnet)'),
    ('data.num_samples_per_class', 'a positive integer', '(from the dataset / model)', 'procedural: shapes per class; dynamic_shapes: sequences per class (dynamic_shapes, procedural)'),
    ('data.classes', 'null or a list of 1 or more items, each a non-empty string', '(from the dataset / model)', "procedural: the shape classes (null: all); dynamic_shapes: the motion classes (null: all); scenes: the class names (null: the layout's) (dynamic_shapes, procedural, s3dis, scene)"),
    ('data.categories', 'null or a list of 1 or more items, each a non-empty string', '(from the dataset / model)', 'shapenet: the categories (null: all) (shapenet)'),
    ('data.noise_std', 'a finite number >= 0', '(from the dataset / model)', 'procedural: Gaussian noise on the points (procedural)'),
    ('data.cache', 'true or false', '(from the dataset / model)', 'modelnet: cache sampled meshes; scenes: keep the scenes read in memory (modelnet, s3dis, scannet, scene, scene_procedural, semantickitti)'),
    ('data.keep_in_memory', 'true or false', '(from the dataset / model)', 'modelnet, folder: keep every sample in memory once read and normalized (later epochs skip the files; each DataLoader worker keeps its own) (folder, modelnet)'),
    ('data.cache_dir', 'null or a non-empty string', '(from the dataset / model)', 'modelnet: cache folder (modelnet)'),
    ('data.align_up_axis', 'true or false', '(from the dataset / model)', 'modelnet: rotate so z is up (modelnet)'),
    ('data.download', 'true or false', '(from the dataset / model)', 'fetch the archive when missing (modelnet, shapenet)'),
    ('data.skip_missing', 'true or false', '(from the dataset / model)', 'skip files listed but missing (modelnet, scannet, scene, shapenet)'),
    ('data.layout', "one of ['mmdet3d_s3dis', 'mmdet3d_scannet', 'mmdet3d_scannet_instance', 'pointcept', 's3dis', 'scannet', 'semantickitti']", '(from the dataset / model)', 'scene: the folder layout of the scenes (scene)'),
    ('data.features', 'null, a feature name or a list of them (xyz, color, normal, strength, intensity, height, strength_scan, ground_height, verticality, planarity, has_strength)', '(from the dataset / model)', "scenes: the columns of x (null: the dataset's own): xyz, color, normal, strength (alias intensity), height (z above the scene's 1st percentile of z), strength_scan (intensity minus the scan's median over its p90 - p10), ground_height (z above the local ground), verticality and planarity (local PCA of the 16 nearest 0.1 m voxels), has_strength (1 where the scan has intensity, 0 where it has none: strength 0 then; with the drop_strength augmentation one model labels both); the scene-level ones are computed on the whole scan, before any crop (s3dis, scannet, scene, scene_procedural, semantickitti)"),
    ('data.scenes', 'null or a list of 1 or more items, each a non-empty string', '(from the dataset / model)', 'scenes: read only these scene names (null: all) (s3dis, scannet, scene, semantickitti)'),
    ('data.sequences', 'null or a list of 1 or more items, each a name or a number', '(from the dataset / model)', "semantickitti: the sequences to read instead of the split's official ones (scene, semantickitti)"),
    ('data.test_area', 'an integer in [1, 6]', '(from the dataset / model)', 's3dis: the Area held out for val / test (s3dis, scene)'),
    ('data.unknown', 'a non-empty string', '(from the dataset / model)', 's3dis: what another class becomes (ignore, error or a class name) (s3dis, scene)'),
    ('data.voxel_size', 'null or a finite number >= 1e-06', '(from the dataset / model)', 'scenes: grid subsampling voxel edge in metres before cropping (train; null: none); whole-scene evaluation uses it too; at least 1e-6 (a micrometre: finer voxels overflow the voxel coordinates of a scene) (s3dis, scannet, scene, scene_procedural, semantickitti)'),
    ('data.max_points', 'null or a positive integer', '(from the dataset / model)', 'scenes: points of a training crop around a random centre (null: the whole scene); whole-scene evaluation cuts larger fragments into crops of it (s3dis, scannet, scene, scene_procedural, semantickitti)'),
    ('data.crop_centre', "one of ['random', 'class_balanced']", '(from the dataset / model)', "scenes: how a training crop's centre is drawn: random (a point drawn uniformly: crops land where the points are dense) or class_balanced (a class drawn uniformly among the scene's, then one of its points) (s3dis, scannet, scene, scene_procedural, semantickitti)"),
    ('data.num_scenes', 'a positive integer', '(from the dataset / model)', 'scene_procedural: scenes in the split (scene_procedural)'),
    ('data.kind', "one of ['indoor', 'outdoor']", '(from the dataset / model)', 'scene_procedural: rooms or LiDAR scans (scene_procedural)'),
    ('data.beams', 'a positive integer', '(from the dataset / model)', 'scene_procedural: beams of the outdoor sensor (scene_procedural)'),
    ('data.max_range', 'a finite number > 0', '(from the dataset / model)', 'scene_procedural: range of the outdoor sensor (metres) (scene_procedural)'),
    ('data.num_frames', 'a positive integer', '(from the dataset / model)', 'dynamic_shapes: frames of a regular sequence (the most of an irregular one) (dynamic_shapes)'),
    ('data.sampling', "one of ['regular', 'irregular', 'mixed']", '(from the dataset / model)', 'dynamic_shapes: observation times: regular, irregular (jittered, frames dropped) or mixed (one of the two per sequence) (dynamic_shapes)'),
    ('data.frame_interval', 'a number in [1e-06, 1e+06]', '(from the dataset / model)', 'dynamic_shapes: time between regular frames (1e-6 to 1e6: the times are float32, where a finer or coarser interval underflows to 0 or overflows) (dynamic_shapes)'),
    ('data.jitter', 'a number in [0, 0.5)', '(from the dataset / model)', 'dynamic_shapes: irregular times move by up to jitter * frame_interval (dynamic_shapes)'),
    ('data.drop_prob', 'a number in [0, 1)', '(from the dataset / model)', 'dynamic_shapes: probability that an irregular frame is dropped (dynamic_shapes)'),
    ('data.min_frames', 'a positive integer', '(from the dataset / model)', 'dynamic_shapes: frames an irregular sequence keeps at least (dynamic_shapes)'),
    ('data.noise', 'a number in [0, 0.02]', '(from the dataset / model)', 'dynamic_shapes: Gaussian noise on the points (dynamic_shapes)'),
    ('data.resample', 'true or false', '(from the dataset / model)', 'dynamic_shapes: fresh surface points in every frame (false: one set moves with the object) (dynamic_shapes)'),
    ('model.in_channels', 'a positive integer', '(from the dataset / model)', 'point features (default: from the data) (gridified_classifier, gridified_segmenter, point_ckconv_classifier, point_ckconv_segmenter, pointnet2_classifier, pointnet2_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.num_classes', 'a positive integer', '(from the dataset / model)', 'classes / parts (default: from the data) (gridified_classifier, gridified_segmenter, point_ckconv_classifier, point_ckconv_segmenter, pointnet2_classifier, pointnet2_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.num_categories', 'a non-negative integer', '(from the dataset / model)', 'object categories of a segmenter (default: from the data) (gridified_segmenter, point_ckconv_segmenter, pointnet2_segmenter)'),
    ('model.resolution', 'an integer >= 2 or a list of 3 of them', '(from the dataset / model)', 'grid resolution R (R^3 nodes; scene segmenter: also per axis) (gridified_classifier, gridified_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.extent', 'null or a list of 3 items, each a finite number > 0', '(from the dataset / model)', "scene segmenter: per-axis grid box size in metres (null: fit each cloud's box) (scene_segmenter)"),
    ('model.box_trim', 'a number in [0, 0.5)', '(from the dataset / model)', "scene segmenter: share of a crop's points left beyond each end of every axis of its box (0: bounds) (scene_segmenter)"),
    ('model.scale_input', 'true or false', '(from the dataset / model)', "scene segmenter: every point also gets its crop's box size log(s / 10 m) (3 inputs) (scene_segmenter)"),
    ('model.k', 'a positive integer', '(from the dataset / model)', 'neighbours per grid node / point (gridified_classifier, gridified_segmenter, point_ckconv_classifier, point_ckconv_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.hidden_channels', 'a positive integer', '(from the dataset / model)', 'width C (gridified_classifier, gridified_segmenter, point_ckconv_classifier, point_ckconv_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.backbone', "one of ['ccnn', 'mrconv', 'resnet', 'unet']", '(from the dataset / model)', 'grid backbone (gridified_classifier, gridified_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.depth', 'a positive integer', '(from the dataset / model)', 'blocks (gridified_classifier, gridified_segmenter, point_ckconv_classifier, point_ckconv_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.dropout', 'a number in [0, 1)', '(from the dataset / model)', 'dropout probability (gridified_classifier, gridified_segmenter, point_ckconv_classifier, point_ckconv_segmenter, pointnet2_classifier, pointnet2_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.kernel_size', "an odd positive integer or 'global'", '(from the dataset / model)', 'backbone kernel size (gridified_classifier, gridified_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.omega0', 'a number in (0, 10000]', '(from the dataset / model)', 'frequency scale of the positional field / kernels (gridified_classifier, gridified_segmenter, point_ckconv_classifier, point_ckconv_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.aggr', "one of ['mean', 'max', 'sum']", '(from the dataset / model)', 'gridification aggregation (gridified_classifier, gridified_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.message', "one of ['product', 'concat']", '(from the dataset / model)', 'gridification message (gridified_classifier, gridified_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.pos_embedding', "one of ['rff', 'siren']", '(from the dataset / model)', 'positional field (gridified_classifier, gridified_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.pool', "one of ['mean', 'max', 'meanmax']", '(from the dataset / model)', 'global pooling over the grid (gridified_classifier, temporal_cfc)'),
    ('model.backbone_kwargs', 'null or a mapping', '(from the dataset / model)', 'extra backbone arguments (gridified_classifier, gridified_segmenter, scene_segmenter, temporal_cfc)'),
    ('model.bounds', 'a list of 2 items, each a number or 3 numbers', '(from the dataset / model)', 'grid box (lower, upper) (gridified_classifier, gridified_segmenter, temporal_cfc)'),
    ('model.outside', "one of ['error', 'allow']", '(from the dataset / model)', 'points outside the grid box (gridified_classifier, gridified_segmenter, temporal_cfc)'),
    ('model.message_channels', 'null or a positive integer', '(from the dataset / model)', 'width of the per-edge messages (gridified_classifier, scene_segmenter, temporal_cfc)'),
    ('model.pos_hidden_channels', 'null or a positive integer', '(from the dataset / model)', 'hidden width of the positional field (gridified_classifier, scene_segmenter, temporal_cfc)'),
    ('model.point_channels', 'a positive integer', '(from the dataset / model)', 'segmenter: point branch width (gridified_segmenter, scene_segmenter)'),
    ('model.kernel_net', "one of ['magnet', 'rff', 'siren']", '(from the dataset / model)', 'point CCNN: kernel network (point_ckconv_classifier, point_ckconv_segmenter)'),
    ('model.kernel_hidden', 'a positive integer', '(from the dataset / model)', 'point CCNN: kernel network width (point_ckconv_classifier, point_ckconv_segmenter)'),
    ('model.kernel_layers', 'a positive integer', '(from the dataset / model)', 'point CCNN: kernel network layers (point_ckconv_classifier, point_ckconv_segmenter)'),
    ('model.radius', 'a finite number > 0', '(from the dataset / model)', 'point CCNN: neighbourhood radius (point_ckconv_classifier, point_ckconv_segmenter)'),
    ('model.learnable_radius', 'true or false', '(from the dataset / model)', 'point CCNN: learn the radius (point_ckconv_classifier, point_ckconv_segmenter)'),
    ('model.mask', 'true or false', '(from the dataset / model)', 'point CCNN: Gaussian mask (point_ckconv_classifier, point_ckconv_segmenter)'),
    ('model.mask_init', 'a finite number > 0', '(from the dataset / model)', 'point CCNN: initial mask width (point_ckconv_classifier, point_ckconv_segmenter)'),
    ('model.chunk_size', 'null or a positive integer', '(from the dataset / model)', 'point CCNN: points per chunk (point_ckconv_classifier, point_ckconv_segmenter)'),
    ('model.checkpoint', 'true or false', '(from the dataset / model)', 'point CCNN: activation checkpointing (point_ckconv_classifier, point_ckconv_segmenter)'),
    ('model.ratios', 'a list of 1 or more items, each a number in (0, 1]', '(from the dataset / model)', 'PointNet++: sampling ratios (pointnet2_classifier, pointnet2_segmenter)'),
    ('model.radii', 'a list of 1 or more items, each a finite number > 0', '(from the dataset / model)', 'PointNet++: ball radii (pointnet2_classifier, pointnet2_segmenter)'),
    ('model.max_num_neighbors', 'a positive integer', '(from the dataset / model)', 'PointNet++: neighbours per ball (pointnet2_classifier, pointnet2_segmenter)'),
    ('model.rnn', "one of ['cfc', 'gru']", '(from the dataset / model)', 'temporal: recurrent cell (temporal_cfc)'),
    ('model.rnn_hidden', 'a positive integer', '(from the dataset / model)', 'temporal: RNN state size (temporal_cfc)'),
    ('model.cfc_mode', "one of ['default', 'no_gate']", '(from the dataset / model)', 'temporal: CfC mode (temporal_cfc)'),
    ('model.cfc_backbone_units', 'a positive integer', '(from the dataset / model)', 'temporal: CfC backbone width (temporal_cfc)'),
    ('model.cfc_backbone_layers', 'a non-negative integer', '(from the dataset / model)', 'temporal: CfC backbone layers (temporal_cfc)'),
    ('model.cfc_backbone_activation', "one of ['gelu', 'lecun_tanh', 'relu', 'silu', 'tanh']", '(from the dataset / model)', 'temporal: CfC backbone activation (temporal_cfc)'),
    ('model.cfc_backbone_dropout', 'a number in [0, 1)', '(from the dataset / model)', 'temporal: CfC backbone dropout (temporal_cfc)'),
    ('model.time_scale', 'a number in [1e-12, 1e+12]', '(from the dataset / model)', 'temporal: multiplies the elapsed times (1e-12 to 1e12: the scaled times are float32) (temporal_cfc)'),
    ('model.first_timespan', 'a number in [0, 1e+12]', '(from the dataset / model)', 'temporal: elapsed time of the first frame (float32: at most 1e12) (temporal_cfc)'),
    ('model.frame_readout', "one of ['pool', 'flatten']", '(from the dataset / model)', 'temporal: per-frame readout (temporal_cfc)'),
    ('model.readout_channels', 'a positive integer', '(from the dataset / model)', 'temporal: channels of the flatten readout (temporal_cfc)'),
    ('model.frame_features', 'a positive integer', '(from the dataset / model)', 'temporal: frame embedding size (temporal_cfc)'),
    ('model.frame_delta', 'true or false', '(from the dataset / model)', 'temporal: also feed the change of the embedding (temporal_cfc)'),
)
# fmt: on


# --------------------------------------------------------------------------------------
# the values read from the sources of the modules that register them
# --------------------------------------------------------------------------------------
_PACKAGE = os.path.dirname(os.path.abspath(__file__))
#: the folder of the scene layouts' modules
LAYOUT_DIR = os.path.join(_PACKAGE, "datasets", "layouts")
#: the module that registers every built-in file format (the extension lists are read from it)
BUILTIN_FORMATS = os.path.join(_PACKAGE, "io", "builtin.py")

#: the module attributes read from the sources: :func:`layout_names`, then the three of :func:`reader_extensions`
_EXTENSION_NAMES = ("SUPPORTED_EXTENSIONS", "COLUMN_EXTENSIONS", "SAMPLED_EXTENSIONS")
_READ_NAMES = ("LAYOUTS", *_EXTENSION_NAMES)
#: a statement starting a line that registers a layout (``@LAYOUTS.register(...)``, ``LAYOUTS.register(...)``); the
#: patterns start with the newline before it (the text read starts with one), which the regex engine finds fast
_LAYOUT_LINE = r"\n@?LAYOUTS\.register\("
#: a statement starting a line that registers a format
_IO_LINE = r"\n(?:register_reader|register_mesh_reader)\("
#: the positional parameters of the registering functions (gridify/io/registry.py, gridify/io/mesh.py)
_POSITIONAL = {
    "register_reader": ("extensions", "description", "reader"),
    "register_mesh_reader": ("extensions", "description", "mesh_reader"),
}
#: what ``register_mesh_reader`` declares for its formats (gridify/io/mesh.py)
_MESH_OPTIONS = ("num_samples", "seed")
_MAX_STATEMENT_LINES = 60


def __getattr__(name: str) -> tuple[str, ...]:
    """``LAYOUTS`` and the extension tuples, read from the sources on first use (:func:`layout_names`,
    :func:`reader_extensions`)."""
    if name == "LAYOUTS":
        return layout_names()
    if name in _EXTENSION_NAMES:
        return reader_extensions()[_EXTENSION_NAMES.index(name)]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_READ_NAMES))


def _read(path: str) -> str:
    """The text of the source ``path``, after a newline (so that its first line starts after one too)."""
    with open(path, encoding="utf-8") as fh:
        return "\n" + fh.read()


def _statement_at(path: str, text: str, start: int) -> tuple[object, str]:
    """``(the statement starting at offset start of text, "path:line")`` (``text`` as :func:`_read` gives it);
    after a ``@``, the decorator's expression. Lines are added until they parse (a statement may span several),
    tried first where a line ends with ``)``, then at every line."""
    import _ast  # the syntax tree's node classes, built in (``import ast`` costs milliseconds more: only messages
    # need it, _unparse); imported on first use, as reading the sources is not needed to import this module

    where = f"{path}:{text.count(chr(10), 0, start)}"
    decorator = text.startswith("@", start)
    lines = text[start + decorator :].split("\n", _MAX_STATEMENT_LINES)[:_MAX_STATEMENT_LINES]
    ends = [e for e in range(1, len(lines) + 1) if e == 1 or lines[e - 1].rstrip().endswith(")")]
    for end in [*ends, *range(1, len(lines) + 1)]:
        try:
            tree = compile("\n".join(lines[:end]), path, "eval" if decorator else "exec", _ast.PyCF_ONLY_AST)
        except SyntaxError:
            continue
        node = tree.body if decorator else tree.body[0]
        return (node.value if isinstance(node, _ast.Expr) else node), where
    raise ValueError(f"{where}: cannot read the statement starting here within {_MAX_STATEMENT_LINES} lines")


def _unparse(node: object) -> str:
    """The source of ``node`` (for a message: ``import ast`` is paid only then)."""
    import ast

    return ast.unparse(node)


def _literal(where: str, call: object, key: str, node: object) -> object:
    """The value of the argument ``node`` (``key`` of ``call``), which must be a literal: a constant or a tuple /
    list of them (a tuple)."""
    import _ast

    if isinstance(node, _ast.Constant):
        return node.value
    if isinstance(node, (_ast.Tuple, _ast.List)):
        return tuple(_literal(where, call, key, item) for item in node.elts)
    raise ValueError(
        f"{where}: {key} of {_unparse(call.func)}(...) must be a literal, got {_unparse(node)!r} (the command line "
        f"reads it from the source without importing the module)"
    )


def _strings(where: str, what: str, value: object) -> tuple[str, ...]:
    """``value``, a string or a tuple / list of strings, as a tuple of strings."""
    values = (value,) if isinstance(value, str) else value
    if not isinstance(values, (tuple, list)) or not values or not all(isinstance(v, str) and v for v in values):
        raise ValueError(f"{where}: {what} must be a non-empty string or a tuple of them, got {value!r}")
    return tuple(values)


@lru_cache(maxsize=None)
def layout_names(folder: str = LAYOUT_DIR) -> tuple[str, ...]:
    """The names of the scene layouts that the modules of ``folder`` register (the ``@LAYOUTS.register("name")``
    lines of its ``*.py`` files, lower case as the registry keeps them), sorted: the ``gridify convert --layout``
    choices, read without importing the modules (:data:`gridify.datasets.layouts.LAYOUTS` imports them).

    Raises:
        ValueError: a registration without its name as a string literal, naming the file and line.
    """
    names = set()
    for file in sorted(f for f in os.listdir(folder) if f.endswith(".py")):
        path = os.path.join(folder, file)
        text = _read(path)
        for match in re.finditer(_LAYOUT_LINE, text):  # compiled on first use (re caches it)
            call, where = _statement_at(path, text, match.start() + 1)
            name = _literal(where, call, "the name", call.args[0]) if getattr(call, "args", None) else None
            if not isinstance(name, str) or not name:
                raise ValueError(f"{where}: LAYOUTS.register needs the layout's name, a string literal, first")
            names.add(name.lower())
    return tuple(sorted(names))


def _format(where: str, call: object) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(extensions, options)`` of one ``register_reader`` / ``register_mesh_reader`` call, from its literals."""
    import _ast

    kind = call.func.id
    if any(isinstance(a, _ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise ValueError(f"{where}: {kind}(...) must name its arguments, without *args or **kwargs")
    args = dict(zip(_POSITIONAL[kind], call.args)) | {k.arg: k.value for k in call.keywords}
    if "extensions" not in args:
        raise ValueError(f"{where}: {kind}(...) without its extensions")
    exts = _strings(where, "extensions", _literal(where, call, "extensions", args["extensions"]))
    options = _MESH_OPTIONS if kind == "register_mesh_reader" else ()
    if kind == "register_reader" and "options" in args:
        value = _literal(where, call, "options", args["options"])
        options = () if value == () else _strings(where, "options", value)
    return tuple(dict.fromkeys(e.lower() for e in exts)), options


@lru_cache(maxsize=None)
def reader_extensions(path: str = BUILTIN_FORMATS) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """``(SUPPORTED_EXTENSIONS, COLUMN_EXTENSIONS, SAMPLED_EXTENSIONS)`` of the built-in formats, read from the
    ``register_reader`` / ``register_mesh_reader`` statements of ``path`` (``gridify/io/builtin.py``, where every
    built-in format is registered) without importing it: every extension in registration order
    (:func:`gridify.io.supported_extensions`), then those of the formats whose reader takes ``columns=``
    (``--columns``) and ``num_samples=`` (``--num-samples``: formats that hold or may hold a mesh), format by
    format (:func:`gridify.io.formats`).

    Raises:
        ValueError: a registration the source does not spell out (a name or expression instead of a literal) or an
            extension registered twice, naming the file and line.
    """
    text = _read(path)
    formats: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    first: dict[str, str] = {}
    for match in re.finditer(_IO_LINE, text):
        call, where = _statement_at(path, text, match.start() + 1)
        exts, options = _format(where, call)
        taken = [e for e in exts if e in first]
        if taken:
            raise ValueError(f"{where}: {', '.join(taken)} already has a reader ({first[taken[0]]})")
        first.update(dict.fromkeys(exts, where))
        formats.append((exts, options))
    supported = tuple(e for exts, _ in formats for e in exts)
    columns = tuple(e for exts, options in formats if "columns" in options for e in exts)
    sampled = tuple(e for exts, options in formats if "num_samples" in options for e in exts)
    return supported, columns, sampled
