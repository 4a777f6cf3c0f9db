import subprocess
import sys
import textwrap

import pytest

from gridify.runtime import tune_cpu_allocator


def _glibc() -> bool:
    import platform

    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mmap_threshold": 0}, "mmap_threshold"),
        ({"mmap_threshold": True}, "mmap_threshold"),
        ({"trim_threshold": 1 << 40}, "trim_threshold"),
        ({"trim_threshold": 1.5}, "trim_threshold"),
    ],
)
def test_bad_thresholds_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tune_cpu_allocator(**kwargs)


@pytest.mark.slow  # about 15 s of allocations
@pytest.mark.skipif(not _glibc(), reason="glibc mallopt only")
def test_tuned_allocator_reuses_freed_memory():
    # in a fresh process: a 64 MiB temporary is above glibc's largest automatic mmap threshold
    # (32 MiB), so by default every one is a fresh mmap whose pages fault on first write; tuned,
    # freed heap blocks are reused and a steady-state step barely faults
    code = textwrap.dedent("""
        import resource, sys, torch
        from gridify.runtime import tune_cpu_allocator
        if sys.argv[1] == "tuned":
            assert tune_cpu_allocator() is True
        x = torch.randn(16 << 20)
        def step():
            y = x * 2.0
            return float(y[-1])
        for _ in range(3):
            step()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(10):
            step()
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """)
    faults = {}
    for mode in ("default", "tuned"):  # the fewest of three processes: now and then (ASLR) one step's heap grows once
        runs = [
            subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True)
            for _ in range(3)
        ]
        faults[mode] = min(int(out.stdout.strip()) for out in runs)
    assert faults["default"] >= 10 * 4096, faults  # 10 steps x 16k pages expected; at least a quarter
    # tuned faults far less (measured 0-2k against 160k); on a machine whose kernel reclaims freed pages in the
    # background (DAMON's kdamond) a tuned run once faulted 65k times in all three processes: still 2.5x fewer
    assert faults["tuned"] * 2 < faults["default"], faults
