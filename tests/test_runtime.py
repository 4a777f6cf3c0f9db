import subprocess
import sys
import textwrap

import pytest

from gridify.runtime import tune_cpu_allocator


def _glibc() -> bool:
    import platform
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@pytest.mark.parametrize("kwargs, match", [({"mmap_threshold": 0}, "mmap_threshold"),
                                           ({"mmap_threshold": True}, "mmap_threshold"),
                                           ({"trim_threshold": 1 << 40}, "trim_threshold"),
                                           ({"trim_threshold": 1.5}, "trim_threshold")])
def test_bad_thresholds_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tune_cpu_allocator(**kwargs)


@pytest.mark.skipif(not _glibc(), reason="glibc mallopt only")
def test_tuned_allocator_reuses_freed_memory():
    # in a fresh process: with the defaults, a new 16 MiB temporary per step page-faults its pages
    # again; tuned, freed blocks are reused and the steady state has (almost) no page faults
    code = textwrap.dedent("""
        import resource, sys, torch
        from gridify.runtime import tune_cpu_allocator
        if sys.argv[1] == "tuned":
            assert tune_cpu_allocator() is True
        x = torch.randn(4 << 20)
        def step():
            y = x * 2.0
            z = y + 1.0
            return float(z[0])
        for _ in range(3):
            step()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(20):
            step()
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """)
    faults = {}
    for mode in ("default", "tuned"):
        out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True)
        faults[mode] = int(out.stdout.strip())
    assert faults["tuned"] < 200 and faults["tuned"] <= faults["default"], faults
