"""Each fairseq workaround in evolution.nets.compat, against the failure it prevents."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest
import torch

from evolution.nets import compat


def test_numpy_compat_long_is_restored_and_fairseq_dataset_uses_it():
    compat.patch_numpy_compat()
    assert np.compat.long is int
    from fairseq.data import TokenBlockDataset

    class Items(torch.utils.data.Dataset):
        data = [torch.tensor([4, 5, 2]), torch.tensor([6, 2])]

        def __getitem__(self, i):
            return self.data[i]

        def __len__(self):
            return 2

    # the code path that calls np.compat.long (break_mode "eos" with include_targets)
    ds = TokenBlockDataset(Items(), sizes=[3, 2], block_size=8, pad=1, eos=2, break_mode="eos", include_targets=True)
    source, item, _ = ds[0]
    assert item.tolist() == [4, 5, 2]
    assert source.tolist() == [2, 4, 5]  # </s> as beginning of sentence, as the LM adapter feeds it


def test_trusted_checkpoints_loads_a_pickled_config(tmp_path):
    from omegaconf import OmegaConf

    path = tmp_path / "ckpt.pt"
    torch.save({"cfg": OmegaConf.create({"task": {"_name": "x"}})}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)  # weights_only=True by default refuses OmegaConf objects
    with compat.trusted_checkpoints():
        state = torch.load(path)
    assert state["cfg"].task._name == "x"
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)  # and the default is back after the block


def test_head_weights_average_to_fairsqs_averaged_weights():
    from fairseq.modules.multihead_attention import MultiheadAttention

    torch.manual_seed(0)
    mha = MultiheadAttention(16, 4, self_attention=True).eval()
    x = torch.randn(5, 2, 16)
    with torch.no_grad():
        _, averaged = mha(x, x, x, need_weights=True)  # fused path: head-averaged (B, T, T)
        _, fused_heads = mha(x, x, x, need_weights=True, need_head_weights=True)
        assert fused_heads.shape == (2, 5, 5)  # the trap: per-head request silently averaged
        assert compat.enable_head_weights(mha) == 1
        with compat.capture_attention([mha]) as captured:
            mha(query=x, key=x, value=x, need_weights=False)
    (heads,) = captured
    assert heads.shape == (2, 4, 5, 5)
    torch.testing.assert_close(heads.mean(1), averaged, atol=1e-6, rtol=1e-5)


def test_lm_dim_args_and_exact_batching(tmp_path):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    (tmp_path / "dict.txt").write_text("a 5\nb 4\n")

    def build(extra):
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(
            parser,
            input_args=[
                str(tmp_path),
                "--task",
                "language_modeling",
                "--arch",
                "transformer_lm",
                "--decoder-layers",
                "1",
                "--decoder-attention-heads",
                "2",
                "--decoder-ffn-embed-dim",
                "64",
                *extra,
            ],
        )
        with compat.quiet():
            cfg = convert_namespace_to_omegaconf(args)
            return args, tasks.setup_task(cfg.task).build_model(cfg.model)

    _, trap = build(["--decoder-embed-dim", "32"])
    assert trap.decoder.embed_tokens.embedding_dim == 512  # the silent 512-dim input
    args, model = build([*compat.lm_dim_args(32), *compat.exact_batching_args()])
    assert model.decoder.embed_tokens.embedding_dim == 32
    assert model.decoder.output_projection.weight.shape[1] == 32
    assert args.required_batch_size_multiple == 1


def test_import_fairseq_leaves_the_root_logger_alone():
    # fairseq calls logging.basicConfig(level=INFO/DEBUG) at import; in a fresh process (as a
    # Dask worker is) that would print every library's DEBUG records. Run in a subprocess so
    # that fairseq is not yet imported.
    import subprocess
    import sys

    code = (
        "import logging; from evolution.nets import compat; compat.import_fairseq(); "
        "root = logging.getLogger(); print(len(root.handlers), root.level)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", str(logging.WARNING)]
    # and the failure it prevents is real: a plain import adds a handler
    raw = subprocess.run(
        [
            sys.executable,
            "-c",
            "import logging, numpy; numpy.compat = type(numpy)('c'); "
            "numpy.compat.long = int; import fairseq; print(len(logging.getLogger().handlers))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(raw.stdout.split()[-1]) >= 1
