# Two commands do all the set-up: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-unit test-fast test-vllm-omni lint format install clean doctor docs

install: $(STAMP)

# Reinstall only when the project's requirements change. torch is installed first and pinned so that
# pip takes the CPU build on disk instead of resolving a multi-GB CUDA build from the index.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[dev,ray]"
	touch $(STAMP)

run: install
	$(BIN)/omni-studio ui

# Two workers, a test file each at a time (a file's studio or engine is started once): the suite's tests spend most
# of their time waiting on the servers they start, so two of them share two cores well.
TEST_WORKERS ?= 2

test: install
	$(BIN)/ruff check studio tests scripts benchmarks
	$(BIN)/python -m pytest -ra -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The real vLLM-Omni server on this machine: its own venv (reused while its requirements are unchanged),
# then the studio's tests against it.
test-vllm-omni: install
	bash scripts/setup_vllm_omni_venv.sh
	OMNI_STUDIO_VLLM=$(CURDIR)/.venv-vllm-omni/bin/vllm OMNI_STUDIO_VLLM_STAGE=1 HF_HUB_OFFLINE=1 \
		$(BIN)/python -m pytest -ra tests/vllm_omni

# The quick ones alone (tests/unit/): in-process, no server, no browser.
test-unit: install
	$(BIN)/python -m pytest -ra -n $(TEST_WORKERS) --dist loadfile -m unit

test-fast: install
	$(BIN)/python -m pytest -ra -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not browser"

lint: install
	$(BIN)/ruff check studio tests scripts benchmarks
	$(BIN)/ruff format --check studio tests scripts benchmarks

format: install
	$(BIN)/ruff format studio tests scripts benchmarks
	$(BIN)/ruff check --fix studio tests scripts benchmarks

doctor: install
	$(BIN)/omni-studio doctor

# The docs site (mkdocs-material) into site/; --strict: a broken link or a page left out of the nav fails it.
docs: install
	$(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) .venv-vllm-omni outputs .pytest_cache
