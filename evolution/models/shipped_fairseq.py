"""The shipped models (``kind: shipped``, :mod:`evolution.models.shipped_format`) built with
fairseq's own classes, never calling ``torch.load`` or ``pickle``: the route that LRP relevance
and L0 pruning take (they patch or train fairseq's modules). The analyses see the same
:class:`~evolution.models.fairseq.FairseqAdapter` interface (hooks, attention, norms, decoder,
key masking); inference without fairseq is :mod:`evolution.models.shipped_torch`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evolution.models.base import ModelLoadError
from evolution.models.fairseq import FairseqAdapter
from evolution.models.shipped_format import _TASK_CLASSES, META, WEIGHTS, read_shipped

__all__ = ["ShippedAdapter"]


class ShippedAdapter(FairseqAdapter):
    """A model directory written by :func:`pack`: ``model.safetensors`` + ``model.json``.

    Parameters
    ----------
    path
        The model directory.
    name, objective
        As for :class:`~evolution.models.fairseq.FairseqAdapter` (default: the directory's name
        and the objective recorded in ``model.json``).
    """

    def __init__(
        self, path: str | Path, *, name: str | None = None, objective: str | None = None, device: str | None = None
    ):
        path = Path(path)
        self.meta, vocab = read_shipped(path)
        super().__init__(
            path,
            data=vocab,
            sentencepiece=vocab / "spm.model",
            name=name or path.name,
            objective=objective or self.meta.get("objective"),
            device=device,
        )

    def _load(self) -> None:
        """Build the task and the network from ``model.json``; weights from safetensors only."""
        from fairseq.data import Dictionary
        from fairseq.tasks import TASK_REGISTRY
        from omegaconf import OmegaConf
        from safetensors.torch import load_file

        from evolution.nets.compat import enable_head_weights, quiet

        meta = self.meta
        task_name = meta["task"]["_name"]
        if task_name not in _TASK_CLASSES:
            raise ModelLoadError(f"{self.path}: task {task_name!r} is not one of {sorted(_TASK_CLASSES)}")
        dictionary = Dictionary.load(str(self.data / "dict.txt"))
        with quiet():
            task_cfg = OmegaConf.create({**meta["task"], "data": str(self.data)})
            model_args = argparse.Namespace(**meta["model"])
            cls = TASK_REGISTRY[task_name]
            if task_name == "translation":
                task = cls(task_cfg, dictionary, dictionary)
            elif task_name == "language_modeling":
                task = cls(task_cfg, dictionary, dictionary, targets=["future"])
            else:
                task = cls(task_cfg, dictionary)
            model = task.build_model(model_args)
        weights = load_file(str(self.path / WEIGHTS))
        params = model.state_dict()
        weights = {k: v.to(params[k].dtype) if k in params else v for k, v in weights.items()}
        missing, unexpected = model.load_state_dict(weights, strict=False)
        tied = meta.get("tied", {})
        untied = [k for k in missing if k not in tied]
        if untied or unexpected:
            raise ModelLoadError(
                f"{self.path}: the weights do not fit the model that {META} describes "
                f"(missing {untied[:5]}, unexpected {unexpected[:5]})"
            )
        now = model.state_dict()
        for key, source in tied.items():  # the built model ties them itself; check it did
            if now[key].data_ptr() != now[source].data_ptr():
                now[key].copy_(now[source])
        enable_head_weights(model)
        self._task, self._model = task, model.eval().to(self.device)
        self.cfg = argparse.Namespace(task=task_cfg, model=model_args)
