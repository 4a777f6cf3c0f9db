"""Numeric precision modes: fp32, or mixed precision (bf16 / fp16 autocast) where the hardware runs it.

``bf16`` on a CPU needs native bfloat16 arithmetic (AVX512-BF16 or AMX, read from the CPU flags);
without it oneDNN emulates bf16 and is slower than fp32, so :func:`resolve_precision` warns and
falls back to fp32. On CUDA, ``bf16`` needs a GPU that supports it (compute capability >= 8),
``fp16`` any GPU. :func:`autocast` is the matching context for a forward pass: the matrix
products run in the low precision, reductions and the layers that opt out (e.g. the kernel
generation of :class:`gridify.nn.SepFlexConv3d`) in float32.

    precision = resolve_precision("bf16", device)            # "bf16", or "fp32" with a warning
    with autocast(precision, device):
        loss = criterion(model(pos, x, batch).float(), y)
"""

from __future__ import annotations

import contextlib
import functools
from typing import Iterator, Union

import torch

from ._checks import check_choice, warn_at_caller

__all__ = ["PRECISIONS", "cpu_has_native_bf16", "resolve_precision", "autocast", "LOW_PRECISION_DTYPES"]

PRECISIONS = ("fp32", "bf16", "fp16")
LOW_PRECISION_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@functools.lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """Whether this CPU has native bfloat16 arithmetic (the ``avx512_bf16`` or ``amx_bf16`` flag)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            flags = fh.read()
    except OSError:  # not Linux: no way to tell, assume not
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(precision: str, device: Union[str, torch.device], where: str = "precision") -> str:
    """The precision to run: ``precision`` itself, or ``"fp32"`` (with a warning naming why) when
    the device cannot run it natively. Unknown names raise ``ValueError``."""
    check_choice(where, "precision", precision, PRECISIONS)
    dev = torch.device(device)
    if precision == "fp32":
        return precision
    if dev.type == "cpu":
        if precision == "fp16":
            warn_at_caller(
                f"{where}: fp16 autocast is not supported for CPU training here; running in fp32 "
                f"(use bf16 on a CPU with AVX512-BF16 or AMX)"
            )
            return "fp32"
        if not cpu_has_native_bf16():
            warn_at_caller(
                f"{where}: this CPU has no native bfloat16 (AVX512-BF16 or AMX), so bf16 would be "
                f"emulated and slower than fp32; running in fp32"
            )
            return "fp32"
        return precision
    if dev.type == "cuda" and precision == "bf16" and not torch.cuda.is_bf16_supported():
        warn_at_caller(f"{where}: this GPU does not support bfloat16; running in fp16 autocast instead")
        return "fp16"
    return precision


@contextlib.contextmanager
def autocast(precision: str, device: Union[str, torch.device]) -> Iterator[None]:
    """``torch.autocast`` in the low-precision dtype of ``precision``; nothing for ``"fp32"``."""
    check_choice("autocast", "precision", precision, PRECISIONS)
    if precision == "fp32":
        yield
        return
    with torch.autocast(torch.device(device).type, dtype=LOW_PRECISION_DTYPES[precision]):
        yield
