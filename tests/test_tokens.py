"""The token table: frequency ranks, length policies, coordinates."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from evolution.models import load_adapter
from evolution.tokens import SentenceTooLong, build_token_table, frequency_ranks


def test_frequency_ranks_match_a_counter():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 30, size=500).astype(np.int32)
    counts = Counter(ids.tolist())
    expected_order = sorted(counts, key=lambda i: (-counts[i], i))
    rank = {tok: r + 1 for r, tok in enumerate(expected_order)}
    np.testing.assert_array_equal(frequency_ranks(ids), [rank[i] for i in ids.tolist()])


def test_table_columns(model_specs):
    a = load_adapter(model_specs["bert"])
    table = build_token_table(["the cat sat", "a dog ran to the cat"], a)
    c = table.columns
    assert table.n_tokens == 9 and table.offsets.tolist() == [0, 3, 9]
    assert c["sentence"].tolist() == [0] * 3 + [1] * 6
    assert c["position"].tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 5]
    assert list(c["token_str"]) == "the cat sat a dog ran to the cat".split()
    assert c["freq_rank"][0] == c["freq_rank"][7]  # both "the"
    assert c["freq_rank"].min() == 1 and not c["is_special"].any()


def test_unknown_words_are_marked_special(model_specs):
    a = load_adapter(model_specs["translation"])
    table = build_token_table(["the zebra sat"], a)
    assert table.columns["is_special"].tolist() == [False, True, False]


def test_too_long_policies(model_specs):
    a = load_adapter(model_specs["masked_lm"])  # 32 positions, 2 special tokens -> 30 content tokens
    assert a.max_content_tokens == 30
    long = " ".join(["cat"] * 40)
    sents = ["the cat", long, "a dog"]
    t = build_token_table(sents, a, too_long="truncate")
    assert t.n_truncated == 1 and np.diff(t.offsets).tolist() == [2, 30, 2]
    t = build_token_table(sents, a, too_long="skip")
    assert t.n_skipped == 1 and t.sentence_index.tolist() == [0, 2]
    with pytest.raises(SentenceTooLong, match=r"corpus.txt:7: 40 tokens.*at most 30"):
        build_token_table(sents, a, too_long="error", lines=[1, 7, 9], source="corpus.txt")


def test_training_ranks_sort_by_count_then_id():
    from evolution.extract import training_ranks

    assert training_ranks({5: 3, 2: 3, 7: 10, 9: 1}) == {7: 1, 2: 2, 5: 3, 9: 4}


def test_frequency_bins_keep_what_ranks_can_reach():
    """A bin starting beyond the ranked types is omitted with a note naming it; a bin that
    the types reach only in part is kept (its ranks exist)."""
    from evolution.metrics.plan import frequency_bins

    bins, notes = frequency_bins([1, 10, 25, 50, 100, 250], ranked_types=50, basis="training split")
    assert bins == [(1, 10), (10, 25), (25, 50), (50, 100)]
    assert (
        len(notes) == 1 and "[100, 250)" in notes[0] and "50 token types" in notes[0] and "training split" in notes[0]
    )
    assert frequency_bins([1, 10, 25], ranked_types=9, basis="analysed text") == (
        [(1, 10)],
        ["frequency-rank bins [10, 25) omitted: the analysed text has 9 token types"],
    )
