"""One joint subword vocabulary for every objective, and fairseq binarisation with it.

Voita et al. (2019) keep the vocabulary fixed across objectives (joint BPE
over both languages). Here a SentencePiece BPE model is trained on the
*training* split of both sides; its pieces become one fairseq dictionary
``dict.txt`` (``<s> <pad> </s> <unk>``, the pieces in SentencePiece's order,
then ``<mask>`` last), which the MT data (both sides), the LM data and the
MLM data are all binarised with. An English sentence therefore has the same
token ids in the three models; ``<mask>`` is in the dictionary of all three
so that their embedding matrices have the same shape.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from evolution.corpus.text import CorpusError

logger = logging.getLogger(__name__)

__all__ = ["train_sentencepiece", "write_dictionary", "encode_file", "binarize"]

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")


def train_sentencepiece(texts: Sequence[Path], prefix: Path, *, vocab_size: int) -> Path:
    """Train a joint BPE model on ``texts`` (one sentence per line); returns ``prefix.model``.

    A vocabulary the data cannot support raises :class:`CorpusError` with the
    largest size SentencePiece reports as possible.
    """
    import sentencepiece as spm

    prefix.parent.mkdir(parents=True, exist_ok=True)
    try:
        spm.SentencePieceTrainer.train(
            input=",".join(str(t) for t in texts),
            model_prefix=str(prefix),
            vocab_size=vocab_size,
            model_type="bpe",
            character_coverage=1.0,
            num_threads=1,
            unk_id=0,
            bos_id=-1,
            eos_id=-1,
            pad_id=-1,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            minloglevel=2,
        )
    except RuntimeError as exc:
        msg = str(exc)
        if "Vocabulary size" in msg or "vocab_size" in msg:
            raise CorpusError(
                f"train.vocab_size = {vocab_size} is more than the training text supports "
                f"({msg.strip()}); lower train.vocab_size"
            ) from None
        raise
    return prefix.with_suffix(".model")


def encode_file(model: Path, source: Path, target: Path) -> Counter:
    """Write ``source`` as space-separated pieces to ``target``; returns piece counts."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    counts: Counter = Counter()
    lines = source.read_text(encoding="utf-8").splitlines()
    with open(target, "w", encoding="utf-8") as out:
        for pieces in sp.encode(lines, out_type=str):
            counts.update(pieces)
            out.write(" ".join(pieces) + "\n")
    return counts


def write_dictionary(model: Path, counts: Counter, path: Path) -> Path:
    """fairseq ``dict.txt``: every SentencePiece piece in model order (with its training count), ``<mask>`` last."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    lines = []
    for i in range(sp.get_piece_size()):
        if sp.is_control(i) or sp.is_unknown(i):
            continue
        piece = sp.id_to_piece(i)
        lines.append(f"{piece} {counts.get(piece, 0)}")
    lines.append("<mask> 0")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def binarize(
    *,
    dictionary: Path,
    destdir: Path,
    trainpref: Path,
    validpref: Path,
    testpref: Path,
    source_lang: str | None = None,
    target_lang: str | None = None,
) -> Path:
    """``fairseq-preprocess`` with the one dictionary (in a subprocess, with the compat patches).

    With both languages: an MT data directory; with neither: a monolingual
    one (``train.bin`` ...) for the LM and MLM tasks.
    """
    from evolution.training import fairseq_cli

    args = [
        "--destdir",
        str(destdir),
        "--trainpref",
        str(trainpref),
        "--validpref",
        str(validpref),
        "--testpref",
        str(testpref),
        "--srcdict",
        str(dictionary),
        "--workers",
        "1",
    ]
    if source_lang:
        if not target_lang:
            raise ValueError(f"binarize: source_lang {source_lang!r} without target_lang; give both (MT) or neither")
        args += ["--source-lang", source_lang, "--target-lang", target_lang, "--tgtdict", str(dictionary)]
    else:
        args += ["--only-source"]
    fairseq_cli.run("preprocess", args, what=f"fairseq-preprocess for {destdir}")
    return destdir
