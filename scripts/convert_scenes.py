#!/usr/bin/env python
"""Convert a raw scene dataset (S3DIS, ScanNet v2, SemanticKITTI, mmdetection3d) to the common Pointcept layout.

    python scripts/convert_scenes.py datasets/s3dis/Stanford3dDataset_v1.2_Aligned_Version --layout s3dis \\
        --out datasets/s3dis_pointcept
    python scripts/convert_scenes.py datasets/scannet --layout scannet --out datasets/scannet_pointcept \\
        --splits train val test
    python scripts/convert_scenes.py datasets/semantickitti/dataset --layout semantickitti \\
        --out datasets/semantickitti_pointcept

The output, ``<out>/<split>/<scene>/{coord,color,normal,strength,segment,instance}.npy`` plus
``<out>/classes.txt``, reads back with ``SceneDataset(out, layout="pointcept", split=...)``. A thin
wrapper of :func:`gridify.datasets.convert_to_pointcept`; an interrupted run resumes (scenes
already written are kept unless ``--overwrite``).
"""
import argparse
import sys

from gridify.datasets import DatasetError, convert_to_pointcept
from gridify.datasets.scene_layouts import LAYOUTS, S3DIS_TEST_AREA


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", help="the raw dataset's root folder")
    parser.add_argument("--layout", required=True, choices=sorted(set(LAYOUTS) - {"pointcept"}))
    parser.add_argument("--out", required=True, help="output root of the common layout")
    parser.add_argument("--splits", nargs="+", default=["all"], help="source splits: train val test all")
    parser.add_argument("--test-area", type=int, default=S3DIS_TEST_AREA, help="S3DIS: the Area held out")
    parser.add_argument("--sequences", nargs="+", default=None, help="SemanticKITTI: the sequences to convert")
    parser.add_argument("--classes", nargs="+", default=None,
                        help="S3DIS layout: class names (file-name prefixes) instead of the 13 S3DIS classes")
    parser.add_argument("--unknown", default="ignore",
                        help="S3DIS layout: what another class becomes: ignore, error or a class name")
    parser.add_argument("--overwrite", action="store_true", help="rewrite scenes already converted")
    args = parser.parse_args(argv)

    def progress(done: int, total: int, name: str) -> None:
        print(f"[{done}/{total}] {name}", flush=True)

    try:
        written = convert_to_pointcept(args.root, args.layout, args.out, args.splits, test_area=args.test_area,
                                       sequences=args.sequences, classes=args.classes, unknown=args.unknown,
                                       overwrite=args.overwrite, progress=progress)
    except (DatasetError, ValueError, OSError) as exc:
        print(f"convert_scenes: {exc}", file=sys.stderr)
        return 1
    print(f"{len(written)} scenes in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
