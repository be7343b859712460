# Two commands on a fresh clone: `make demo` and `make test`. Each creates the
# virtual environment first (Python >= 3.11 and the Google Cloud CLI with the
# Firestore and Pub/Sub emulators must be installed).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
TENSORFLOW := $(VENV)/.tensorflow

.PHONY: demo test lint tools tensorflow bench soak soak-replay clean

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[torch,dev,local,viz]'
	touch $@

# TensorFlow (CPU) and Keras in .venv: the built-in Keras trainer, Keras
# scripts run as command jobs on the local stack (its VMs run this .venv's
# python), and the Keras tests, which skip loudly without it. About 600 MB.
tensorflow: $(TENSORFLOW)
$(TENSORFLOW): $(INSTALLED)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[tensorflow]'
	touch $@

demo: $(INSTALLED)
	$(BIN)/spotline demo

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports --no-cache

# Packer validates the VM image template in the tests; install Debian's
# package where it is missing (as root, as in CI), or say loudly that it is not.
tools:
	@command -v packer >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get install -y -qq packer; } >/dev/null 2>&1 || \
	  echo "!!! packer could not be installed: the image template will not be validated !!!"

test: lint tools
	$(BIN)/pytest

# Issue 10's big replay: many jobs, every message 1-5 times in shuffled order,
# a few seeds (override SOAK_JOBS / SOAK_SEEDS), and the crash suite at every
# crash point. Prints the events replayed and the crash points injected.
# Nothing depends on it; `make test` runs a small one of each.
SOAK_JOBS ?= 150
SOAK_SEEDS ?= 101,102,103
soak-replay: $(INSTALLED)
	SPOTLINE_REPLAY_JOBS=$(SOAK_JOBS) SPOTLINE_REPLAY_SEED=$(SOAK_SEEDS) SPOTLINE_CRASH_EVERY=1 \
	  $(BIN)/pytest -q -p no:cacheprovider tests/test_replay.py tests/test_crash_points.py

# The hostile-input fuzzer at length (not part of `make test`, which runs it
# briefly): SPOTLINE_FUZZ_EXAMPLES inputs per message kind.
FUZZ_EXAMPLES ?= 5000
soak: $(INSTALLED)
	SPOTLINE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -q -p no:cacheprovider tests/test_fuzz_events.py

bench: $(INSTALLED)
	$(BIN)/python benchmarks/bench_skeleton.py

clean:
	rm -rf $(VENV) .spotline .pytest_cache .mypy_cache .ruff_cache
