"""The published values behind each claim of the findings scorecard.

Voita, Sennrich & Titov (EMNLP 2019) give their results as figures only. The values
below are read off those figures as the authors' blog post reproduces them
(lena-voita.github.io, ``posts/emnlp19_evolution.html``, September 2019; each entry
names the figure), to about the precision of the plot: two significant digits. The
models are Transformer-base (6 layers, d = 512) trained on WMT English-German with
the 1,000 most frequent types (>= 1,000 occurrences each) for MI and the
neighbours, 5,000 sentences for PWCCA.

The report prints :data:`PAPER` beside each measured value so that a reader sees
the size of the published effect next to ours.
"""

from __future__ import annotations

__all__ = ["PAPER", "PaperValue"]


class PaperValue(str):
    """The published value of one claim (a short text), with the figure it is read from."""

    figure: str

    def __new__(cls, text: str, figure: str):
        obj = super().__new__(cls, text)
        obj.figure = figure
        return obj


PAPER: dict[int | str, PaperValue] = {  # the 12 claims by number; further lines by label ("11b")
    1: PaperValue(
        "LM MI(input) 5.22 (layer 2) -> 4.81 -> 4.47 -> 3.97 (layer 6) nats; 25% of layer 0's 5.30 lost",
        "MI(layer, src token)",
    ),
    2: PaperValue("MLM MI(input) 5.21 (layer 0), minimum 4.93 at layer 4, 5.10 at layer 6", "MI(layer, src token)"),
    3: PaperValue(
        "layer 6: MT 4.47 vs LM 3.97 nats (MT loses 14% of layer 0's 5.21, the LM 25%)", "MI(layer, src token)"
    ),
    4: PaperValue("LM MI(next token) 1.82 (layer 0) -> 2.35 (layer 6) nats", "MI with src and dst, LM"),
    5: PaperValue(
        "MLM at corrupted positions: MI(original) 0.72 -> 2.38, MI(token fed) 6.9 -> 0.95 nats (layer 0 -> 6)",
        "MI with src and dst, MLM",
    ),
    6: PaperValue("top-50 same-token rate at layer 6: MLM 0.975 > MT 0.915 > LM 0.77", "Accuracy for top-50 neighbors"),
    7: PaperValue("position distance at layer 6: MT 4.5, LM 7.8, MLM 8.0", "Position distance"),
    8: PaperValue("LM same-left-token rate 0.37 (layer 1) -> 0.25 (layer 6)", "Same left token"),
    9: PaperValue("layer 6 PWCCA distance: d(LM, MT) 0.60 > d(MT, MLM) 0.535", "Distance between tasks"),
    10: PaperValue(
        "seed pairs 0.26-0.33 vs objective pairs 0.41-0.45 at layer 1; 0.31-0.37 vs 0.535-0.60 at layer 6",
        "Distance between tasks",
    ),
    11: PaperValue(
        "layer pair 1-2, rank 1-10 vs 10k-30k: MT 0.114 vs 0.045, LM 0.126 vs 0.040, MLM 0.146 vs 0.058", "Token change"
    ),
    "11b": PaperValue("MLM, layer pair 5-6: rank 10k-30k 0.117 vs 1-10 0.058", "Token change"),
    12: PaperValue(
        "layer 1, rank 10k-30k vs 1-10: MT 0.0059 vs 0.0003, LM 0.012 vs 0.006 (the top bin of both); "
        "with token dropout the rare bin is no longer the top one (MT: at most 0.0011 in any bin; LM: rare "
        "0.0081 vs top bin 0.0092)",
        "Token influence; with token dropout",
    ),
}
