"""The ``corpus`` stage: read, filter and split the corpus into ``<workdir>/corpus/<key>/``
(the layout: :mod:`evolution.corpus.layout`), all-or-nothing."""

from __future__ import annotations

import logging
from pathlib import Path

from evolution.atomic import replace_dir
from evolution.config import resolved_dict
from evolution.corpus import Corpus
from evolution.corpus import layout as corpus_layout
from evolution.provenance import config_hash, file_hash, tree_hash
from pipelines.stages.base import Context, Stage

logger = logging.getLogger(__name__)

__all__ = ["CorpusStage"]


class CorpusStage(Stage):
    """Read the corpus; for a parallel one also filter it and split it by whole groups.
    The directory is written under a temporary name and renamed into place."""

    name = "corpus"

    #: Corpus fields that choose what is *analysed*; training data does not depend on them.
    ANALYSIS_FIELDS = ("analyse", "max_sentences", "annotated", "annotated_sentences")

    def _inputs(self, ctx: Context) -> dict:
        c = ctx.config.corpus
        if c.source == "bible":
            from evolution.corpus.sword import module_files

            return {m: tree_hash(module_files(c.sword_root, m)) for m in c.modules}
        return {f: file_hash(getattr(c, f)) for f in ("path", "target_path") if getattr(c, f) is not None}

    def _annotated_inputs(self, ctx: Context) -> dict:
        from evolution.corpus.conllu import resolve_treebank

        a = ctx.config.corpus.annotated
        return {} if a is None else {"annotated": file_hash(resolve_treebank(a))}

    #: the corpus section's fields that name files: their content is in the key, where they are is not
    #: (a clone of the project elsewhere, or another machine, finds the same keys)
    LOCATIONS = ("sword_root", "path", "target_path", "annotated")

    def _section(self, ctx: Context, fields=None) -> dict:
        section = resolved_dict(ctx.config.corpus)
        if fields is not None:
            section = {k: v for k, v in section.items() if k in fields}
        return {k: (None if k in self.LOCATIONS and v is not None else v) for k, v in section.items()}

    def key(self, ctx: Context) -> str:
        def compute():
            return config_hash(
                {
                    "corpus": self._section(ctx),
                    "inputs": {**self._inputs(ctx), **self._annotated_inputs(ctx)},
                    "seed": ctx.config.seed,
                }
            )

        return ctx.memo("corpus.key", compute)

    def training_key(self, ctx: Context) -> str:
        """Hash of what the training text depends on (not of what is analysed), so that
        analysing another split or adding annotated text reuses the trained models."""

        def compute():
            fields = [k for k in resolved_dict(ctx.config.corpus) if k not in self.ANALYSIS_FIELDS]
            return config_hash(
                {"corpus": self._section(ctx, fields), "inputs": self._inputs(ctx), "seed": ctx.config.seed}
            )

        return ctx.memo("corpus.training_key", compute)

    def directory(self, ctx: Context) -> Path:
        return ctx.corpus_directory or ctx.workdir / "corpus" / self.key(ctx)

    def pending(self, ctx: Context) -> list[str]:
        if corpus_layout.is_done(self.directory(ctx)) and self.name not in ctx.force:
            return []
        c = ctx.config.corpus
        what = {"text": c.path, "parallel": c.path, "bible": f"{c.sword_root} {'+'.join(c.modules)}"}[c.source]
        return [f"corpus: read {what} -> {self.directory(ctx)}"]

    def run(self, ctx: Context) -> None:
        final = self.directory(ctx)
        if not self.pending(ctx):
            logger.info("corpus: cached at %s", final)
            return
        # read (and fail on bad input) before anything is written
        source = corpus_layout.read_source(ctx.config.corpus, seed=ctx.config.seed, inputs=self._inputs(ctx))
        with replace_dir(final) as tmp:
            tmp.mkdir()
            n = corpus_layout.write(tmp, source, key=self.key(ctx))
        logger.info("corpus: %d sentences to analyse -> %s", n, final)

    def load(self, ctx: Context) -> Corpus:
        return corpus_layout.load(self.directory(ctx))

    def annotation(self, ctx: Context) -> dict | None:
        """The corpus directory's annotation (None without ``corpus.annotated``)."""
        return corpus_layout.load_annotation(self.directory(ctx))
