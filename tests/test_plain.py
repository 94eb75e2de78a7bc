"""The shipped models in plain PyTorch (evolution/nets/torch_network.py, evolution/models/shipped_torch.py) against
fairseq's own classes on the committed weights: every layer's states, every attention map, the
norms, queries and keys, keys hidden per block, the MT decoder's attention and the output logits
within 1e-5 (measured: identical), the MT's greedy translations identical to fairseq's
SequenceGenerator with beam 1; and the plain route imports no fairseq."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "results" / "bible-full" / "models"
SENTENCES = [
    "In the beginning God created the heaven and the earth.",
    "And God said, Let there be light.",
    "Jesus wept.",
]
TOLERANCE = 1e-5


def _padded_max(a: np.ndarray, b: np.ndarray, lengths: list[int], *, axes: int) -> float:
    """Largest difference over the unpadded positions of a batch (axis 1 = batch; the last
    ``axes`` axes run over positions)."""
    worst = 0.0
    for i, n in enumerate(lengths):
        index = (slice(None), i) + (slice(None),) * (a.ndim - 2 - axes) + (slice(0, n),) * axes
        worst = max(worst, float(np.abs(a[index] - b[index]).max()))
    return worst


@pytest.mark.parametrize("objective", ["mt", "lm", "mlm"])
def test_the_plain_network_equals_fairseqs(objective):
    pytest.importorskip("fairseq")
    from evolution.models.shipped_fairseq import ShippedAdapter
    from evolution.models.shipped_torch import PlainAdapter

    fs, pl = ShippedAdapter(MODELS / objective), PlainAdapter(MODELS / objective)
    inputs = [fs.build_input(fs.tokenize(s).ids) for s in SENTENCES]
    assert inputs == [pl.build_input(pl.tokenize(s).ids) for s in SENTENCES]
    assert (
        pl.num_layers,
        pl.num_heads,
        pl.d_model,
        pl.max_positions,
        pl.prefix,
        pl.suffix,
        pl.mask_id,
        pl.ordinary_ids,
    ) == (fs.num_layers, fs.num_heads, fs.d_model, fs.max_positions, fs.prefix, fs.suffix, fs.mask_id, fs.ordinary_ids)
    lengths = [len(x) for x in inputs]
    h1, a1, n1 = fs.forward_norms(inputs)
    h2, a2, n2 = pl.forward_norms(inputs)
    assert _padded_max(h1, h2, lengths, axes=1) <= TOLERANCE  # (L + 1, B, T, d): every layer, padding left out
    assert _padded_max(a1, a2, lengths, axes=2) <= TOLERANCE  # (L, B, H, T, T)
    for key in n1:
        np.testing.assert_allclose(np.nan_to_num(n2[key]), np.nan_to_num(n1[key]), rtol=0, atol=TOLERANCE)
    for x, y in zip(fs.forward_qk(inputs[:1]), pl.forward_qk(inputs[:1]), strict=True):
        np.testing.assert_allclose(y, x, rtol=0, atol=TOLERANCE)
    masked = [(0, 1), (2, 3), (5, len(inputs[0]) - 1)]
    np.testing.assert_allclose(
        pl.forward_masked_keys([inputs[0]] * 3, masked=masked),
        fs.forward_masked_keys([inputs[0]] * 3, masked=masked),
        rtol=0,
        atol=TOLERANCE,
    )
    if objective == "mt":
        target = [fs.build_decoder_input(fs.tokenize_target("En el principio creó Dios los cielos y la tierra.").ids)]
        for x, y in zip(fs.forward_decoder(inputs[:1], target), pl.forward_decoder(inputs[:1], target), strict=True):
            np.testing.assert_allclose(y, x, rtol=0, atol=TOLERANCE)
        logits = (fs.logits(inputs[:1], target), pl.logits(inputs[:1], target))
    else:
        logits = (fs.logits(inputs[:1]), pl.logits(inputs[:1]))
    np.testing.assert_allclose(logits[1].detach().numpy(), logits[0].detach().numpy(), rtol=0, atol=1e-4)


def test_greedy_translations_equal_fairseqs_generator():
    pytest.importorskip("fairseq")
    import torch
    from fairseq.sequence_generator import SequenceGenerator

    from evolution.models.shipped_fairseq import ShippedAdapter
    from evolution.models.shipped_torch import PlainAdapter

    fs, pl = ShippedAdapter(MODELS / "mt"), PlainAdapter(MODELS / "mt")
    lines = (ROOT / "evolution" / "data" / "web-genesis.en.txt").read_text(encoding="utf-8").splitlines()[:12]
    inputs = [fs.build_input(fs.tokenize(s).ids) for s in lines if s.strip()]
    t = max(len(x) for x in inputs)
    src = torch.tensor([x + [fs.pad_id] * (t - len(x)) for x in inputs])
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([len(x) for x in inputs])}}
    generator = SequenceGenerator([fs._model], fs._task.target_dictionary, beam_size=1, max_len_a=1.5, max_len_b=10)
    reference = [h[0]["tokens"].tolist()[:-1] for h in generator.generate([fs._model], sample)]
    assert pl.translate(inputs, max_len_a=1.5, max_len_b=10) == reference
    assert sum(len(r) for r in reference) > 5 * len(reference)  # real translations, not empty ones


def test_a_shipped_model_runs_without_fairseq(tmp_path):
    """With fairseq unimportable, the notebook API loads a shipped model, extracts its states and
    attention and names the extra for what needs fairseq."""
    code = f"""
import sys
sys.modules["fairseq"] = None  # any import of fairseq fails
import evolution.api as ev
mt = ev.load({str(MODELS / "mt")!r})
reps = ev.represent([mt], {SENTENCES!r}, attention=True)
hidden = reps["mt"].hidden
assert hidden.shape[0] == 7 and hidden.shape[2] == 128, hidden.shape
assert not [m for m in sys.modules if m.startswith("fairseq.")]
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")


def _altered_copy(tmp_path: Path, objective: str, change: str, key: str) -> Path:
    """A copy of a committed shipped model (its vocabulary named by absolute path) whose weights
    file has the key ``key`` more (``unexpected``) or less (``missing``) than the architecture."""
    import json

    from safetensors.numpy import load_file, save_file

    source = MODELS / objective
    meta = json.loads((source / "model.json").read_text(encoding="utf-8"))
    meta["vocabulary"] = str((source / meta["vocabulary"]).resolve())
    (tmp_path / "model.json").write_text(json.dumps(meta), encoding="utf-8")
    weights = load_file(str(source / "model.safetensors"))
    if change == "unexpected":
        assert key not in weights
        weights[key] = np.zeros((4, 4), dtype=np.float32)
    else:
        del weights[key]
    save_file(weights, str(tmp_path / "model.safetensors"))
    return tmp_path


@pytest.mark.parametrize(
    ("objective", "change", "key"),
    [
        ("lm", "unexpected", "decoder.encoder.layers.2.self_attn.extra_proj.weight"),
        ("lm", "missing", "decoder.encoder.layers.2.self_attn.k_proj.bias"),
        # outside the names the network reads at all (the LM's encoder prefix, the MT's two)
        ("lm", "unexpected", "decoder.layers.0.extra_proj.weight"),
        ("mt", "unexpected", "stray.extra_proj.weight"),
        ("mt", "missing", "decoder.layers.1.encoder_attn.k_proj.bias"),
    ],
)
def test_plain_loading_refuses_weights_that_do_not_fit_naming_the_key(tmp_path, objective, change, key):
    """Weights with a key the architecture of model.json lacks, or without one it has, are
    refused (not loaded with a layer left at its random initial values, or a stray tensor
    ignored), naming the key as it stands in model.safetensors (as the fairseq route does)."""
    import re

    from evolution.models.base import ModelLoadError
    from evolution.models.shipped_torch import PlainAdapter

    good = PlainAdapter(MODELS / objective)  # the unaltered weights load
    assert good.num_layers == 6
    path = _altered_copy(tmp_path, objective, change, key)
    with pytest.raises(ModelLoadError, match=rf"{change} \['{re.escape(key)}'\]") as refused:
        PlainAdapter(path)
    assert "model.safetensors must hold the weights of the network that model.json describes" in str(refused.value)


def test_greedy_translation_where_the_end_is_likely_first_and_later_equals_fairseqs():
    """Greedy decoding where </s> is the most likely token at the first step and again later: the
    committed MT with the bias of its last decoder LayerNorm moved 12 units along the </s>
    embedding (in both routes alike). Then </s> tops the first step's distribution for some
    sentences (fairseq's min_len = 1 forbids it there: the next best token is taken) and ends
    their translation a few steps later, and not for others. The plain route's translations equal
    fairseq's SequenceGenerator with beam 1 on the same weights, and a plain loop over the plain
    network's log-probabilities (pad never chosen, </s> not first, forced at the length limit)."""
    pytest.importorskip("fairseq")
    import torch
    from fairseq.sequence_generator import SequenceGenerator

    from evolution.models.shipped_fairseq import ShippedAdapter
    from evolution.models.shipped_torch import PlainAdapter

    fs, pl = ShippedAdapter(MODELS / "mt"), PlainAdapter(MODELS / "mt")
    eos, pad = pl.dictionary.eos(), pl.dictionary.pad()
    with torch.no_grad():
        for embed, layer in (
            (fs._model.encoder.embed_tokens, fs._model.decoder.layers[-1]),
            (pl.net.encoder.embed_tokens, pl.net.decoder.layers[-1]),
        ):
            layer.final_layer_norm.bias += 12.0 * embed.weight[eos] / embed.weight[eos].norm()
    lines = (ROOT / "evolution" / "data" / "web-genesis.en.txt").read_text(encoding="utf-8").splitlines()[:12]
    inputs = [fs.build_input(fs.tokenize(s).ids) for s in lines if s.strip()]
    a, b = 1.5, 10
    limit = int(a * max(len(x) for x in inputs) + b)  # fairseq's max_len: of the batch's longest source

    def plain_loop(source: list[int]) -> tuple[list[int], list[bool]]:
        """Greedy decoding of one sentence by hand; also whether </s> topped each step (unmasked)."""
        net = pl.net
        enc = net.encoder(torch.tensor([source]))
        prev, out, top = [eos], [], []
        for step in range(limit + 1):
            dec = net.decoder(torch.tensor([prev]), enc["final"], enc["padding"])
            lprobs = torch.log_softmax(net.decoder.output_layer(dec["features"][0, -1]), dim=-1)
            top.append(int(lprobs.argmax()) == eos)
            lprobs[pad] = -float("inf")
            if step == 0:
                lprobs[eos] = -float("inf")
            if step == limit:
                return out, top
            token = int(lprobs.argmax())
            if token == eos:
                return out, top
            out.append(token)
            prev.append(token)
        return out, top

    with torch.inference_mode():
        by_hand = [plain_loop(x) for x in inputs]
    first = [top[0] for _, top in by_hand]
    assert 2 <= sum(first) < len(first), first  # </s> most likely at the first step for some sentences only
    for out, top in by_hand:
        if top[0]:  # and again where the translation ends, before the length limit
            assert 1 <= len(out) < limit and top[len(out)], (out, top)
    t = max(len(x) for x in inputs)
    src = torch.tensor([x + [fs.pad_id] * (t - len(x)) for x in inputs])
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([len(x) for x in inputs])}}
    generator = SequenceGenerator([fs._model], fs._task.target_dictionary, beam_size=1, max_len_a=a, max_len_b=b)
    reference = [h[0]["tokens"].tolist()[:-1] for h in generator.generate([fs._model], sample)]
    assert [out for out, _ in by_hand] == reference  # the loop by hand is fairseq's greedy search
    assert pl.translate(inputs, max_len_a=a, max_len_b=b) == reference
