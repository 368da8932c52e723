# gpuwaste: `make demo` runs the product on its bundled sample, `make test` runs the checks.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PORT   ?= 8501
SUDO   := $(shell [ "$$(id -u)" = "0" ] || echo sudo)

.PHONY: demo test lint typecheck pytest system-deps venv venv-run fuzz bench sample clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The package alone, for `make demo` (what an operator installs); the dev extra (pytest, mypy,
# playwright, pyspark, ...: about 1.9 GB) only for the checks. The dev install holds the runtime
# one, so it stamps both.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed-run

venv-run: $(VENV)/.installed-run

venv: $(VENV)/.installed

# Debian's prometheus (with promtool), chromium, openssl (the notify tests' TLS certificate) and
# OpenJDK 17 (Spark), for the real-component tests.
system-deps:
	@missing=""; \
	command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v promtool   >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v chromium   >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v openssl    >/dev/null 2>&1 || missing="$$missing openssl"; \
	command -v java       >/dev/null 2>&1 || missing="$$missing openjdk-17-jre-headless"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$(echo $$missing | tr ' ' '\n' | sort -u); \
	fi

demo: venv-run
	PORT=$(PORT) $(BIN)/gpuwaste demo --port $(PORT)

lint: venv
	$(BIN)/ruff check gpuwaste tests bench

typecheck: venv
	$(BIN)/mypy

# Everything, slow tests included (CI runs this); a quick run is plain `.venv/bin/pytest`.
pytest: venv system-deps
	$(BIN)/pytest -q -m 'slow or not slow'

test: venv system-deps lint typecheck pytest

fuzz: venv
	GPUWASTE_FUZZ_EXAMPLES=200000 $(BIN)/pytest -q tests/reliability -k fuzz

# The headline benchmark: `gpuwaste analyze` of 41 M generated samples against one bare DuckDB
# pass (generated once into /tmp/gpuwaste-bench). Every script of bench/ also runs alone
# (`.venv/bin/python bench/NAME.py --help`); figures and machines: bench/RESULTS.md. Each run's
# own peak needs GNU time (Debian's `time`); without it a peak is the largest of the runs so far.
bench: venv
	$(BIN)/python bench/analyze.py --skip-pandas --repeat 3

# Regenerate the bundled sample (deterministic: the same files byte for byte).
sample: venv-run
	rm -rf sample_data/demo
	$(BIN)/gpuwaste generate --out sample_data/demo --seed 7 --gpus 32 --days 1 --gzip

clean:
	rm -rf $(VENV) gpuwaste-data test-output .pytest_cache .mypy_cache .ruff_cache
