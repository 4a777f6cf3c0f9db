#!/usr/bin/env python
"""Convert a raw scene dataset (S3DIS, ScanNet v2, SemanticKITTI, mmdetection3d) to the common Pointcept layout.

The same as ``gridify convert`` (kept for scripts that call it by path):

    python scripts/convert_scenes.py datasets/s3dis/Stanford3dDataset_v1.2_Aligned_Version --layout s3dis \\
        --out datasets/s3dis_pointcept
    gridify convert datasets/semantickitti/dataset --layout semantickitti --out datasets/semantickitti_pointcept

The output, ``<out>/<split>/<scene>/{coord,color,normal,strength,segment,instance}.npy`` plus
``<out>/classes.txt``, reads back with ``SceneDataset(out, layout="pointcept", split=...)``.
"""

import sys

from gridify.cli import main

if __name__ == "__main__":
    sys.exit(main(["convert", *sys.argv[1:]]))
