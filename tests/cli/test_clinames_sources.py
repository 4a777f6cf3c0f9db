"""The command line's layout names and file extensions are read from the sources that register them (issue 74: a
new scene layout touches one new module, a new file format touches ``gridify/io`` only): a module written into
(a copy of) ``gridify/datasets/layouts/``, or a registration added to ``gridify/io/builtin.py``, is found without
importing anything, in the order the registry would hold it. ``tests/cli/test_startup.py`` holds the values read from the real folders equal to the
registries."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gridify import _clinames as N

BUILTIN_LAYOUTS = N.layout_names()
SUPPORTED, COLUMNS, SAMPLED = N.reader_extensions()


def _copy(folder: str, tmp_path: Path) -> Path:
    dest = tmp_path / Path(folder).name
    dest.mkdir(parents=True)
    for src in Path(folder).glob("*.py"):
        shutil.copy(src, dest / src.name)
    return dest


def test_a_layout_module_written_into_the_folder_is_read(tmp_path):
    layouts = _copy(N.LAYOUT_DIR, tmp_path)
    (layouts / "toy.py").write_text(
        '"""A toy layout; a docstring example is not a registration:\n\n'
        '    @LAYOUTS.register("docstring_example")\n"""\n\n'
        "from .base import LAYOUTS, SceneLayout\n\n\n"
        "@LAYOUTS.register(\n"
        '    "Toy_Layout"\n'
        ")\n"
        "class ToyLayout(SceneLayout):\n"
        "    def helper(self):\n"
        '        LAYOUTS.register("indented", ToyLayout)  # not at import: not read\n\n\n'
        'LAYOUTS.register("toy_plain", ToyLayout)\n'
    )
    assert N.layout_names(str(layouts)) == tuple(sorted(BUILTIN_LAYOUTS + ("toy_layout", "toy_plain")))
    assert N.layout_names(str(_copy(N.LAYOUT_DIR, tmp_path / "again"))) == BUILTIN_LAYOUTS


@pytest.mark.parametrize(
    "source, shown",
    [
        (
            "@LAYOUTS.register(NAME)\nclass A: ...\n",
            r"bad\.py:3: the name of LAYOUTS\.register\(\.\.\.\) must be a literal",
        ),
        ("@LAYOUTS.register()\nclass A: ...\n", r"bad\.py:3: LAYOUTS\.register needs the layout's name"),
        ('@LAYOUTS.register("a"\nclass A: ...\n', r"bad\.py:3: cannot read the statement starting here"),
    ],
)
def test_a_layout_registration_the_source_does_not_spell_out_is_refused_naming_the_line(tmp_path, source, shown):
    layouts = _copy(N.LAYOUT_DIR, tmp_path)
    (layouts / "bad.py").write_text("from .base import LAYOUTS\n\n" + source)
    with pytest.raises(ValueError, match=shown):
        N.layout_names(str(layouts))


TOY_FORMATS = """
register_reader((".foo", ".FOOZ"), "toy text", read_text, options=("columns", "num_samples"))
register_mesh_reader(
    ".bar",
    "toy mesh",
    read_off,
)


def later():
    register_reader(".never", "indented: only when later() runs", read_text)
"""


def test_a_format_registered_in_builtin_is_read_in_registration_order(tmp_path):
    builtin = tmp_path / "builtin.py"
    builtin.write_text(Path(N.BUILTIN_FORMATS).read_text() + TOY_FORMATS)
    supported, columns, sampled = N.reader_extensions(str(builtin))
    # .never: not at import time; extensions lower case, as the registry keeps them
    assert supported == SUPPORTED + (".foo", ".fooz", ".bar")
    assert columns == COLUMNS + (".foo", ".fooz")
    assert sampled == SAMPLED + (".foo", ".fooz", ".bar")


@pytest.mark.parametrize(
    "line, shown",
    [
        ('register_reader(EXTS, "x", len)', r"extensions of register_reader\(\.\.\.\) must be a literal, got 'EXTS'"),
        ('register_reader(".NPY", "again", len)', r"\.npy already has a reader \(.*builtin\.py:\d+\)"),
        ('register_reader(".foo", "x", len, options=OPTS)', r"options of register_reader\(\.\.\.\) must be a literal"),
        ("register_mesh_reader(*ARGS)", r"register_mesh_reader\(\.\.\.\) must name its arguments"),
        ('register_reader((), "x", len)', r"extensions must be a non-empty string or a tuple of them"),
    ],
)
def test_a_format_registration_the_source_does_not_spell_out_is_refused_naming_the_line(tmp_path, line, shown):
    builtin = tmp_path / "builtin.py"
    text = Path(N.BUILTIN_FORMATS).read_text()
    builtin.write_text(text + line + "\n")
    with pytest.raises(ValueError, match=rf"builtin\.py:{text.count(chr(10)) + 1}: {shown}"):
        N.reader_extensions(str(builtin))


def test_the_read_values_are_module_attributes_read_once_without_importing_the_library():
    probe = (
        "import sys, gridify._clinames as N; from gridify._clinames import LAYOUTS, SAMPLED_EXTENSIONS;"
        "assert N.LAYOUTS is LAYOUTS and N.SAMPLED_EXTENSIONS is SAMPLED_EXTENSIONS;"
        "assert {'LAYOUTS', 'COLUMN_EXTENSIONS'} <= set(dir(N));"
        "print('HEAVY', sorted(m for m in sys.modules if m.startswith(('gridify.io', 'gridify.datasets', 'torch',"
        " 'numpy'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "HEAVY []", (out.stdout[-800:], out.stderr[-800:])
    with pytest.raises(AttributeError, match="has no attribute 'LAYOUT'"):
        _ = N.LAYOUT
