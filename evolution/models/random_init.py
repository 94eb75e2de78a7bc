"""Small randomly initialised models of every supported family, built locally.

For tests, benchmarks and the smoke run: no hub, no download. Each builder
writes a directory that the matching adapter loads exactly as it loads a
trained model, from a seed, so the same call gives the same weights.

* :func:`make_hf_model` writes a Hugging Face directory (``bert``, ``gpt2``,
  ``marian`` or ``t5``) with a word-level tokenizer over ``words``.
* :func:`make_fairseq_model` writes a fairseq data directory (dictionary) and
  a checkpoint of the ``translation``, ``language_modeling`` or ``masked_lm``
  task, in the format ``fairseq-train`` saves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Literal

from evolution.nets.compat import import_fairseq, lm_dim_args, quiet

__all__ = ["make_hf_model", "make_fairseq_model", "vocabulary_of"]

HFArch = Literal["bert", "gpt2", "marian", "t5"]
FairseqTask = Literal["translation", "language_modeling", "masked_lm"]


def vocabulary_of(sentences: Iterable[str], *, max_size: int | None = None) -> list[str]:
    """Whitespace tokens by descending count (ties alphabetical), at most ``max_size``."""
    from collections import Counter

    counts = Counter(w for s in sentences for w in s.split())
    words = sorted(counts, key=lambda w: (-counts[w], w))
    return words[:max_size] if max_size else words


#: every family's special tokens, in the order :func:`_hf_tokenizer` reserves them with ``shared_ids``
SPECIALS = {"bert": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "gpt2": ["<pad>", "<unk>", "<|endoftext|>"],
            "marian": ["<pad>", "<unk>", "</s>"], "t5": ["<pad>", "<unk>", "</s>"]}


def _hf_tokenizer(words: list[str], arch: HFArch, *, shared_ids: bool = False):
    """A word-level tokenizer over ``words`` after ``arch``'s special tokens; with ``shared_ids``
    the ids of every family's specials are reserved first, so that a word has the same id in the
    tokenizers of every family (models of two families then tokenise a text into the same ids)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = SPECIALS[arch]
    reserved = list(dict.fromkeys(t for f in SPECIALS.values() for t in f)) if shared_ids else specials
    vocab = {tok: i for i, tok in enumerate(reserved + [w for w in words if w not in reserved])}
    # with shared ids every family pads and marks unknown words as BERT does, so that an unknown
    # word has one id in all of them
    pad, unk = (SPECIALS["bert"][0], SPECIALS["bert"][1]) if shared_ids else (specials[0], specials[1])
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    kwargs = {"pad_token": pad, "unk_token": unk}
    if arch == "bert":
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
        kwargs.update(cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    elif arch in ("marian", "t5"):
        tok.post_processor = processors.TemplateProcessing(
            single="$A </s>", special_tokens=[("</s>", vocab["</s>"])])
        kwargs.update(eos_token="</s>")
    else:
        kwargs.update(eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=512, **kwargs), vocab


def make_hf_model(directory: str | Path, *, arch: HFArch, words: list[str], layers: int = 2,
                  d_model: int = 32, heads: int = 4, ffn: int | None = None, max_positions: int = 128,
                  seed: int = 0) -> Path:
    """Write a randomly initialised Hugging Face model and its tokenizer to ``directory``."""
    import torch
    import transformers as tf

    directory = Path(directory)
    tokenizer, vocab = _hf_tokenizer(words, arch)
    ffn = ffn or 4 * d_model
    n = len(vocab)
    pad = vocab[tokenizer.pad_token]
    if arch == "bert":
        config = tf.BertConfig(vocab_size=n, hidden_size=d_model, num_hidden_layers=layers,
                               num_attention_heads=heads, intermediate_size=ffn,
                               max_position_embeddings=max_positions, pad_token_id=pad)
        cls = tf.BertModel
    elif arch == "gpt2":
        config = tf.GPT2Config(vocab_size=n, n_embd=d_model, n_layer=layers, n_head=heads, n_inner=ffn,
                               n_positions=max_positions, pad_token_id=pad,
                               bos_token_id=vocab["<|endoftext|>"], eos_token_id=vocab["<|endoftext|>"])
        cls = tf.GPT2Model
    elif arch == "marian":
        config = tf.MarianConfig(vocab_size=n, d_model=d_model, encoder_layers=layers, decoder_layers=1,
                                 encoder_attention_heads=heads, decoder_attention_heads=heads,
                                 encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, max_position_embeddings=max_positions,
                                 pad_token_id=pad, eos_token_id=vocab["</s>"], decoder_start_token_id=pad)
        cls = tf.MarianModel
    elif arch == "t5":
        config = tf.T5Config(vocab_size=n, d_model=d_model, d_kv=d_model // heads, d_ff=ffn, num_layers=layers,
                             num_decoder_layers=1, num_heads=heads, pad_token_id=pad, eos_token_id=vocab["</s>"],
                             decoder_start_token_id=pad)
        cls = tf.T5Model
    else:
        raise ValueError(f"unknown arch {arch!r}; use bert, gpt2, marian or t5")
    torch.manual_seed(seed)
    model = cls(config).eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _write_dict(path: Path, words: list[str]) -> None:
    # fairseq dictionaries list "symbol count"; counts only order them.
    path.write_text("".join(f"{w} {1000 + len(words) - i}\n" for i, w in enumerate(words)), encoding="utf-8")


def make_fairseq_model(directory: str | Path, *, task: FairseqTask, words: list[str], layers: int = 2,
                       d_model: int = 32, heads: int = 4, ffn: int | None = None, max_positions: int = 128,
                       seed: int = 0) -> tuple[Path, Path]:
    """Write ``directory/data/dict*.txt`` and ``directory/checkpoint.pt``.

    Returns ``(checkpoint, data_dir)``. The checkpoint holds the config and
    weights as ``fairseq-train`` saves them and loads with
    ``fairseq.checkpoint_utils``.
    """
    import_fairseq()
    import torch
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    directory = Path(directory)
    data = directory / "data"
    data.mkdir(parents=True, exist_ok=True)
    ffn = ffn or 4 * d_model
    words = [w for w in words if w not in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")]
    if task == "translation":
        _write_dict(data / "dict.src.txt", words)
        _write_dict(data / "dict.tgt.txt", words)
        argv = ["--task", "translation", "--arch", "transformer", "--source-lang", "src", "--target-lang", "tgt",
                "--encoder-layers", str(layers), "--decoder-layers", "1", "--encoder-embed-dim", str(d_model),
                "--decoder-embed-dim", str(d_model), "--encoder-attention-heads", str(heads),
                "--decoder-attention-heads", str(heads), "--encoder-ffn-embed-dim", str(ffn),
                "--decoder-ffn-embed-dim", str(ffn), "--max-source-positions", str(max_positions),
                "--max-target-positions", str(max_positions)]
    elif task == "language_modeling":
        _write_dict(data / "dict.txt", words)
        argv = ["--task", "language_modeling", "--arch", "transformer_lm", "--decoder-layers", str(layers),
                *lm_dim_args(d_model), "--decoder-attention-heads", str(heads),
                "--decoder-ffn-embed-dim", str(ffn), "--tokens-per-sample", str(max_positions),
                "--max-target-positions", str(max_positions)]
    elif task == "masked_lm":
        _write_dict(data / "dict.txt", words)
        argv = ["--task", "masked_lm", "--arch", "roberta_base", "--encoder-layers", str(layers),
                "--encoder-embed-dim", str(d_model), "--encoder-attention-heads", str(heads),
                "--encoder-ffn-embed-dim", str(ffn), "--tokens-per-sample", str(max_positions),
                "--max-positions", str(max_positions)]
    else:
        raise ValueError(f"unknown task {task!r}; use translation, language_modeling or masked_lm")
    with quiet():
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(parser, input_args=[str(data), *argv, "--seed", str(seed)])
        cfg = convert_namespace_to_omegaconf(args)
        fs_task = tasks.setup_task(cfg.task)
    torch.manual_seed(seed)
    model = fs_task.build_model(cfg.model)
    state = {
        "cfg": cfg,
        "args": None,
        "model": model.state_dict(),
        "criterion": None,
        "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "FairseqAdam",
                               "lr_scheduler_state": {}, "num_updates": 0}],
        "task_state": {},
        "extra_state": {"epoch": 1},
        "last_optimizer_state": None,
    }
    checkpoint = directory / "checkpoint.pt"
    torch.save(state, checkpoint)
    return checkpoint, data


def main(argv: list[str] | None = None) -> int:
    """``python -m evolution.models.random_init OUT --corpus FILE``: write the three
    fairseq objectives (``mt``, ``lm``, ``mlm``) as randomly initialised models
    with one shared whitespace vocabulary, under ``OUT/<objective>/``."""
    import argparse

    from evolution.corpus import read_text_corpus

    p = argparse.ArgumentParser(prog="python -m evolution.models.random_init", description=main.__doc__)
    p.add_argument("out")
    p.add_argument("--corpus", required=True, help="one sentence per line; its words form the vocabulary")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--max-positions", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    words = vocabulary_of(read_text_corpus(args.corpus).sentences, max_size=args.vocab_size)
    for objective, task in (("mt", "translation"), ("lm", "language_modeling"), ("mlm", "masked_lm")):
        ckpt, data = make_fairseq_model(Path(args.out) / objective, task=task, words=words, layers=args.layers,
                                        d_model=args.d_model, heads=args.heads, max_positions=args.max_positions,
                                        seed=args.seed)
        print(f"{objective}: {ckpt} (dictionary in {data})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
