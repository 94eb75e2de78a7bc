"""t-SNE layouts of selected occurrences (Voita et al. 2019, figures 6-8; docs/metrics.md).

openTSNE (Policar et al.; Barnes-Hut gradients below 10,000 points, FFT above, its "auto"), PCA initialisation
(deterministic, preserves global structure) and a fixed seed and perplexity.
"""

from __future__ import annotations

import logging

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["tsne_layout"]


def tsne_layout(
    vectors: np.ndarray, *, perplexity: float = 30.0, seed: int = 0, n_jobs: int = 1, n_iter: int = 500
) -> np.ndarray:
    """2-D embedding (n, 2) of ``vectors`` (n, d).

    Perplexity is capped at (n - 1) / 3 (openTSNE needs 3 * perplexity
    neighbours); the cap is logged.
    """
    from openTSNE import TSNE

    x = np.ascontiguousarray(vectors, dtype=np.float64)
    n = len(x)
    if n < 4:
        raise ValueError(f"t-SNE needs at least 4 points, got {n}")
    cap = (n - 1) / 3
    if perplexity > cap:
        logger.info("t-SNE: perplexity %.1f capped to %.1f for %d points", perplexity, cap, n)
        perplexity = cap
    tsne = TSNE(
        perplexity=perplexity,
        initialization="pca",
        random_state=seed,
        n_jobs=n_jobs,
        negative_gradient_method="auto",
        n_iter=n_iter,
        verbose=False,
    )
    return np.asarray(tsne.fit(x), dtype=np.float32)
