"""The model of a store written from activations (:mod:`evolution.activations`): an
:class:`~evolution.models.base.Adapter` that runs nothing and serves what the store holds, so
that the analyses which ask a model for attention (the head statistics re-run each sentence)
or for its pieces and layout (the views) take such a store unchanged.

``forward(inputs, attention=True)`` finds each input among the stored sentences by its token
ids and returns their stored states (content positions; NaN at the added tokens, whose states
were not stored) and attention maps. What needs a model to run, namely a new sentence, masked
keys (token influence), head masks (importance), queries and keys (the neuron view), fails
with an error saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from evolution.models.base import Adapter, ModelLoadError, Objective, Tokenized

__all__ = ["StoredAdapter"]


class StoredAdapter(Adapter):
    """The stored activations of model ``group`` in the store at ``path``, as an adapter."""

    def __init__(self, path: str, *, group: str | None = None, name: str | None = None, objective=None, device=None):
        from evolution.store import has_attention, open_attention, open_representations

        if not (group or name):
            raise ModelLoadError(f"{path}: a stored-activations model needs the group it is stored as (spec 'group')")
        self.store, self.group = str(path), str(group or name)
        ds = open_representations(self.store, self.group)
        attrs = ds.attrs
        self.name = name or self.group
        # None where the activations came without one (MI then has no output label)
        self.objective = cast(Objective, objective or attrs.get("objective"))
        self.num_layers = int(attrs["num_layers"])
        self.num_heads = int(attrs.get("num_heads") or 0)
        self.d_model = int(attrs["d_model"])
        self.max_positions = int(attrs["max_positions"])
        self.prefix = [int(i) for i in attrs.get("prefix_ids", [])]
        self.suffix = [int(i) for i in attrs.get("suffix_ids", [])]
        self.pad_id = -1
        self.special_ids = frozenset({*self.prefix, *self.suffix})
        self.device = "cpu"
        sentence, token_id = ds["sentence"].values, ds["token_id"].values
        bounds = np.flatnonzero(np.diff(sentence)) + 1
        starts = np.concatenate([[0], bounds])
        stops = np.concatenate([bounds, [len(sentence)]])
        self._rows: dict[
            tuple[int, ...], tuple[int, int]
        ] = {}  # content ids -> (first row, row count), the first sentence that has them
        for a, z in zip(starts, stops, strict=True):
            self._rows.setdefault(tuple(int(i) for i in token_id[a:z]), (int(a), int(z - a)))
        self._pieces = dict(zip((int(i) for i in token_id), (str(p) for p in ds["token_str"].values), strict=True))
        added = zip(
            [*self.prefix, *self.suffix],
            [*attrs.get("prefix_pieces", []), *attrs.get("suffix_pieces", [])],
            strict=False,
        )
        self._pieces.update({int(i): str(p) for i, p in added})
        self._attention_row: dict[tuple[int, ...], int] = {}
        if has_attention(self.store, self.group):
            att = open_attention(self.store, self.group)
            lengths, ids = att["length"].values, att["input_id"].values
            for k, t in enumerate(lengths):
                self._attention_row.setdefault(tuple(int(i) for i in ids[k, : int(t)]), k)

    def tokenize(self, sentence: str) -> Tokenized:
        raise ModelLoadError(
            f"{self.name}: representations from activations hold no tokenizer and no model to run on new text "
            f"({sentence[:40]!r}); analyses that need the model (influence, importance, dependency heads, probes) "
            "run on a model loaded with ev.load"
        )

    def _find(self, ids: Sequence[int]) -> tuple[int, int]:
        n_before, n_after = len(self.prefix), len(self.suffix)
        content = tuple(int(i) for i in ids[n_before : len(ids) - n_after])
        if content not in self._rows:
            raise ModelLoadError(
                f"{self.name}: the input {list(ids)[:12]}... is not one of the stored sentences; representations "
                "from activations answer only for the sentences they hold"
            )
        return self._rows[content]

    def forward(
        self, inputs: Sequence[Sequence[int]], *, attention: bool = False
    ) -> tuple[np.ndarray, np.ndarray | None]:
        from evolution.store import open_attention_array, open_hidden

        t = max(len(x) for x in inputs)
        hidden = np.full((self.num_layers + 1, len(inputs), t, self.d_model), np.nan, dtype=np.float32)
        arr = open_hidden(self.store, self.group)
        for b, ids in enumerate(inputs):
            first, n = self._find(ids)
            off = len(self.prefix)
            hidden[:, b, off : off + n] = np.asarray(arr[:, first : first + n], dtype=np.float32)
        if not attention:
            return hidden, None
        if not self._attention_row:
            raise ModelLoadError(
                f"{self.name}: no attention maps were stored with these activations; pass attention= to "
                "ev.from_activations (TransformerLens: the cache's hook_pattern) for the head statistics and views"
            )
        maps = open_attention_array(self.store, self.group)
        att = np.zeros((self.num_layers, len(inputs), self.num_heads, t, t), dtype=np.float32)
        for b, ids in enumerate(inputs):
            key = tuple(int(i) for i in ids)
            if key not in self._attention_row:
                raise ModelLoadError(f"{self.name}: no attention stored for the input {list(ids)[:12]}...")
            n = len(ids)
            att[:, b, :, :n, :n] = np.asarray(maps[self._attention_row[key]], dtype=np.float32)[:, :, :n, :n]
        return hidden, att

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self._pieces.get(int(i), f"<{int(i)}>") for i in ids]

    @property
    def supports_key_masking(self) -> bool:
        return False
