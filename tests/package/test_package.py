import re
import subprocess
import sys

import pytest

from gridify.models import GridifiedClassifier, build_model
from gridify.registry import BACKBONES, Registry, UnknownNameError


def test_import_is_light():
    """`import gridify` pulls in no training framework, plotting library or Open3D."""
    code = (
        "import sys, gridify; bad = [m for m in ('lightning', 'pytorch_lightning', 'matplotlib', 'open3d') "
        "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_registry():
    reg = Registry("widget")

    @reg.register("a")
    class A:
        def __init__(self, n: int = 1):
            self.n = n

    assert reg.build("A", n=3).n == 3 and "a" in reg and reg.names() == ["a"]
    with pytest.raises(KeyError, match="unknown widget 'b'; known widgets: a"):
        reg.get("b")
    with pytest.raises(KeyError, match="already registered"):
        reg.register("a", obj=object)


def test_a_registry_name_that_is_not_a_string_is_a_type_error_naming_the_registry_and_the_value():
    """It was an AttributeError (``5.lower()``) when registering; a lookup names the value too."""
    reg = Registry("widget")
    for bad in (5, b"a", ("a",)):
        with pytest.raises(
            TypeError, match=rf"widget registry: the name must be a string, got \w+ {re.escape(repr(bad))}"
        ):
            reg.register(bad)
        with pytest.raises(TypeError, match=rf"widget name must be a string, got \w+ {re.escape(repr(bad))}"):
            reg.get(bad)
    with pytest.raises(ValueError, match="widget registry: cannot register an unnamed widget"):
        reg.register("", obj=object())
    assert reg.names() == []


def test_a_registry_with_a_base_class_refuses_anything_else_when_it_is_registered():
    class Base:
        pass

    reg = Registry("widget", base=Base)
    with pytest.raises(TypeError, match=r"widget registry: 'f' must be a subclass of .*Base, got function"):
        reg.register("f", obj=lambda: None)
    with pytest.raises(TypeError, match=r"'other' must be a subclass of .*Base, got class int"):
        reg.register("other", obj=int)

    @reg.register("sub")
    class Sub(Base):
        pass

    assert reg.names() == ["sub"] and reg.get("sub") is Sub


def test_unknown_registry_names_are_value_errors_and_key_errors():
    for call in (
        lambda: build_model("nope"),
        lambda: BACKBONES.get("zzz"),
        lambda: GridifiedClassifier(3, 4, backbone="zzz"),
        lambda: GridifiedClassifier(3, 4, pos_embedding="zzz"),
    ):
        with pytest.raises(ValueError) as err:
            call()
        assert isinstance(err.value, KeyError) and isinstance(err.value, UnknownNameError)
        assert str(err.value).startswith("unknown ") and "known" in str(err.value)  # not quoted like a KeyError
