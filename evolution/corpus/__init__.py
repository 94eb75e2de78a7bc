"""Corpus sources: the sentences that models are trained on and analysed with."""

from evolution.corpus.text import Corpus, CorpusError, read_text_corpus

__all__ = ["Corpus", "CorpusError", "read_text_corpus"]
