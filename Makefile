# Two commands on a fresh clone: `make demo` and `make test`. Each creates the
# virtual environment first (Python >= 3.11 and the Google Cloud CLI with the
# Firestore and Pub/Sub emulators must be installed).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
TENSORFLOW := $(VENV)/.tensorflow
RAY := $(VENV)/.ray
XGBOOST := $(VENV)/.xgboost
JAX := $(VENV)/.jax
HF := $(VENV)/.hf
LIGHTNING := $(VENV)/.lightning

.PHONY: demo test test-fast docs lint tools tensorflow ray xgboost jax hf lightning bench bench-scale bench-econ soak soak-replay soak-deps clean

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[torch,dev,local,viz,prices]'
	touch $@

# TensorFlow (CPU) and Keras in .venv: the built-in Keras trainer, Keras
# scripts run as command jobs on the local stack (its VMs run this .venv's
# python), and the Keras tests, which skip loudly without it. About 600 MB.
tensorflow: $(TENSORFLOW)
$(TENSORFLOW): $(INSTALLED)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[tensorflow]'
	touch $@

# Ray (framework "ray": the launcher, the 2-node Ray tests), about 250 MB and
# 10 s to install from a warm cache; XGBoost's CPU build, about 20 MB.
ray: $(RAY)
$(RAY): $(INSTALLED)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[ray]'
	touch $@

xgboost: $(XGBOOST)
$(XGBOOST): $(INSTALLED)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[xgboost]'
	touch $@

# JAX on CPU (framework "jax": two processes joined by jax.distributed, the
# 2-node JAX tests), about 380 MB and a few seconds to install from a warm cache.
jax: $(JAX)
$(JAX): $(INSTALLED)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[jax]'
	touch $@

# Hugging Face transformers with accelerate (spotline.transformers, its tests
# and the docs' Trainer example), and Lightning with torchdata
# (spotline.lightning); both keep the torch pin of the torch extra.
hf: $(HF)
$(HF): $(INSTALLED)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[hf]'
	touch $@

lightning: $(LIGHTNING)
$(LIGHTNING): $(INSTALLED)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[lightning]'
	touch $@

demo: $(INSTALLED)
	$(BIN)/spotline demo

# The documentation site into site/ (the tests build it too, strictly);
# `$(BIN)/mkdocs serve` shows it while you edit.
docs: $(INSTALLED)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports --no-cache

# Packer validates the VM image template in the tests, and the dashboard's
# browser test drives Chromium (through Playwright, from the dev extra); install
# Debian's packages where they are missing (as root, as in CI), or say loudly
# that they are not.
tools:
	@command -v packer >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get install -y -qq packer; } >/dev/null 2>&1 || \
	  echo "!!! packer could not be installed: the image template will not be validated !!!"
	@command -v chromium >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get install -y -qq chromium; } >/dev/null 2>&1 || \
	  echo "!!! chromium could not be installed: the dashboard's browser test will be skipped !!!"

test: lint tools
	$(BIN)/pytest --durations=30

# The inner loop: tests/unit, the tests that need no emulator, no local stack,
# no ML framework run and no seconds of waiting (tests/conftest.py refuses one
# there that does), well under two minutes on a 2-core machine. The other kinds
# have their folders (tests/slow, frameworks, emulators, e2e) and markers;
# `make test` (CI) runs everything.
test-fast: $(INSTALLED)
	@start=$$(date +%s); \
	$(BIN)/pytest -q -p no:cacheprovider tests/unit; status=$$?; \
	echo "make test-fast: $$(( $$(date +%s) - start )) s"; exit $$status

# The big replay: many jobs, every message 1-5 times in shuffled order,
# a few seeds (override SOAK_JOBS / SOAK_SEEDS), and the crash suite at every
# crash point. Prints the events replayed and the crash points injected.
# Nothing depends on it; `make test` runs a small one of each.
SOAK_JOBS ?= 150
SOAK_SEEDS ?= 101,102,103
soak-replay: $(INSTALLED)
	SPOTLINE_REPLAY_JOBS=$(SOAK_JOBS) SPOTLINE_REPLAY_SEED=$(SOAK_SEEDS) SPOTLINE_CRASH_EVERY=1 \
	  $(BIN)/pytest -q -p no:cacheprovider tests/slow/test_replay.py tests/slow/test_replay_elastic.py \
	  tests/slow/test_crash_points.py

# Dependencies failing, at length: more jobs and seeds while Compute
# fails 90 % of its answers for 40 steps (deliveries dead-letter; the reaper
# finishes their work), emulators frozen past the clients' 30 s deadlines, and
# a Firestore restarted with its data. `make test` runs a short one of each.
DEPS_JOBS ?= 20
DEPS_SEEDS ?= 1,2,3
soak-deps: $(INSTALLED)
	SPOTLINE_DEPS_JOBS=$(DEPS_JOBS) SPOTLINE_DEPS_SEEDS=$(DEPS_SEEDS) SPOTLINE_DEPS_SHARE=0.9 \
	  SPOTLINE_DEPS_STEPS=40 SPOTLINE_DEPS_FREEZE_S=35 SPOTLINE_DEPS_RESTART=1 \
	  $(BIN)/pytest -q -p no:cacheprovider tests/slow/test_dependency_failures.py tests/emulators/test_emulator_outages.py

# The hostile-input fuzzer at length (not part of `make test`, which runs it
# briefly): SPOTLINE_FUZZ_EXAMPLES inputs per message kind.
FUZZ_EXAMPLES ?= 5000
soak: $(INSTALLED)
	SPOTLINE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -q -p no:cacheprovider tests/slow/test_fuzz_events.py

bench: $(INSTALLED)
	$(BIN)/python benchmarks/bench_skeleton.py

# Spot economics (docs/benchmarks.md: Spot economics): spotline's handlers on a
# virtual clock under seeded preemption traces, against on-demand, restart
# from scratch and a SkyPilot-like poller. ECON_ARGS: e.g. --trace FILE.
# Then multi-node gangs with Compute Engine's latencies (BENCHMARKS.md): full
# relaunch against replace-one and elastic (models) and the poller.
ECON_SEEDS ?= 3
ECON_ARGS ?=
bench-econ: $(INSTALLED)
	$(BIN)/python benchmarks/bench_econ.py --seeds $(ECON_SEEDS) $(ECON_ARGS)
	$(BIN)/python benchmarks/bench_gang_econ.py

# spotline at a team's scale, each benchmark on its own emulator (not
# part of `make test`; about 30 min on 2 shared cores, and the Spot economics
# about 25 more): cold starts, Firestore operations per job and their price, a
# burst of 500 submissions from 20 users, the reaper over 10,000 active and
# 100,000 terminal jobs. Each prints a table and merges its figures into
# benchmarks/results/scale-<date>.json (docs/benchmarks.md).
bench-scale: $(INSTALLED)
	$(BIN)/python benchmarks/bench_scale_coldstart.py
	$(BIN)/python benchmarks/bench_scale_ops.py
	$(BIN)/python benchmarks/bench_scale_throughput.py
	$(BIN)/python benchmarks/bench_scale_e2e_burst.py
	$(BIN)/python benchmarks/bench_scale_reaper.py
	$(BIN)/python benchmarks/bench_econ.py --seeds $(ECON_SEEDS) $(ECON_ARGS)

clean:
	rm -rf $(VENV) .spotline .pytest_cache .mypy_cache .ruff_cache build dist
