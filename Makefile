# Entry points of the course. Only Python (3.10+) and make are needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.gpucourse-installed
PORT   ?= 8888
NOTEBOOK_DIR ?= notebooks
# Jupyter refuses to run as root unless told; containers and cloud VMs often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
JOBS   ?= 2
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: lab test test-fast test-gpu doctor notebooks pins lint clean help

help:
	@echo "make lab        set up .venv if needed, open JupyterLab on notebooks/ (NOTEBOOK_DIR=. for the formgrader)"
	@echo "make test       set up .venv if needed, run the whole CPU suite"
	@echo "make test-fast  helper unit tests and hygiene only (seconds)"
	@echo "make test-gpu   on a CUDA machine: solutions under nbval with GPUCOURSE_REQUIRE_GPU=1, gpu tests, bench;"
	@echo "                report in test-artifacts/ (stops at once, saying why, where there is no usable GPU)"
	@echo "make doctor     the environment report (paste it into bug reports)"
	@echo "make notebooks  regenerate notebooks/ from solutions/ (nbgrader)"
	@echo "make pins       regenerate environment.yml and binder/ from pyproject.toml"

# Set-up: redone only when pyproject.toml changes (or .venv is missing).
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade --quiet pip
	$(BIN)/python -m pip install --quiet -e ".[course]"
	$(BIN)/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dali-tf"], sep="\n")' > $(VENV)/dali-tf.txt
	$(BIN)/python -m pip install --quiet --no-build-isolation -r $(VENV)/dali-tf.txt \
		|| echo "DALI's TensorFlow plugin did not build: lesson 05's TensorFlow cells will skip themselves."
	@touch $@

lab: $(STAMP)
	$(BIN)/jupyter lab --no-browser --ip=127.0.0.1 --port=$(PORT) --notebook-dir=$(NOTEBOOK_DIR) $(ROOT_FLAG)

test: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) -m "not gpu" --dist worksteal --durations=15 tests

test-fast: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) -m "not gpu and not slow" tests

# The GPU runner (tools/test_gpu.py). The quick CUDA check needs only the standard library, so a machine
# without a usable GPU stops here at once, before any set-up. Options: make test-gpu GPU_ARGS="04_mixed_precision"
test-gpu:
	@$(PYTHON) tools/test_gpu.py --preflight
	@$(MAKE) --no-print-directory $(STAMP)
	$(BIN)/python tools/test_gpu.py $(GPU_ARGS)

doctor: $(STAMP)
	@$(BIN)/python -m gpucourse doctor

notebooks: $(STAMP)
	$(BIN)/python tools/make_notebooks.py

pins: $(STAMP)
	$(BIN)/python tools/sync_pins.py

lint: $(STAMP)
	$(BIN)/ruff check utils tests tools

clean:
	rm -rf gradebook.db submitted autograded feedback .pytest_cache
