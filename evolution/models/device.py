"""Where models run: ``device`` is ``auto`` (the first CUDA GPU where one is visible, else the
CPU), ``cpu``, ``cuda`` or ``cuda:N`` (config key ``extract.device``; the notebook API's
``load(..., device=...)``). Inputs are moved to the model's device and every output comes
back as a NumPy array on the CPU, so nothing downstream knows where the model ran.

On a GPU the numbers differ from the CPU's by float rounding only (different kernels and
reduction orders): ``tests/test_device.py`` states the tolerance and checks it where a GPU
is present.
"""

from __future__ import annotations

import re

__all__ = ["resolve_device", "DEVICE_PATTERN", "cuda_count"]

DEVICE_PATTERN = r"^(auto|cpu|cuda(:\d+)?)$"


def cuda_count() -> int:
    """How many CUDA devices this process sees (0 without torch's CUDA support)."""
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a CPU build, or no driver
        return 0


def resolve_device(device: str | None) -> str:
    """``auto`` -> ``cuda`` where a GPU is visible, else ``cpu``; ``cuda`` / ``cuda:N`` checked to
    exist. Raises ``ValueError`` naming the devices there are and what to set instead."""
    device = (device or "cpu").strip()
    if not re.match(DEVICE_PATTERN, device):
        raise ValueError(f"device {device!r}: use auto, cpu, cuda or cuda:N")
    n = cuda_count()
    if device == "auto":
        return "cuda" if n else "cpu"
    if device.startswith("cuda"):
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= n:
            raise ValueError(f"device {device!r}: {_why_no_gpu(n)}; set device: cpu or auto")
    return device


def _why_no_gpu(n: int) -> str:
    """Why ``cuda:n`` is not there: a CPU build of torch, a CUDA build that sees no GPU (no driver,
    ``CUDA_VISIBLE_DEVICES``), or fewer GPUs than asked for."""
    import os

    import torch

    if n:
        return f"torch sees {n} CUDA device(s), cuda:0..cuda:{n - 1}"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build (no CUDA); a GPU needs torch's CUDA build"
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={hidden!r})" if hidden is not None else " (no GPU or no driver: nvidia-smi tells)"
    return f"torch {torch.__version__} is a CUDA {torch.version.cuda} build but sees no GPU{where}"
