"""Text for examples and first tries, shipped with the package: the verses of Genesis from the
World English Bible (public domain; ``evolution/data/web-genesis.en.txt``, 1,533 verses, one a
line), the translation whose text the shipped models (``results/bible-full/models``) were
trained on."""

from __future__ import annotations

__all__ = ["example_sentences"]


def example_sentences(n: int = 300) -> list[str]:
    """The first ``n`` verses of Genesis (1 <= n <= 1,533), one string each.

    >>> import evolution.api as ev
    >>> ev.example_sentences(1)
    ['In the beginning, God created the heavens and the earth.']
    """
    from importlib.resources import files

    lines = files("evolution").joinpath("data", "web-genesis.en.txt").read_text(encoding="utf-8").splitlines()
    verses = [line.strip() for line in lines if line.strip()]
    if not 1 <= n <= len(verses):
        raise ValueError(f"example_sentences(n={n}): the shipped text has {len(verses)} verses; ask for 1 to that")
    return verses[:n]
