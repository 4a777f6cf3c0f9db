"""Sphinx configuration of gridify's documentation (``make docs``).

The site is built from the Markdown pages in ``docs/`` (MyST) and from the docstrings (autodoc +
napoleon). ``make docs`` runs Sphinx with ``-W --keep-going -n``: every warning fails the build,
and every cross-reference must resolve. No intersphinx (the build runs offline): references to
outside names (torch, numpy, typing, ...) are listed in ``nitpick_ignore_regex`` below; references
to gridify's own objects must resolve, through :func:`_resolve_gridify_reference` when a docstring
names an object by a path other than the one it is documented under (``gridify.nn.Gridification``
is documented once, under the package that exports it).
"""
from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

import gridify  # noqa: E402
from sphinx.domains.python import PythonDomain  # noqa: E402
from sphinx.util.nodes import make_refnode  # noqa: E402

project = "gridify"
author = "gridify developers"
copyright = "gridify developers, MIT licence"
release = gridify.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # pages moved from the README start below a level-1 heading now and then

# autodoc / napoleon: Google-style docstrings with a "Shapes:" section
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True, "member-order": "bysource"}
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_member_order = "bysource"
autodoc_inherit_docstrings = False
autoclass_content = "both"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_custom_sections = [("Shapes", "notes_style"), ("Inputs", "notes_style"), ("Outputs", "notes_style")]
napoleon_use_rtype = False
napoleon_use_ivar = True  # "Attributes:" as fields: the attributes themselves are documented by autodoc

html_theme = "sphinx_rtd_theme"
html_title = f"gridify {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_theme_options = {"navigation_depth": 3, "collapse_navigation": False}

nitpicky = True
# Outside names only (no intersphinx inventories offline). gridify's own names must resolve.
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|numpy|np|scipy|h5py|trimesh|open3d|o3d|torchmetrics|lightning|pytorch_lightning|"
               r"torch_geometric|onnx|onnxruntime|laspy|yaml|matplotlib|argparse|pathlib|os|io|typing|"
               r"collections|collections\.abc|dataclasses|enum|abc|contextlib|threading|logging|tarfile|"
               r"zipfile|subprocess|json|csv|types|functools|urllib|http|concurrent|multiprocessing|"
               r"warnings|random|re|shutil|tempfile|socket|hashlib|datetime|platform)(\.[A-Za-z_].*)?"),
    # torch.nn / torch.nn.functional imported as ``nn`` / ``F`` (only names torch really has)
    (r"py:.*", r"nn\.(" + "|".join(n for n in dir(torch.nn) if not n.startswith("_")) + r")(\..*)?"),
    (r"py:.*", r"F\.(" + "|".join(n for n in dir(torch.nn.functional) if not n.startswith("_")) + r")"),
    # a quoted annotation (``Union[str, "os.PathLike[str]"]``) comes out in pieces
    (r"py:class", r"'os\.PathLike.*|'"),
    # type variables of generic helpers (not objects one can document)
    (r"py:.*", r"gridify\.[\w.]*\.[A-Z]"),
    (r"py:.*", r"(Tensor|Module|Parameter|Dataset|Data|Batch|Path|PathLike|Any|Optional|Union|Callable|Iterable|"
               r"Iterator|Sequence|Mapping|MutableMapping|Generator|Literal|Tuple|List|Dict|Set|Type|NamedTuple|"
               r"TypeVar|ndarray|dtype|device|Size|Generic|Protocol|ClassVar|Hashable|Collection|ContextManager|"
               r"Self|T|K|V|Namespace|ArgumentParser|Action|Metric|LightningModule|LightningDataModule|Callback|"
               r"Trainer|Optimizer|LRScheduler|DataLoader|Sampler|ExitStack|Enum|IntEnum|Figure|Axes|"
               r"BinaryIO|TextIO|IO|Lock|Event|ModuleType|FunctionType|TracebackType|CompletedProcess|"
               r"PathType|ArrayLike|StrPath|DTypeLike|TensorLike)"),
    (r"py:.*", r"(int|float|str|bytes|bool|object|list|dict|tuple|set|frozenset|None|type|slice|range|complex|"
               r"bytearray|memoryview|callable|Exception|BaseException|ValueError|KeyError|TypeError|"
               r"RuntimeError|OSError|IOError|FileNotFoundError|NotImplementedError|IndexError|"
               r"AttributeError|ImportError|ModuleNotFoundError|StopIteration|Warning|UserWarning|"
               r"RuntimeWarning|DeprecationWarning|SystemExit|KeyboardInterrupt|PermissionError|"
               r"IsADirectoryError|NotADirectoryError|FileExistsError|EOFError|OverflowError|"
               r"MemoryError|TimeoutError|ArithmeticError|ZeroDivisionError|LookupError|"
               r"UnicodeDecodeError|UnicodeError|BlockingIOError|InterruptedError|ConnectionError|"
               r"Ellipsis|NotImplemented|ellipsis|property|staticmethod|classmethod)"),
]

# ---------------------------------------------------------------------------------------------
# Resolving gridify's own names that a docstring spells by another path than the documented one.

_DOCUMENTED: dict[int, list[str]] = {}
_KEEP_ALIVE: list = []


def _documented(domain) -> dict[int, list[str]]:
    """id(object) -> the names it is documented under, built once per build from the domain."""
    if not _DOCUMENTED:
        for name in sorted(domain.objects):
            if name.startswith("gridify"):
                obj = _lookup(name)
                if obj is not None:
                    _KEEP_ALIVE.append(obj)
                    _DOCUMENTED.setdefault(id(obj), []).append(name)
    return _DOCUMENTED


def _lookup(path: str):
    """The Python object at dotted ``path``, found as Python finds it: attributes first, then submodules.

    ``gridify.ops.knn`` is the function (the package attribute), not the module of that name.
    """
    parts = path.split(".")
    try:
        obj = importlib.import_module(parts[0])
    except Exception:  # noqa: BLE001 - not importable
        return None
    for i, attr in enumerate(parts[1:], start=1):
        if hasattr(obj, attr):
            obj = getattr(obj, attr)
            continue
        try:
            obj = importlib.import_module(".".join(parts[: i + 1]))
        except Exception:  # noqa: BLE001 - no such name
            return None
    return obj


def _candidates(target: str, modname: str | None, clsname: str | None):
    target = target.lstrip("~")
    dotted = target.startswith(".")
    target = target.lstrip(".")
    scopes = []
    if modname:
        parts = modname.split(".")
        if clsname:
            scopes.append(f"{modname}.{clsname}")
            # a class documented under its package: its docstring was written in its own module
            home = getattr(_lookup(f"{modname}.{clsname.split('.')[0]}"), "__module__", None)
            if isinstance(home, str) and home != modname:
                scopes += [f"{home}.{clsname}", home]
        scopes += [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
    scopes.append("gridify")
    seen = set()
    for scope in scopes + ([""] if not dotted else []):
        cand = f"{scope}.{target}" if scope else target
        if cand not in seen:
            seen.add(cand)
            yield cand
    if not dotted and not target.startswith("gridify"):
        yield target


def _resolve_gridify_reference(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    return _resolve_by_lookup(env.get_domain("py"), app.builder, node["refdoc"], node.get("reftarget", ""),
                              node, contnode, scoped_only=False)


def _resolve_by_lookup(domain, builder, fromdocname, target, node, contnode, scoped_only):
    """Resolve a reference to a gridify object through Python's own name lookup.

    ``:class:`gridify.nn.Gridification``` names the class where users import it; it is documented
    once (under ``gridify.nn``). A name is looked up as Python would find it from the docstring's
    module and class (then the parent packages), and the object found is linked where it is
    documented. Names that are not gridify objects stay unresolved (and fail the nitpicky build).
    """
    if not target:
        return None
    from sphinx.util.nodes import make_refnode
    for cand in _candidates(target, node.get("py:module"), node.get("py:class")):
        if not cand.startswith("gridify"):
            continue
        obj = _lookup(cand)
        if obj is None:
            continue
        names = _documented(domain).get(id(obj), [])
        last = cand.rsplit(".", 1)[-1]
        same_name = [n for n in names if n.rsplit(".", 1)[-1] == last]
        # another name for the same class or function (an alias) links too; a value (an int, a
        # string) is only "the same" when the name matches as well
        names = same_name or (names if isinstance(obj, type) or callable(obj) else [])
        for name in names:
            if name in domain.objects:
                docname, node_id, objtype = domain.objects[name][:3]
                return make_refnode(builder, fromdocname, docname, node_id, contnode, name)
        # a module named by another path
        if isinstance(obj, type(sys)) and f"{obj.__name__}" in domain.modules:
            docname, node_id = domain.modules[obj.__name__][:2]
            return make_refnode(builder, fromdocname, docname, node_id, contnode, obj.__name__)
    # a name that is not bound where the docstring lives (imported under TYPE_CHECKING, say):
    # the one gridify object documented under that name, if there is exactly one
    if scoped_only:
        return None
    bare = target.lstrip("~").lstrip(".")
    if bare and not bare.startswith("gridify"):
        hits = {}
        for name in domain.objects:
            if name.startswith("gridify.") and name.endswith("." + bare):
                hits.setdefault(id(_lookup(name)) if _lookup(name) is not None else name, name)
        if len(hits) == 1:
            name = next(iter(hits.values()))
            docname, node_id = domain.objects[name][:2]
            return make_refnode(builder, fromdocname, docname, node_id, contnode, name)
    return None


def _public_bases(app, name, obj, options, bases):
    """Show a class's public bases: a private helper base is replaced by its own bases."""
    i = 0
    while i < len(bases):
        base = bases[i]
        if getattr(base, "__name__", "").startswith("_") and getattr(base, "__module__", "").startswith("gridify"):
            bases[i:i + 1] = [b for b in base.__bases__ if b not in bases]
            continue
        i += 1


_CURRENT_MODULE = [""]


def _track_module(app, what, name, obj, options, lines):
    if what == "module":
        _CURRENT_MODULE[0] = name


def _skip_reexported(app, what, name, obj, skip, options):
    """Document an object once: under the package whose ``__all__`` exports it, not again in its file."""
    if skip or what != "module" or not (isinstance(obj, type) or callable(obj)):
        return None  # data is documented where it is assigned (autodoc cannot document imported data)
    current = _CURRENT_MODULE[0]
    parts = current.split(".")
    for i in range(2, len(parts)):  # strict ancestors below the root package
        pkg = sys.modules.get(".".join(parts[:i]))
        if pkg is not None and name in getattr(pkg, "__all__", ()) and getattr(pkg, name, None) is obj:
            return True
    return None


def _undocumented_data(modname: str) -> list[str]:
    """Public module-level variables of ``modname`` without a ``#:`` comment.

    autodoc documents module-level data only when it has a doc comment; docstrings refer to the
    others too (``:data:`MODELNET10_CLASSES```), so the API pages list them explicitly.
    """
    import ast

    from sphinx.pycode import ModuleAnalyzer

    module = importlib.import_module(modname)
    try:
        analyzer = ModuleAnalyzer.for_module(modname)
        documented = {name for (_, name) in analyzer.find_attr_docs()}
        tree = ast.parse(analyzer.code)
    except Exception:  # noqa: BLE001 - no source: nothing to add
        return []
    names = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name) and not target.id.startswith("_") and target.id not in documented \
                    and hasattr(module, target.id) and target.id not in names \
                    and not (callable(getattr(module, target.id)) and getattr(getattr(module, target.id), "__module__", None) == modname):
                names.append(target.id)
    return names


def _add_module_data(app, docname, source):
    """After each ``automodule`` of a module (not a package) on an API page, its undocumented data."""
    if not docname.startswith("api/"):
        return
    import re

    def add(match):
        modname = match.group(1)
        module = importlib.import_module(modname)
        if hasattr(module, "__path__") or ":no-index:" in match.group(0):
            return match.group(0)
        extra = "".join(f"\n.. autodata:: {modname}.{name}\n" for name in _undocumented_data(modname))
        return match.group(0) + extra

    source[0] = re.sub(r"\.\. automodule:: (\S+)\n(   :[^\n]*\n)*", add, source[0])


def _plain_type(text: str) -> bool:
    return bool(re.fullmatch(r"[\w.\[\]|]+(, ?[\w.\[\]|]+)*", text.strip()))


def _napoleon_guard(app, what, name, obj, options, lines):
    """Keep napoleon from reading prose as types (runs before napoleon).

    * The first line of a variable's doc comment (``#: Grid nodes per axis: one int ...``) would
      be split at its colon into "type: description"; prose before the colon is kept as prose.
    * An ``Attributes:`` section that is a sentence or a list of names rather than one
      ``name (type): description`` entry per line is shown as a paragraph under that heading.
    """
    if not lines:
        return
    if what in ("attribute", "data", "property"):
        type_doc = getattr(type(obj), "__doc__", None)
        if isinstance(type_doc, str) and "\n".join(lines).strip() == inspect.cleandoc(type_doc).strip():
            lines[:] = []  # a plain value (dict, tuple): not its type's docstring
            return
        before, colon, _ = lines[0].partition(":")
        if colon and not _plain_type(before) and not lines[0].startswith(":"):
            lines[0] = ": " + lines[0]
        return
    for i, line in enumerate(lines):
        if line.strip() != "Attributes:":
            continue
        indent = len(line) - len(line.lstrip())
        body_end = i + 1
        while body_end < len(lines) and (not lines[body_end].strip() or len(lines[body_end]) - len(lines[body_end].lstrip()) > indent):
            body_end += 1
        body = [b for b in lines[i + 1:body_end] if b.strip()]
        if not body:
            continue
        base = min(len(b) - len(b.lstrip()) for b in body)
        entries = [b for b in body if len(b) - len(b.lstrip()) == base]
        structured = all(re.match(r"\s*\w+( \([^)]*\))?: \S", e) for e in entries)
        if not structured:
            text = [b.strip() for b in body]
            lines[i:body_end] = [" " * indent + ".. rubric:: Attributes", ""] + [" " * indent + t for t in text] + [""]
        break


_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Keyword Args|Keyword Arguments|Other Parameters|Returns?|Yields?|Raises|"
    r"Warns|Attributes|Methods|Examples?|Notes?|Warnings?|See Also|References|Todo|Shapes|Inputs|Outputs):\s*$")
_BULLET = re.compile(r"^(\s*)([*+-]|\d+\.|#\.)\s+")


def _text_indent(line: str) -> int:
    bullet = _BULLET.match(line)
    return bullet.end() if bullet else len(line) - len(line.lstrip())


def _formula_blocks(app, what, name, obj, options, lines):
    """Show the docstrings' indented formula blocks as literal blocks (runs before napoleon).

    gridify's docstrings write formulas as an indented block after a paragraph::

        x_i^G = phi_upd( AGG_{j -> i in E} ... )

    In reStructuredText that would be a block quote, where ``|p|`` is a substitution and ``*`` starts
    emphasis; shown as it is written, it reads as intended. Bodies of napoleon sections
    (``Args:``, ``Returns:``, ...) are left to napoleon.
    """
    out: list[str] = []
    section = None   # indent of the napoleon section header we are in
    literal = None   # text indent of the paragraph that owns the literal block we are in
    last = None      # index in ``out`` of the last non-blank line
    blank = False
    for line in lines:
        if not line.strip():
            out.append(line)
            blank = True
            continue
        indent = len(line) - len(line.lstrip())
        if literal is not None and indent > literal:
            out.append(line)
            last, blank = len(out) - 1, False
            continue
        literal = None
        line = _escape_bars(line)
        if section is not None and indent <= section:
            section = None
        if _SECTION.match(line):
            section = indent
        elif section is None and last is not None and blank:
            owner = out[last]
            own = _text_indent(owner)
            stripped = owner.strip()
            if indent > own and not stripped.endswith("::") and not stripped.startswith((".. ", ">>>")) \
                    and not line.lstrip().startswith((">>>", ".. ", ":")):
                # "text:" + "::" shows "text:"; "text ::" shows "text" (reStructuredText's rules)
                out[last] = owner + (":" if stripped.endswith(":") else " ::")
                literal = own
        out.append(line)
        last, blank = len(out) - 1, False
    lines[:] = out


_ARGS_SECTIONS = {"Args", "Arguments", "Parameters", "Keyword Args", "Keyword Arguments", "Other Parameters"}
_LINE_SECTIONS = {"Shapes", "Inputs", "Outputs"}
_BARS = re.compile(r"(?<![\\`])\|(?=\S)([^|`\n]*?\S)\|")


def _escape_bars(text: str) -> str:
    parts = re.split(r"(``.*?``|`[^`]*`)", text)
    for i in range(0, len(parts), 2):
        parts[i] = _BARS.sub(lambda m: "\\|" + m.group(1) + "\\|", parts[i])
    return "".join(parts)


def _escape(text: str) -> str:
    """Escape ``|x|`` (not a substitution here) and a lone ``*`` outside inline literals."""
    parts = re.split(r"(``.*?``|`[^`]*`)", text)
    for i in range(0, len(parts), 2):
        parts[i] = _BARS.sub(lambda m: "\\|" + m.group(1) + "\\|", parts[i])
        parts[i] = re.sub(r"(?<![\\\w*])\*(?=[\s\],)])", r"\\*", parts[i])
    return "".join(parts)


def _sections(app, what, name, obj, options, lines):
    """Napoleon-friendly sections (runs before napoleon).

    * ``Args:`` entries whose names run over two lines (``a, b, c,`` / ``d: what they are``) are
      joined, so napoleon reads one entry with several names.
    * ``Shapes:`` (``Inputs:``, ``Outputs:``) entries are kept one per line (a line block), with
      ``[E, *]`` and ``|x|`` shown as written.
    """
    qualified = re.compile(r"^(\s*)(Args|Returns|Raises|Attributes) \(([^)]*)\):\s*$")
    for j, line in enumerate(lines):  # "Args (besides the dataset's own):" -> a note, then "Args:"
        m = qualified.match(line)
        if m:
            lines[j:j + 1] = [f"{m.group(1)}{m.group(2)} {m.group(3)}:", "", f"{m.group(1)}{m.group(2)}:"]
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        head = line.strip()[:-1] if line.strip().endswith(":") else None
        if head in _ARGS_SECTIONS or head in _LINE_SECTIONS:
            indent = len(line) - len(line.lstrip())
            out.append(line)
            i += 1
            body = []
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                body.append(lines[i])
                i += 1
            trailing = []
            while body and not body[-1].strip():
                trailing.append(body.pop())
            nonblank = [b for b in body if b.strip()]
            if not nonblank:
                out += body + trailing
                continue
            base = min(len(b) - len(b.lstrip()) for b in nonblank)
            entries: list[str] = []
            for b in body:
                if not b.strip():
                    continue
                if len(b) - len(b.lstrip()) == base and not (entries and head in _ARGS_SECTIONS
                                                              and entries[-1].rstrip().endswith(",")
                                                              and ":" not in entries[-1]):
                    entries.append(b)
                elif head in _ARGS_SECTIONS and entries and entries[-1].rstrip().endswith(",") \
                        and ":" not in entries[-1]:
                    entries[-1] = entries[-1].rstrip() + " " + b.strip()
                elif head in _LINE_SECTIONS and entries:
                    entries[-1] = entries[-1].rstrip() + " " + b.strip()
                else:
                    entries.append(b)
            if head in _LINE_SECTIONS:
                entries = [" " * base + "| " + _escape(e.strip()) for e in entries]
            out += entries + trailing
            continue
        out.append(line)
        i += 1
    lines[:] = out


class _GridifyPythonDomain(PythonDomain):
    """The Python domain, resolving a name first as Python would from the docstring's module.

    A name the docstring's module (or class) binds is linked to that very object, wherever it is
    documented; only names it does not bind go through Sphinx's own search.
    """

    def resolve_xref(self, env, fromdocname, builder, typ, target, node, contnode):
        hit = _resolve_by_lookup(self, builder, fromdocname, target, node, contnode, scoped_only=True)
        if hit is not None:
            return hit
        modname, clsname = node.get("py:module"), node.get("py:class")
        searchmode = 1 if node.hasattr("refspecific") else 0
        matches = self.find_obj(env, modname, clsname, target, typ, searchmode)
        for fallback in ("data", "attr") if typ == "class" else ():  # type aliases, as Sphinx does
            matches = matches or self.find_obj(env, modname, clsname, target, fallback, searchmode)
        if len(matches) > 1:
            # several documented objects of that name (type aliases repeated per module): the same
            # object, or the one in the docstring's own package (or the API page's package)
            distinct = {id(_lookup(name)): (name, entry) for name, entry in matches}
            if len(distinct) > 1:
                package = modname or "gridify." + fromdocname.rsplit("/", 1)[-1].split("-")[0]
                near = [(n, e) for n, e in matches if n.startswith(package + ".")]
                distinct = {id(_lookup(n)): (n, e) for n, e in near} if near else distinct
            if len(distinct) > 1 and len({n.rsplit(".", 1)[-1] for n, _ in matches}) == 1:
                # one alias repeated in several modules (``PathLike``, ``Bound``): the nearest
                near = modname or "gridify." + fromdocname.rsplit("/", 1)[-1].split("-")[0]
                best = max(matches, key=lambda m: len(os.path.commonprefix([m[0], near])))
                distinct = {0: best}
            if len(distinct) == 1:
                name, entry = next(iter(distinct.values()))
                return make_refnode(builder, fromdocname, entry.docname, entry.node_id, contnode, name)
        return super().resolve_xref(env, fromdocname, builder, typ, target, node, contnode)


def setup(app):
    app.add_domain(_GridifyPythonDomain, override=True)
    app.connect("autodoc-process-docstring", _napoleon_guard, priority=400)
    app.connect("autodoc-process-docstring", _sections, priority=401)
    app.connect("autodoc-process-docstring", _formula_blocks, priority=402)
    app.connect("source-read", _add_module_data)
    app.connect("autodoc-process-docstring", _track_module)
    app.connect("autodoc-skip-member", _skip_reexported)
    app.connect("autodoc-process-bases", _public_bases)
    app.connect("missing-reference", _resolve_gridify_reference)
