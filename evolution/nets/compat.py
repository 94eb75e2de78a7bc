"""Every workaround fairseq 0.12 needs on Python 3.11, NumPy 2 and torch 2.13.

We pin ``ve-fairseq==0.12.3`` (a prebuilt cp311 wheel of fairseq 0.12; see
docs/decisions.md). Each trap below is a function with a test in
``tests/test_compat.py``; nothing else in the project patches fairseq.

1. NumPy 2 removed ``numpy.compat``; fairseq's ``TokenBlockDataset`` (LM,
   masked LM) and ``LanguagePairDataset`` use ``np.compat.long``.
   :func:`patch_numpy_compat` restores the one name they use.
2. torch >= 2.6 loads with ``weights_only=True``; fairseq checkpoints pickle
   their OmegaConf config and fail. :func:`trusted_checkpoints` lifts that for
   the duration of a block, for files the user named (never for downloads).
3. fairseq's ``MultiheadAttention`` takes PyTorch's fused path whenever it
   can, and that path returns head-*averaged* weights and ignores
   ``need_head_weights``. :func:`enable_head_weights` routes every attention
   module through fairseq's own path (numerically the same computation) so
   that per-head weights exist, and :func:`capture_attention` asks for them.
4. ``transformer_lm`` keeps 512-dim input/output projections unless
   ``--decoder-input-dim``/``--decoder-output-dim`` are given:
   :func:`lm_dim_args`.
5. The default ``--required-batch-size-multiple 8`` silently drops the last
   sentences of valid/test sets: :func:`exact_batching_args`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from collections.abc import Iterator

import numpy as np

__all__ = [
    "patch_numpy_compat",
    "trusted_checkpoints",
    "enable_head_weights",
    "capture_attention",
    "lm_dim_args",
    "exact_batching_args",
    "import_fairseq",
    "quiet",
]


def patch_numpy_compat() -> None:
    """Provide ``numpy.compat.long`` (= ``int``, as NumPy 1.x defined it) if NumPy lacks it."""
    try:
        compat = np.compat  # type: ignore[attr-defined]  # numpy 2 removed np.compat; fairseq reads it
    except AttributeError:
        compat = sys.modules.get("numpy.compat") or types.ModuleType("numpy.compat")
        sys.modules["numpy.compat"] = compat
        np.compat = compat  # type: ignore[attr-defined]  # numpy 2 removed np.compat; fairseq reads it
    if not hasattr(compat, "long"):
        compat.long = int  # type: ignore[attr-defined]  # numpy 2 removed np.compat; fairseq reads it


@contextlib.contextmanager
def trusted_checkpoints() -> Iterator[None]:
    """Within the block, ``torch.load`` without an explicit ``weights_only``
    unpickles fully (torch's documented ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``).

    Only for checkpoint files the user pointed the config at: unpickling runs
    code from the file.
    """
    key = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
    old = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the Hydra/OmegaConf deprecation chatter fairseq 0.12 emits on every config load."""
    import logging
    import warnings

    hydra_logger = logging.getLogger("hydra")
    level = hydra_logger.level
    hydra_logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hydra_logger.setLevel(level)


#: the fairseq wheel (a cp311 build of fairseq 0.12), as the Makefile installs it
FAIRSEQ_PIN = "ve-fairseq==0.12.3"
#: what a user who installed with pip runs to be able to train (the message of import_fairseq)
INSTALL_TRAIN = f"pip install -e '.[train]' && pip install --no-deps {FAIRSEQ_PIN}"


def import_fairseq():
    """Import fairseq with the NumPy patch applied; a clear error if it is missing."""
    import logging

    patch_numpy_compat()
    # Importing fairseq runs logging.basicConfig(level=INFO or DEBUG) in three modules
    # (text_to_speech, frm_text_to_speech, wav2vec2_classification). In a process whose root
    # logger has no handler yet (a Dask worker), that turns on DEBUG output from every library.
    # The root logger's handlers and level are put back as they were.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import fairseq  # noqa: F401  # imported to check that fairseq loads
        from fairseq import checkpoint_utils  # noqa: F401  # imported to check that fairseq loads

        logging.getLogger("fairseq").setLevel(logging.WARNING)  # it logs every dictionary load
    except ImportError as exc:
        raise ImportError(
            f"fairseq is not installed. Install what training needs with: {INSTALL_TRAIN} "
            "(ve-fairseq goes in without its declared dependencies, which would replace the "
            "CPU torch; `make setup` does both)"
        ) from exc
    finally:
        for h in root.handlers[:]:
            if h not in handlers:
                root.removeHandler(h)
        root.setLevel(level)
    return fairseq


def enable_head_weights(model) -> int:
    """Route every fairseq ``MultiheadAttention`` in ``model`` through fairseq's own
    attention code (not PyTorch's fused kernel), which can return per-head weights.

    Returns the number of attention modules changed.
    """
    from fairseq.modules.multihead_attention import MultiheadAttention

    n = 0
    for module in model.modules():
        if isinstance(module, MultiheadAttention):
            module.skip_embed_dim_check = True
            n += 1
    return n


@contextlib.contextmanager
def capture_attention(attention_modules) -> Iterator[list]:
    """Ask each module for per-head weights during the block and collect them.

    Yields a list that receives, per call in order, a tensor of shape
    ``(B, H, T_query, T_key)``. The modules must have been passed through
    :func:`enable_head_weights`.
    """
    captured: list = []

    def pre(module, args, kwargs):
        kwargs = dict(kwargs)
        kwargs["need_weights"] = True
        kwargs["need_head_weights"] = True
        return args, kwargs

    def post(module, args, kwargs, output):
        weights = output[1]  # (H, B, Tq, Tk) with need_head_weights
        captured.append(weights.transpose(0, 1))

    handles = []
    for m in attention_modules:
        handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(m.register_forward_hook(post, with_kwargs=True))
    try:
        yield captured
    finally:
        for h in handles:
            h.remove()


def lm_dim_args(d_model: int) -> list[str]:
    """``fairseq-train`` arguments that make ``transformer_lm`` use ``d_model`` throughout."""
    return [
        "--decoder-embed-dim",
        str(d_model),
        "--decoder-input-dim",
        str(d_model),
        "--decoder-output-dim",
        str(d_model),
    ]


def exact_batching_args() -> list[str]:
    """``fairseq-train`` arguments that keep every validation/test sentence."""
    return ["--required-batch-size-multiple", "1"]
