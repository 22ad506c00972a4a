# Two entry points: `make run` (the main job) and `make test` (the test suite).
# Both create .venv on first use. torch is installed first, pinned to the 2.13.0 CPU build, so
# that no resolver ever pulls a CUDA build of several GB.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run demo test test-fast bench clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (Python 3.11) on PATH, or run: make PYTHON=python3 ..."; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install "torch==2.13.0"
	$(BIN)/pip install -e ".[all,test]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/steptp release --params params.yaml --out releases

demo: $(STAMP)
	$(BIN)/steptp demo

# Two test processes (pytest-xdist), a file each at a time: much of the suite waits on TVM
# workers, flow subprocesses and servers, so two processes on 2 cores take about 13 minutes
# where one takes about 22. TEST_JOBS=1 runs them in this process.
TEST_JOBS ?= 2
TEST_ARGS := $(if $(filter 1,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile)

test: $(STAMP)
	$(BIN)/pytest -q $(TEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/pytest -q $(TEST_ARGS) -m "not slow"

bench: $(STAMP)
	$(BIN)/python benchmarks/token_efficiency.py

clean:
	rm -rf $(VENV) out .pytest_cache
