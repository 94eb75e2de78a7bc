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


@pytest.mark.parametrize(
    "device, gpus, n_workers, expected",
    [
        ("auto", 4, None, ["0", "1", "2", "3"]),  # one worker per GPU
        ("cuda", 2, None, ["0", "1"]),
        ("cuda:1", 2, None, ["1"]),  # one worker, on GPU 1
        ("auto", 0, None, None),  # no GPU: the CPU layout
        ("cpu", 4, None, None),
        ("auto", 4, 3, None),  # cluster.n_workers set: the config decides
    ],
)
def test_one_local_worker_per_gpu(device, gpus, n_workers, expected):
    assert gpu_workers(device, gpus=gpus, n_workers=n_workers) == expected


@pytest.mark.skipif(
    not CUDA,
    reason="no CUDA device visible to torch on this machine (a CPU build or no GPU): "
    "the CPU / GPU comparison runs where one is present",
)
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


# --- the metrics' products (metrics.device, evolution.metrics.backend) -------------------------------------------


def _metric_numbers(device: str) -> dict:
    """The dense-arithmetic results of the analyses on fixed random data, computed on ``device``:
    views (thin SVD), a pair's PWCCA / CKA, the similarity bootstrap's replicates of one model's
    change by subset, k-means and exact nearest neighbours."""
    from evolution.metrics import backend
    from evolution.metrics.mi import mutual_information
    from evolution.metrics.resample import sentence_draws
    from evolution.metrics.search import kmeans, nearest
    from evolution.metrics.similarity import View, pair_similarity
    from evolution.metrics.similarity_bootstrap import change_with_replicates

    rng = np.random.default_rng(0)
    group = np.repeat(np.arange(120), rng.integers(10, 40, 120))
    n, d = len(group), 24
    x = rng.normal(size=(n, d)) * np.logspace(0, -4, d)
    states = [x, np.tanh(x @ rng.normal(size=(d, d))) + 0.1 * rng.normal(size=(n, d))]
    masks = {"half": rng.random(n) < 0.5, "all": np.ones(n, bool)}
    centres = rng.normal(size=(30, 8)) * 6
    labels = rng.integers(0, 30, 4000)
    points = (centres[labels] + rng.normal(size=(4000, 8))).astype(np.float32)
    with backend.use(device):
        pair = pair_similarity(View(states[0]), View(states[1]))
        change = change_with_replicates(
            states,
            masks,
            group=group,
            draws=sentence_draws(120, replicates=5, seed=1),
            methods=["pwcca", "cka"],
            epsilon=1e-6,
            min_ratio=10,
            name="x",
        )
        clusters = kmeans(points, k=30, niter=20, seed=2)
        dist, idx = nearest(points, points[:300], 5)
    return {
        "pair": np.array(pair),
        "change": np.asarray(change["replicates"]["pwcca"]),
        "change_cka": np.asarray(change["replicates"]["cka"]),
        "mi": mutual_information(labels, clusters),
        "dist": dist,
        "idx": idx,
        "h": mutual_information(labels, labels),
    }


def _assert_close(got: dict, want: dict) -> None:
    """Float64 products to 1e-9; k-means: the same MI within 1% (another implementation of the
    same Lloyd iterations from the same seeds); neighbours: the same distances to float32 rounding."""
    for key in ("pair", "change", "change_cka"):
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-9, err_msg=key)
    assert abs(got["mi"] - want["mi"]) <= 0.01 * want["h"]
    np.testing.assert_allclose(got["dist"], want["dist"], rtol=1e-4, atol=1e-3)
    assert (got["idx"][:, 0] == want["idx"][:, 0]).mean() > 0.99


def test_the_metrics_torch_route_equals_numpy_on_the_cpu():
    """The torch code path (what runs on a GPU) on the CPU: the same numbers as NumPy's."""
    _assert_close(_metric_numbers("torch:cpu"), _metric_numbers("cpu"))


@pytest.mark.skipif(
    not CUDA,
    reason="no CUDA device visible to torch on this machine (a CPU build or no GPU): "
    "the CPU / GPU comparison runs where one is present",
)
def test_the_metrics_on_the_gpu_equal_the_cpu():
    _assert_close(_metric_numbers("cuda"), _metric_numbers("cpu"))


def test_a_metrics_device_that_is_not_there_is_refused(tmp_path, corpus_file, model_specs):
    from conftest import write_config

    from evolution.config import ConfigError, load_config

    cfg = write_config(tmp_path / "c.yaml", corpus=corpus_file, models=[model_specs["bert"]], workdir=tmp_path / "w")
    text = cfg.read_text()
    cfg.write_text(
        text.replace("metrics:\n", "metrics:\n  device: gpu\n", 1)
        if "metrics:\n" in text
        else text + "metrics:\n  device: gpu\n"
    )
    with pytest.raises(ConfigError, match="metrics.device"):
        load_config(cfg)
