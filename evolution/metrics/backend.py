"""Where the metrics' dense arithmetic runs: NumPy's BLAS on the CPU, or torch on a CUDA device
(config key ``metrics.device``; the metrics stage sets it around every unit).

The products that dominate the analyses go through here: the Gram matrices and eigenproblems
of :func:`~evolution.metrics.similarity.thin_svd`, the views' pair products, the weighted
cross-products of the similarity bootstrap (:mod:`evolution.metrics.resample`), and the
assignment step of k-means and exact nearest neighbours (:mod:`evolution.metrics.search`).
Arrays stay NumPy arrays on the host: each call moves its inputs to the device and its
result back, so nothing else knows where it ran. Results equal the CPU's to float rounding
(float64 stays float64); ``tests/test_device.py`` checks it where a GPU is present, and runs
the torch code path on the CPU (device ``torch:cpu``, for tests only) everywhere else.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import numpy as np

__all__ = ["use", "current", "on_torch", "tmatmul", "matmul", "eigh", "batched_tmatmul", "nearest"]

_DEVICE: contextvars.ContextVar[str] = contextvars.ContextVar("evolution_metrics_device", default="cpu")


def current() -> str:
    """The device of this context: ``cpu``, ``cuda``, ``cuda:N`` or (tests) ``torch:cpu``."""
    return _DEVICE.get()


@contextlib.contextmanager
def use(device: str | None) -> Iterator[str]:
    """Run the metrics' products on ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``; None: cpu)
    within the block; yields the resolved device."""
    from evolution.models.device import resolve_device

    resolved = "torch:cpu" if device == "torch:cpu" else resolve_device(device or "cpu")
    token = _DEVICE.set(resolved)
    try:
        yield resolved
    finally:
        _DEVICE.reset(token)


def on_torch() -> bool:
    return current() != "cpu"


def _torch_device() -> str:
    d = current()
    return "cpu" if d == "torch:cpu" else d


def _t(a: np.ndarray):
    import torch

    return torch.as_tensor(np.ascontiguousarray(a), device=_torch_device())


def tmatmul(a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """a^T b (a^T a without ``b``) for ``a`` (n, p), ``b`` (n, q)."""
    if not on_torch():
        return a.T @ (a if b is None else b)
    ta = _t(a)
    return (ta.T @ (ta if b is None else _t(b))).cpu().numpy()


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if not on_torch():
        return a @ b
    return (_t(a) @ _t(b)).cpu().numpy()


def eigh(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending) and eigenvectors of the symmetric ``g``."""
    if not on_torch():
        return np.linalg.eigh(g)
    import torch

    lam, v = torch.linalg.eigh(_t(g))
    return lam.cpu().numpy(), v.cpu().numpy()


def batched_tmatmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(m, p, q): a[i]^T b[i] for ``a`` (m, T, p) and ``b`` (m, T, q)."""
    if not on_torch():
        return np.matmul(np.ascontiguousarray(a.transpose(0, 2, 1)), b)
    import torch

    return torch.bmm(_t(a).transpose(1, 2), _t(b)).cpu().numpy()


def nearest(base: np.ndarray, queries: np.ndarray, k: int, *, block: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """Squared Euclidean distances and indices (n_queries, k) of each query's ``k`` nearest rows
    of ``base``, on the torch device (float32 products, as faiss's flat index on the CPU;
    ascending distance)."""
    import torch

    tb = _t(np.asarray(base, dtype=np.float32))
    b2 = (tb * tb).sum(1)
    dist, idx = [], []
    for s in range(0, len(queries), block):
        q = _t(np.asarray(queries[s : s + block], dtype=np.float32))
        d = (q * q).sum(1)[:, None] - 2 * q @ tb.T + b2[None, :]
        top = torch.topk(d, k, dim=1, largest=False, sorted=True)
        dist.append(top.values.clamp_min(0).cpu().numpy())
        idx.append(top.indices.cpu().numpy())
    return np.concatenate(dist), np.concatenate(idx).astype(np.int64)


def lloyd(x: np.ndarray, init: np.ndarray, *, niter: int, seed: int) -> np.ndarray:
    """(k, d) centroids after ``niter`` Lloyd iterations from ``init`` on the torch device (an
    emptied cluster takes the centroid of the largest one, nudged, as faiss does)."""
    import torch

    tx = _t(np.asarray(x, dtype=np.float32))
    c = _t(np.asarray(init, dtype=np.float32)).clone()
    k = c.shape[0]
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    x2 = (tx * tx).sum(1)
    for _ in range(niter):
        d = x2[:, None] - 2 * tx @ c.T + (c * c).sum(1)[None, :]
        assign = d.argmin(1)
        counts = torch.bincount(assign, minlength=k).to(tx.dtype)
        sums = torch.zeros_like(c).index_add_(0, assign, tx)
        full = counts > 0
        c[full] = sums[full] / counts[full, None]
        for j in torch.nonzero(~full).flatten().tolist():
            big = int(torch.argmax(counts))
            eps = (torch.rand(c.shape[1], generator=gen).to(c.device) - 0.5) * 1e-6
            c[j], c[big] = c[big] * (1 + eps), c[big] * (1 - eps)
            counts[j] = counts[big] = counts[big] / 2
    return c.cpu().numpy()
