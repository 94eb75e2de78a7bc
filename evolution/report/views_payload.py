"""The views page's payload: :func:`evolution.report.views.views_data` packed into binary
blobs (zlib, base64) inside the page's JSON, and unpacked back (tests, notebooks,
``tools/rebuild_report.py``). The page's script (``views_page/views.js``) reads the same
format with the browser's ``DecompressionStream("deflate")``.

Packed leaves (everything else, tokens included, stays plain JSON):

* an edge set, all heads of one (level, weight) or of the decoder's ``self`` / ``cross``
  attention: ``{"edges": [L, H, T], "keys": K, "z": ...}``; ``z`` inflates to the number of
  edges of every (layer, head, query) row (``L*H*T`` values), then every edge's key, then every
  edge's weight in 1/255 (uint8), rows in order and each row's edges in their data order.
  Counts and keys are uint8 when ``K < 256`` (the keys' tokens), uint16 little-endian otherwise;
* the neuron view's queries or keys: ``{"half": shape, "z": ...}``; ``z`` inflates to the
  low bytes of the float16 values, then their high bytes (split so that deflate finds the
  repeated exponents).

A 150-piece sentence of the shipped MT (6 + 3 layers, 4 heads, decoder and neuron view
included) takes about 0.8 MB where JSON lists took several. The data's weights are already
multiples of 1/255 and its queries and keys float16 values (:func:`views_data`), so that the
unpacked payload equals the data exactly.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["compact", "unpack_payload", "read_payload"]


def _z(raw: bytes) -> str:
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def _unz(text: str) -> bytes:
    return zlib.decompress(base64.b64decode(text))


def _pack_edges(layers: list, rows: int, keys: int) -> dict[str, Any]:
    """Every head's ``[[query, key, weight], ...]`` (``layers[l][h]``) as one packed edge set."""
    n_layers, n_heads = len(layers), (len(layers[0]) if layers else 0)
    dt = np.dtype("u1" if keys < 256 else "<u2")
    counts = np.zeros((n_layers, n_heads, rows), dtype=np.int64)
    ks, ws = [], []
    for layer, per_head in enumerate(layers):
        for h, edges in enumerate(per_head):
            a = np.asarray(edges, dtype=np.float64).reshape(-1, 3)
            a = a[np.argsort(a[:, 0], kind="stable")]  # by query, each query's edges in their order
            counts[layer, h] = np.bincount(a[:, 0].astype(np.int64), minlength=rows)[:rows]
            ks.append(a[:, 1])
            ws.append(a[:, 2])
    k = np.concatenate(ks) if ks else np.zeros(0)
    w = np.concatenate(ws) if ws else np.zeros(0)
    raw = (
        counts.astype(dt).tobytes()
        + k.astype(dt).tobytes()
        + np.clip(np.round(w * 255), 0, 255).astype(np.uint8).tobytes()
    )
    return {"edges": [n_layers, n_heads, rows], "keys": keys, "z": _z(raw)}


def _unpack_edges(x) -> list:
    """An edge set back as ``layers[l][h] = [[query, key, weight], ...]``; also a page of an
    earlier packing (per head, 6 bytes an edge, weight in 1/65535) or of none (lists)."""
    if isinstance(x, list):
        return [[_unpack_old_head(h) for h in layer] for layer in x]
    n_layers, n_heads, rows = x["edges"]
    dt = np.dtype("u1" if x["keys"] < 256 else "<u2")
    raw = _unz(x["z"])
    n_rows = n_layers * n_heads * rows
    counts = np.frombuffer(raw, dtype=dt, count=n_rows).astype(np.int64)
    n = int(counts.sum())
    keys = np.frombuffer(raw, dtype=dt, count=n, offset=n_rows * dt.itemsize)
    weights = np.frombuffer(raw, dtype=np.uint8, count=n, offset=(n_rows + n) * dt.itemsize)
    query = np.repeat(np.tile(np.arange(rows), n_layers * n_heads), counts)
    ends = np.cumsum(counts.reshape(n_layers * n_heads, rows).sum(-1))
    out: list[list] = []
    start = 0
    for i, end in enumerate(ends):
        if i % n_heads == 0:
            out.append([])
        part = zip(query[start:end], keys[start:end], weights[start:end], strict=True)
        out[-1].append([[int(q), int(k), int(w) / 255] for q, k, w in part])
        start = end
    return out


_OLD_EDGE = np.dtype([("q", "<u2"), ("k", "<u2"), ("w", "<u2")])


def _unpack_old_head(h) -> list:
    if not isinstance(h, str):
        return h
    a = np.frombuffer(base64.b64decode(h), dtype=_OLD_EDGE)
    return [[int(q), int(k), float(w) / 65535] for q, k, w in a]


def _pack_half(x) -> dict[str, Any]:
    """An array's float16 values: low bytes, then high bytes, deflated."""
    a = np.ascontiguousarray(np.asarray(x, dtype="<f2"))
    b = a.view(np.uint8).reshape(-1, 2)
    return {"half": list(a.shape), "z": _z(b[:, 0].tobytes() + b[:, 1].tobytes())}


def _unpack_half(x) -> list:
    """Queries or keys back as nested lists of their float16 values (also an earlier page's
    ``{"shape", "f16"}`` or plain lists)."""
    if not isinstance(x, dict):
        return x
    if "f16" in x:
        return np.frombuffer(base64.b64decode(x["f16"]), dtype="<f2").astype(float).reshape(x["shape"]).tolist()
    raw = np.frombuffer(_unz(x["z"]), dtype=np.uint8)
    n = raw.size // 2
    b = np.stack([raw[:n], raw[n:]], axis=1).copy()
    return b.view("<f2").astype(float).reshape(x["half"]).tolist()


def compact(data: dict[str, Any]) -> dict[str, Any]:
    """The page's payload: ``data`` with every edge set and the neuron view's queries and keys packed."""
    return _map_payload(data, edges=_pack_edges, half=_pack_half)


def unpack_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`compact`: edges as ``[query, key, weight]`` lists, queries and keys as
    nested lists of float16 values; equal to the data the page was written from. A page of an
    earlier format is read as well (its weights to 1/65535 or 3 decimals)."""
    return _map_payload(payload, edges=lambda x, rows, keys: _unpack_edges(x), half=_unpack_half)


def read_payload(path: str | Path) -> dict[str, Any]:
    """The data of a written views page (``views.html``), unpacked (:func:`unpack_payload`)."""
    text = Path(path).read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)
    if found is None:
        raise ValueError(f"{path}: not a views page (no data script); write one with write_views()")
    return unpack_payload(json.loads(found.group(1).replace("<\\/", "</")))


def _map_payload(data: dict[str, Any], *, edges, half) -> dict[str, Any]:
    """``data`` with ``edges(layers, rows, keys)`` applied to every edge set (every level and
    weight, and the decoder's self and cross attention; ``rows`` / ``keys``: the query's and the
    key's tokens) and ``half`` to the neuron view's queries and keys: the one walk of the payload
    that packing and unpacking share."""
    out = {**data, "models": []}
    for m in data["models"]:
        items = []
        for it in m["sentences"]:
            it = dict(it)
            it["levels"] = {
                lv: {
                    **v,  # tokens, and texts where the model saw <unk>
                    "edges": {w: edges(e, len(v["tokens"]), len(v["tokens"])) for w, e in v["edges"].items()},
                }
                for lv, v in it["levels"].items()
            }
            if "neuron" in it:
                it["neuron"] = {x: half(it["neuron"][x]) for x in ("q", "k")}
            if "decoder" in it:
                d = it["decoder"]
                rows, source = len(d["tokens"]), len(it["levels"]["subword"]["tokens"])
                it["decoder"] = {**d, "self": edges(d["self"], rows, rows), "cross": edges(d["cross"], rows, source)}
            items.append(it)
        out["models"].append({**m, "sentences": items})
    return out
