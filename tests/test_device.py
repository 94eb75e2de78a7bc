"""Where models run (``extract.device``, ``evolution.api.load(device=...)``).

The CPU / GPU comparison runs only where torch sees a CUDA device; elsewhere it is skipped
and says why. Its tolerance: hidden states, attention and Kobayashi norms agree to 1e-4
(absolute, on states of order 1) between the CPU and the GPU, the rounding of float32
kernels that sum in another order; the analyses' numbers then follow within their own
uncertainty."""

from __future__ import annotations

import numpy as np
import pytest

from evolution.models.device import resolve_device
from pipelines.cluster import gpu_workers

CUDA = resolve_device("auto").startswith("cuda")
TOLERANCE = 1e-4


def test_device_names_are_checked():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") in ("cpu", "cuda")
    with pytest.raises(ValueError, match="auto, cpu, cuda or cuda:N"):
        resolve_device("gpu")
    if not CUDA:
        with pytest.raises(ValueError, match="set device: cpu or auto"):
            resolve_device("cuda:0")


def test_the_config_refuses_a_bad_device(tmp_path, corpus_file, model_specs):
    from conftest import write_config
    from evolution.config import ConfigError, load_config

    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file, models=[model_specs["bert"]], workdir=tmp_path / "w")
    cfg.write_text(cfg.read_text().replace("extract:\n", "extract:\n  device: gpu0\n"))
    with pytest.raises(ConfigError, match="extract.device"):
        load_config(cfg)


@pytest.mark.parametrize("device, gpus, n_workers, expected", [
    ("auto", 4, None, ["0", "1", "2", "3"]),   # one worker per GPU
    ("cuda", 2, None, ["0", "1"]),
    ("cuda:1", 2, None, ["1"]),                # one worker, on GPU 1
    ("auto", 0, None, None),                   # no GPU: the CPU layout
    ("cpu", 4, None, None),
    ("auto", 4, 3, None),                      # cluster.n_workers set: the config decides
])
def test_one_local_worker_per_gpu(device, gpus, n_workers, expected):
    assert gpu_workers(device, gpus=gpus, n_workers=n_workers) == expected


@pytest.mark.skipif(not CUDA, reason="no CUDA device visible to torch on this machine (a CPU build or no GPU): "
                                     "the CPU / GPU comparison runs where one is present")
@pytest.mark.parametrize("name", ["bert", "translation", "language_modeling"])
def test_the_same_numbers_on_cpu_and_gpu(model_specs, name):
    from evolution.models import load_adapter

    spec = model_specs[name]
    cpu, gpu = load_adapter({**spec, "device": "cpu"}), load_adapter({**spec, "device": "cuda"})
    inputs = [cpu.build_input(cpu.tokenize(s).ids) for s in ("the cat sat on the mat", "a dog ran")]
    h_cpu, a_cpu, n_cpu = cpu.forward_norms(inputs)
    h_gpu, a_gpu, n_gpu = gpu.forward_norms(inputs)
    for t in range(len(inputs)):
        n = len(inputs[t])
        np.testing.assert_allclose(h_gpu[:, t, :n], h_cpu[:, t, :n], atol=TOLERANCE)
        np.testing.assert_allclose(a_gpu[:, t, :, :n, :n], a_cpu[:, t, :, :n, :n], atol=TOLERANCE)
    for k in n_cpu:
        np.testing.assert_allclose(np.nan_to_num(n_gpu[k]), np.nan_to_num(n_cpu[k]), atol=TOLERANCE)
