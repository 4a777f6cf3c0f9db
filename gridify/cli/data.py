"""The data commands: ``gridify download`` (a dataset archive, resumable and verified, or by-hand instructions)
and ``gridify convert`` (raw scene folders into the common Pointcept layout)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Optional

from .. import _cliargs as types
from .._commands import check_command_route
from .._paths import check_output_dir

__all__ = ["add_download_parser", "add_convert_parser", "cmd_download", "cmd_convert"]


def add_download_parser(sub: Any) -> None:
    """The ``download`` sub-command."""
    d = sub.add_parser(
        "download",
        help="download and extract a dataset archive",
        description="Fetch a known dataset archive (resumable, verified) and extract it under --root. "
        "Names in any case (modelnet10 = ModelNet10) or a config's dataset (shapenet). "
        "Without network access it says where to put the file by hand.",
    )
    d.add_argument("name", nargs="?", help="archive name (see --list)")
    d.add_argument("--config", help="fetch what this config (a shipped name or a YAML file) needs")
    d.add_argument(
        "--root",
        type=types.output_dir,
        help="data root (default: $GRIDIFY_DATA, else the repository's datasets/ or ./datasets)",
    )
    d.add_argument("--list", action="store_true", help="list the known archives and the configs that need them")
    d.add_argument("--instructions", action="store_true", help="only print the by-hand download instructions")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.set_defaults(func=cmd_download)


def add_convert_parser(sub: Any) -> None:
    from .._clinames import LAYOUTS, S3DIS_TEST_AREA

    c = sub.add_parser(
        "convert",
        help="convert a raw scene dataset to the common (Pointcept) layout",
        description="Convert S3DIS, ScanNet v2, SemanticKITTI or mmdetection3d scene folders into "
        "<out>/<split>/<scene>/{coord,color,normal,strength,segment,instance}.npy plus "
        "<out>/classes.txt, read back with data.name: scene, layout: pointcept. The files are written "
        "to .<out>.partial beside --out and moved into --out when every scene is converted: a failed run "
        "leaves --out as it was. A rerun resumes: scenes already converted (in --out, or staged by an "
        "interrupted or failed run) are kept unless --overwrite. A run with other "
        "classes, --unknown or --layout than the scenes already in --out is refused (they would keep "
        "their old labels): --overwrite rewrites them.",
    )
    c.add_argument("root", help="the raw dataset's root folder")
    c.add_argument("--layout", required=True, choices=sorted(set(LAYOUTS) - {"pointcept"}), help="source layout")
    c.add_argument("--out", required=True, type=types.output_dir, help="output root of the common layout")
    c.add_argument(
        "--splits",
        nargs="+",
        default=["all"],
        choices=["train", "val", "test", "all"],
        help="source splits to convert (default: all)",
    )
    c.add_argument(
        "--test-area",
        type=types.int_range(1, 6, "S3DIS area"),
        default=None,
        help=f"S3DIS: the Area held out as test (default {S3DIS_TEST_AREA})",
    )
    c.add_argument(
        "--sequences",
        nargs="+",
        default=None,
        help="SemanticKITTI: the sequences to convert (default: those of --splits)",
    )
    c.add_argument(
        "--classes",
        nargs="+",
        default=None,
        help="S3DIS layout: class names (file-name prefixes) instead of the 13 S3DIS classes",
    )
    c.add_argument(
        "--unknown",
        default=None,
        help="S3DIS layout: what another class becomes: ignore (default), error or a class name",
    )
    c.add_argument("--overwrite", action="store_true", help="rewrite scenes already converted")
    c.add_argument("--quiet", action="store_true", help="no line per scene")
    c.set_defaults(func=cmd_convert)


def _archives_of_configs() -> Dict[str, List[str]]:
    """Archive key -> the shipped configs whose data it holds (empty without the training extras)."""
    try:
        from ..training.config import ConfigError, resolve_config, shipped_configs
        from ..training.data import config_archives
    except ImportError:
        return {}
    needs: Dict[str, List[str]] = {}
    for name in shipped_configs():
        try:
            keys = config_archives(resolve_config(name))
        except ConfigError:  # e.g. a folder config without its folder
            continue
        for key in keys:
            needs.setdefault(key, []).append(name)
    return needs


def _download_list() -> int:
    from ..datasets.download import ARCHIVES

    needs = _archives_of_configs()
    for key, spec in ARCHIVES.items():
        used = f" | configs: {', '.join(needs[key])}" if key in needs else ""
        print(f"{key:56s} {spec.note}{used}")
    print(
        "\nNames are case-insensitive (gridify download modelnet10); 'shapenet' is the ShapeNet-Part release the "
        "shapenet configs use."
    )
    return 0


def _download_keys(args: argparse.Namespace) -> List[str]:
    """The archives ``gridify download`` fetches: the one named, or those the ``--config`` needs."""
    from ..datasets.download import resolve_archive

    if args.config:
        from ..training.cli import error_line
        from ..training.config import ConfigError, resolve_config
        from ..training.data import config_archives

        try:
            return config_archives(resolve_config(args.config))
        except ConfigError as exc:
            raise SystemExit(f"gridify download: config error: {error_line(exc)}")
    try:
        return [resolve_archive(args.name)]
    except ValueError as exc:
        raise SystemExit(f"gridify download: error: {exc}")


def _check_archive_name(name: Optional[str]) -> None:
    """An unknown archive name as a SystemExit line before PyTorch loads (the library's
    :func:`~gridify.datasets.download.resolve_archive` rule on the parser's literals)."""
    import difflib

    from .._clinames import ARCHIVE_ALIASES, ARCHIVE_NAMES

    if name is None or str(name).lower() in {k.lower() for k in ARCHIVE_NAMES} | set(ARCHIVE_ALIASES):
        return
    close = difflib.get_close_matches(name.lower(), [*(k.lower() for k in ARCHIVE_NAMES), *ARCHIVE_ALIASES], n=1)
    hint = f"; did you mean {close[0]}?" if close else "."
    raise SystemExit(
        f"gridify download: error: unknown archive {name!r}{hint} Known: {', '.join(ARCHIVE_NAMES)} "
        f"(any case; also {', '.join(ARCHIVE_ALIASES)}; gridify download --list)"
    )


def _download_route(args: argparse.Namespace) -> Dict[str, Optional[str]]:
    """The facts of a ``download`` call for :data:`gridify._commands.OPTION_USE`: ``--list``, else what is fetched
    (one archive by name, or a config's) and how (fetched, or ``--instructions``)."""
    if args.list:
        return {"download:list": "--list"}
    facts: Dict[str, Optional[str]] = {"download:by-config": "--config"} if args.config else {"download:by-name": None}
    facts.update({"download:instructions": "--instructions"} if args.instructions else {"download:fetch": None})
    return facts


def cmd_download(args: argparse.Namespace) -> int:
    check_command_route(args, _download_route(args))  # download NAME --config X fetched X's archives, not NAME
    if not args.config:
        _check_archive_name(args.name)
    from ..datasets import ARCHIVES, DownloadError, default_root
    from ..datasets.download import download_archive, manual_instructions

    if args.list or not (args.name or args.config):
        _download_list()
        if not args.list:
            print("\ngridify download: give an archive name (above) or --config NAME")
            return 2
        return 0
    keys = _download_keys(args)
    if not keys:
        print(f"gridify download: config {args.config!r} needs no download")
        return 0
    root = Path(args.root) if args.root else default_root()
    if not args.instructions:
        check_output_dir(root, "--root")  # before anything is fetched
    for key in keys:
        spec = ARCHIVES[key]
        if args.instructions:
            print(manual_instructions(key, root))
            continue
        try:
            path = download_archive(key, root, progress=not args.no_progress)
        except DownloadError as exc:
            raise SystemExit(
                f"gridify download: error: {exc.summary}; download {spec.filename} by hand from "
                f"{spec.urls[0]}, put it at {root / spec.filename} and run again (--instructions lists "
                f"every mirror)"
            )
        except ValueError as exc:
            raise SystemExit(f"gridify download: error: {'; '.join(ln for ln in str(exc).splitlines() if ln)}")
        print(f"{key}: ready at {path}")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    import re

    # a flag the layout does not read (--classes with SemanticKITTI wrote a two-class classes.txt), before any work
    check_command_route(args, {f"layout:{args.layout}": f"--layout {args.layout}"})
    from .._clinames import S3DIS_TEST_AREA
    from ..datasets import DatasetError, convert_to_pointcept

    if not Path(args.root).is_dir():
        what = "is not a folder" if Path(args.root).exists() else "does not exist"
        raise SystemExit(f"gridify convert: error: root {args.root} {what}")
    if Path(args.out).resolve() == Path(args.root).resolve():
        raise SystemExit(
            f"gridify convert: error: --out {args.out} is the source folder; write the common layout to another folder"
        )

    def progress(done: int, total: int, name: str) -> None:
        if not args.quiet:
            print(f"[{done}/{total}] {name}", flush=True)

    try:
        written = convert_to_pointcept(
            args.root,
            args.layout,
            args.out,
            args.splits,
            test_area=S3DIS_TEST_AREA if args.test_area is None else args.test_area,
            sequences=args.sequences,
            classes=args.classes,
            unknown="ignore" if args.unknown is None else args.unknown,
            overwrite=args.overwrite,
            progress=progress,
        )
    except (DatasetError, ValueError) as exc:  # the library's keyword names in the words of this command
        text = re.sub(r"give root=('[^']*'|\S+)", r"give \1 as the root", str(exc))
        raise SystemExit(f"gridify convert: error: {text.replace('(data.sequences / sequences=)', '(--sequences)')}")
    print(f"{len(written)} scenes in {args.out} (read back with data.name: scene, layout: pointcept, root: {args.out})")
    return 0
