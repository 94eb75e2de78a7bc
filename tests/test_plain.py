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
    for x, y in zip(fs.forward_qk(inputs[:1]), pl.forward_qk(inputs[:1])):
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
        for x, y in zip(fs.forward_decoder(inputs[:1], target), pl.forward_decoder(inputs[:1], target)):
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
