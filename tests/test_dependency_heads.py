"""Dependency heads (Clark et al. 2019, section 4.2; Voita et al. ACL 2019) on real UD EWT
sentences with a stub attention whose heads follow known rules, against arcs counted by a
plain loop; the dev ("select") and test ("score") sets are chosen so that their best head
and their best offset differ, so that picking on the wrong split shows."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import evolution.extract  # noqa: F401 - binds the real cached_adapter before any test patches it
from evolution.config import HeadsConfig
from evolution.corpus.conllu import TreebankSentence, read_conllu, resolve_treebank
from evolution.metrics.heads import DIRECTIONS, OFFSETS
from evolution.models.base import Tokenized

GOLDEN = (5**0.5 - 1) / 2


def _nsubj_offsets(s: TreebankSentence) -> list[int]:
    return [h - 1 - d for d, (h, r) in enumerate(zip(s.head, s.deprel, strict=True)) if r == "nsubj"]


def _pick(split: str, offset: int, n: int) -> list[TreebankSentence]:
    """The first ``n`` sentences of 5-12 words of ``split`` whose every nsubj arc has its head
    ``offset`` words to the right of the subject."""
    out = []
    for s in read_conllu(resolve_treebank(split)):
        offs = _nsubj_offsets(s)
        if offs and all(o == offset for o in offs) and 5 <= len(s) <= 12:
            out.append(s)
            if len(out) == n:
                return out
    raise AssertionError(f"{split} has fewer than {n} such sentences")


def _write_conllu(path, sentences) -> str:
    lines = []
    for s in sentences:
        for i, w in enumerate(s.words):
            lines.append(
                "\t".join([str(i + 1), w, "_", s.upos[i], s.xpos[i], "_", str(s.head[i]), s.deprel[i], "_", "_"])
            )
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def word_maps(s: TreebankSentence) -> np.ndarray:
    """The designed word-level attention (2 layers, 2 heads, n, n) among content words, rows
    the attending words, before the weight on the special tokens is added:

    * layer 1 head 0, "parent": every word but a subject puts a bonus on its head;
    * layer 1 head 1, "children": every word spreads a bonus over its dependents, so the word
      attending most to a dependent is its head (Clark et al.'s transposed direction is exact);
    * layer 2 head 0: the next word (the last word: the previous one);
    * layer 2 head 1: the word two to the right (the last two words: the previous one).

    Under each bonus a small jitter with distinct values (no ties in any row or column). The
    rows are not normalised: the stub gives the rest of each row to the special tokens, so the
    columns compare the designed values.
    """
    n = len(s)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    jitter = 0.01 * (1 + ((i * n + j) * GOLDEN) % 1.0)
    w = np.stack([jitter.copy() for _ in range(4)]).reshape(2, 2, n, n)
    children = [[d for d in range(n) if s.head[d] == g + 1] for g in range(n)]
    for d, (h, rel) in enumerate(zip(s.head, s.deprel, strict=True)):
        if h and rel != "nsubj":
            w[0, 0, d, h - 1] += 0.5
    for g in range(n):
        for d in children[g]:
            w[0, 1, g, d] += 0.5 / len(children[g])
    for q in range(n):
        w[1, 0, q, q + 1 if q + 1 < n else q - 1] += 0.5
        w[1, 1, q, q + 2 if q + 2 < n else q - 1] += 0.5
    return w


class StubAdapter:
    """A model whose attention is :func:`word_maps`: a BOS and an EOS around the content, words
    longer than 6 characters split into two pieces; the weight to a word is shared among its
    pieces and every piece of a word attends as the word does, so the word-level map (to a word:
    sum over pieces, from a word: mean) is the designed one."""

    prefix, suffix = [1], [2]
    num_layers, num_heads = 2, 2
    max_content_tokens = 200

    def __init__(self, sentences):
        self.by_text = {s.text: s for s in sentences}
        self.registry: dict[int, tuple[str, int]] = {}  # piece id -> (sentence text, piece index)

    def tokenize(self, text: str) -> Tokenized:
        pieces, word_ids = [], []
        for k, w in enumerate(text.split(" ")):
            parts = [w[: len(w) // 2], w[len(w) // 2 :]] if len(w) > 6 else [w]
            pieces += parts
            word_ids += [k] * len(parts)
        ids = []
        for p in range(len(pieces)):
            ids.append(10 + len(self.registry))
            self.registry[ids[-1]] = (text, p)
        return Tokenized(ids, pieces, word_ids)

    def build_input(self, ids):
        return [*self.prefix, *ids, *self.suffix]

    def piece_maps(self, x) -> np.ndarray:
        text = self.registry[x[1]][0]
        s = self.by_text[text]
        tok_words = [k for k, w in enumerate(text.split(" ")) for _ in range(2 if len(w) > 6 else 1)]
        units = np.array(tok_words)
        n_pieces = len(units)
        per_piece = np.array([1.0 / np.sum(units == units[p]) for p in range(n_pieces)])
        w = word_maps(s)  # each content row sums to < 0.9: the rest goes to BOS (EOS: 0.1)
        t = n_pieces + 2
        out = np.zeros((2, 2, t, t))
        out[..., 1:-1, 1:-1] = w[..., units, :][..., units] * per_piece  # its word's row; a column shared by pieces
        out[..., 1:-1, -1] = 0.1
        out[..., 1:-1, 0] = 0.9 - out[..., 1:-1, 1:-1].sum(-1)
        out[..., 0, :] = out[..., -1, :] = 1.0 / t  # the special tokens' own rows: uniform
        assert (out[..., 1:-1, 0] > 0.1).all()
        return out

    def forward(self, inputs, *, attention=False):
        t = max(len(x) for x in inputs)
        att = np.zeros((2, len(inputs), 2, t, t))
        for b, x in enumerate(inputs):
            att[:, b, :, : len(x), : len(x)] = self.piece_maps(x)
        return None, att


def _argmax(values) -> int:
    best = 0
    for k, v in enumerate(values):
        if v > values[best]:
            best = k
    return best


def loop_counts(sentences, relations):
    """Plain loops over arcs: hits (2, 2, R, 3) per direction as Clark et al.'s code defines them,
    arcs (R,), offset hits (len(OFFSETS), R) of "the head is the word at offset k of the dependent"."""
    hits = np.zeros((2, 2, len(relations), 3))
    arcs = np.zeros(len(relations))
    offset_hits = np.zeros((len(OFFSETS), len(relations)))
    for s in sentences:
        w = word_maps(s)
        n = len(s)
        for d in range(n):
            g = s.head[d] - 1
            if g < 0:
                continue
            r = relations.index(s.deprel[d])
            arcs[r] += 1
            for k, off in enumerate(OFFSETS):
                offset_hits[k, r] += d + off == g
            for layer in range(2):
                for h in range(2):
                    m = w[layer, h]
                    others = [j for j in range(n) if j != d]
                    # dependent_to_head: the dependent's most attended other word
                    hits[layer, h, r, 0] += others[_argmax([m[d, j] for j in others])] == g
                    # head_to_dependent: the head word's most attended other word
                    others_g = [j for j in range(n) if j != g]
                    hits[layer, h, r, 1] += others_g[_argmax([m[g, j] for j in others_g])] == d
                    # Clark's transposed map: the other word attending most to the dependent
                    hits[layer, h, r, 2] += others[_argmax([m[j, d] for j in others])] == g
    return hits, arcs, offset_hits


@pytest.fixture(scope="module")
def splits():
    # dev ("select"): mostly subjects right before their verb; test ("score"): mostly two before
    dev = _pick("ud-ewt-dev", 1, 12) + _pick("ud-ewt-dev", 2, 4)
    test = _pick("ud-ewt-test", 1, 4) + _pick("ud-ewt-test", 2, 12)
    return dev, test


@pytest.fixture(scope="module")
def group(splits, tmp_path_factory):
    import evolution.models
    from evolution.analyses.base import save_texts
    from evolution.analyses.heads import Heads
    from evolution.analyses.heads.dependency import dependency_task

    tmp = tmp_path_factory.mktemp("dep")
    dev, test = splits
    stub = StubAdapter(dev + test)
    paths = {"select": _write_conllu(tmp / "dev.conllu", dev), "score": _write_conllu(tmp / "test.conllu", test)}
    cfg = HeadsConfig(select=paths["select"], score=paths["score"])
    mp = pytest.MonkeyPatch()
    mp.setattr(evolution.models, "cached_adapter", lambda spec: stub)
    try:
        results = {}
        for split, path in paths.items():
            text = save_texts(str(tmp), f"tb-{split}", {"conllu": open(path, encoding="utf-8").read()})
            results[f"stub-dependency-{split}"] = dependency_task(
                spec={"name": "stub"}, treebank=path, text=text, heads=cfg, max_batch_tokens=64
            )
    finally:
        mp.undo()
    inputs = SimpleNamespace(names=["stub"], config=SimpleNamespace(heads=cfg))
    return Heads()._dependency(inputs, results).sel(model="stub")


def test_dependency_accuracy_equals_a_plain_loop_over_the_arcs(splits, group):
    assert list(group.direction.values) == list(DIRECTIONS)
    relations = list(group.relation.values)
    for j, sentences in enumerate(splits):
        hits, arcs, _ = loop_counts(sentences, relations)
        np.testing.assert_array_equal(group.arcs.isel(split=j).values, arcs)
        with np.errstate(invalid="ignore"):
            expect = hits / arcs[None, None, :, None]
        np.testing.assert_allclose(group.accuracy.isel(split=j).values, expect, equal_nan=True)


def test_dependency_directions_mean_what_their_names_say(group):
    """The parent head finds every non-subject's head from the dependent's row; the children head
    finds every dependent's head as the word attending most to it (the transposed map), which
    reading the head word's row cannot do for a word with several dependents."""
    acc = group.accuracy.isel(split=1)
    parent = acc.sel(layer=1, head=0)
    children = acc.sel(layer=1, head=1)
    rel = [
        r for r in group.relation.values if r not in ("nsubj", "root") and group.arcs.sel(split="score", relation=r) > 0
    ]
    assert len(rel) >= 10
    np.testing.assert_array_equal(parent.sel(direction="dependent_to_head", relation=rel).values, 1.0)
    assert (parent.sel(direction="head_to_dependent_clark", relation=rel).values < 1).any()
    np.testing.assert_array_equal(
        children.sel(direction="head_to_dependent_clark", relation=rel + ["nsubj"]).values, 1.0
    )
    # the head word's row has one maximum among its dependents: some arcs are missed
    assert np.nanmin(children.sel(direction="head_to_dependent", relation=rel).values) < 1


def test_dependency_head_and_offset_are_picked_on_select_and_scored_on_score(splits, group):
    dev, test = splits
    relations = list(group.relation.values)
    r = relations.index("nsubj")
    h_dev, a_dev, o_dev = loop_counts(dev, relations)
    h_test, a_test, o_test = loop_counts(test, relations)
    acc_dev, acc_test = h_dev[..., r, :] / a_dev[r], h_test[..., r, :] / a_test[r]  # (2, 2, 3)
    base_dev, base_test = o_dev[:, r] / a_dev[r], o_test[:, r] / a_test[r]
    sel = dict(relation="nsubj", direction="dependent_to_head")
    # the splits were chosen so that dev and test disagree on the best head and the best offset
    best_dev = np.unravel_index(np.argmax(acc_dev[..., 0]), (2, 2))
    best_test = np.unravel_index(np.argmax(acc_test[..., 0]), (2, 2))
    assert best_dev != best_test and np.argmax(base_dev) != np.argmax(base_test)
    assert (int(group.picked_layer.sel(**sel)) - 1, int(group.picked_head.sel(**sel))) == best_dev
    assert float(group.picked_accuracy.sel(**sel)) == pytest.approx(acc_test[best_dev + (0,)])
    assert float(group.best_accuracy.sel(**sel)) == pytest.approx(acc_test[..., 0].max())
    assert float(group.picked_accuracy.sel(**sel)) < float(group.best_accuracy.sel(**sel))
    assert int(group.baseline_offset.sel(**sel)) == OFFSETS[int(np.argmax(base_dev))] == 1
    assert float(group.baseline_accuracy.sel(**sel)) == pytest.approx(base_test[np.argmax(base_dev)])
    assert float(group.baseline_accuracy.sel(**sel)) < base_test.max()
    # Clark's transposed direction has the same baseline: the head at a fixed offset of the dependent
    clark = dict(relation="nsubj", direction="head_to_dependent_clark")
    assert int(group.baseline_offset.sel(**clark)) == 1
    assert float(group.baseline_accuracy.sel(**clark)) == pytest.approx(base_test[np.argmax(base_dev)])


def test_syntactic_heads_use_voita_directions_against_the_offset_baseline(splits, group):
    """Syntactic (Voita et al.): test accuracy from the dependent's or the head word's row beats
    the best offset baseline of those directions by >= 0.10; Clark's transposed direction, which
    makes the children head perfect, does not count."""
    test = splits[1]
    relations = list(group.relation.values)
    hits, arcs, _ = loop_counts(test, relations)
    for rel in group.syntactic_relation.values:
        r = relations.index(rel)
        acc = hits[..., r, :2].max(-1) / arcs[r]
        arc_list = [(d, s.head[d] - 1) for s in test for d in range(len(s)) if s.deprel[d] == rel and s.head[d]]
        base = (
            max(max(sum(g == d + k for d, g in arc_list), sum(d == g + k for d, g in arc_list)) for k in OFFSETS)
            / arcs[r]
        )
        np.testing.assert_array_equal(group.syntactic.sel(syntactic_relation=rel).values, acc - base >= 0.10)
    # the children head is perfect in the transposed direction, and not a syntactic nsubj head
    assert (
        float(group.accuracy.sel(split="score", layer=1, head=1, relation="nsubj", direction="head_to_dependent_clark"))
        == 1.0
    )
    assert not bool(group.syntactic.sel(layer=1, head=1, syntactic_relation="nsubj"))
