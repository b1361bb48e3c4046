# Entry points of the course. Only Python (3.11+) and make are needed.
.DEFAULT_GOAL := help  # a bare `make` prints the targets and changes nothing
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.gpucourse-installed
PORT   ?= 8888
NOTEBOOK_DIR ?= notebooks
# Jupyter refuses to run as root unless told; containers and cloud VMs often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# pytest workers, one per core of CI's 2 (a third measured the same whole-suite time there). More cores: JOBS=n.
JOBS   ?= 2
THREADS ?= 1
export PATH := $(abspath $(BIN)):$(PATH)

# Which pinned set (pyproject.toml), chosen by tools/choose_set.py: the one .venv holds (a .venv from before
# there were two sets holds the CPU set), else the GPU set (PyTorch, TensorFlow and DALI on CUDA 12) where
# `nvidia-smi` lists an NVIDIA GPU, else the CPU set. Only GPU=1 / GPU=0 switch an existing .venv's set, and
# switching rebuilds it from scratch. Diagnostic targets (help, doctor) never install or rebuild anything.
NVIDIA_SMI ?= nvidia-smi
SET_FILE := $(VENV)/.gpucourse-set
CHOICE := $(shell $(PYTHON) tools/choose_set.py choose '$(VENV)' '$(GPU)' '$(origin GPU)' '$(NVIDIA_SMI)')
ifeq ($(CHOICE),)
  $(error tools/choose_set.py, run by PYTHON=$(PYTHON), chose no set: the line above says why)
endif
SET := $(word 1,$(CHOICE))
WHY := $(wordlist 3,$(words $(CHOICE)),$(CHOICE))
ifeq ($(word 2,$(CHOICE)),switch)
  SWITCH := 1
  $(STAMP): FORCE
endif
ifeq ($(MAKELEVEL),0)
  # test-gpu in an existing environment (ENV=system, PYTHON=...) uses no set: nothing to say about one
  EXISTING_ENV := $(filter system,$(ENV))$(filter command line,$(origin PYTHON))
  ifneq ($(filter lab test test-fast colab-set notebooks book pins lint grade report $(STAMP) $(if $(EXISTING_ENV),,test-gpu),$(MAKECMDGOALS)),)
    $(info course environment: the $(SET) set ($(WHY))$(if $(SWITCH),; $(VENV) holds the $(if $(filter gpu,$(SET)),cpu,gpu) set and is rebuilt))
  endif
endif
# The CPU set takes PyTorch's CPU wheels on Linux where CPU_INDEX answers (PyPI's PyTorch is a CUDA build there,
# 4 GB more), else PyPI's; asked once, and only when the set-up runs.
CPU_INDEX ?= https://download.pytorch.org/whl/cpu
CPU_WHEELS = $(eval CPU_WHEELS := $(shell $(PYTHON) tools/choose_set.py probe '$(CPU_INDEX)'))$(CPU_WHEELS)
# Free space the set-up asks for before it installs (in GB; left out, what the set takes; 0: no check)
DISK_GB ?=
GPU_INDEX = $$($(BIN)/python -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["tool"]["gpucourse"]["gpu-index"])')

.PHONY: help lab doctor test test-fast colab-set notebooks release book pins lint grade report clean test-gpu gpu-kit wheelhouse FORCE

help:
	@echo "Targets (a bare make prints this and changes nothing):"
	@echo "  make lab           set up $(VENV) if needed, then open JupyterLab on $(NOTEBOOK_DIR)/"
	@echo "  make doctor        the environment report (paste it into bug reports); installs nothing"
	@echo "  make test          set up $(VENV) and $(COLAB_VENV) if needed, then run the whole CPU suite"
	@echo "  make test-fast     helper unit tests and hygiene only (seconds)"
	@echo "  make colab-set     build $(COLAB_VENV) (Colab's versions) and run the lessons' set-up cells there"
	@echo "  make notebooks     regenerate notebooks/ from solutions/ (nbgrader)"
	@echo "  make release       after bumping gpucourse.__version__: record it in utils/releases.json, point"
	@echo "                     every set-up cell at the tag v<version>, regenerate notebooks/ (CONTRIBUTING)"
	@echo "  make book          after make test: the reading edition, every lesson with the outputs of its"
	@echo "                     run, as a static site in test-artifacts/book/html (docs/book/)"
	@echo "  make pins          regenerate environment*.yml, binder/ and colab/ from pyproject.toml and"
	@echo "                     colab/pip-freeze.gpu.txt"
	@echo "  make lint          ruff: the helper, the tools and the tests, and the lessons' formatting"
	@echo "  make grade LESSON=NN_topic   collect and autograde a class, each kernel in the sandbox;"
	@echo "                     prints a table of scores (docs/instructors.md)"
	@echo "  make report LESSON=NN_topic  after grading: reports/NN_topic.html and reports/NN_topic.csv"
	@echo "  make clean         remove the grading outputs (gradebook.db, submitted/, autograded/, feedback/)"
	@echo "  make hub           as root: JupyterHub for a class on this machine, each user's server in $(VENV)"
	@echo "                     (docs/instructors.md): ROSTER=hub/roster.csv HUB_URL=http://127.0.0.1:8000"
	@echo "                     HUB_ROOT=/srv/gpucourse-hub HUB_AUTH=pam (Unix passwords) or HUB_AUTH=shared"
	@echo "  make test-gpu      on a machine with an NVIDIA GPU: every lesson on the GPU, its claims checked,"
	@echo "                     grading on the GPU; report in test-artifacts/ (docs/gpu-runner.md)"
	@echo "  make gpu-kit HAVE=freeze.txt  online: one folder (the project, the wheels a GPU machine without"
	@echo "                     internet lacks, gpu-kit.sh) and the one command to run there"
	@echo "  make wheelhouse WHEELHOUSE=dir  online: the wheels alone, for test-gpu ENV=system offline"
	@echo "Options, as VAR=value on the command line (with the values in use now):"
	@echo "  GPU=1 | GPU=0      the GPU set or the CPU set, rebuilding $(VENV) if it holds the other; left out,"
	@echo "                     the set $(VENV) holds, or where there is none, nvidia-smi's (now: the $(SET) set)"
	@echo "  NVIDIA_SMI=$(NVIDIA_SMI)  the nvidia-smi that decides when there is no $(VENV) yet"
	@echo "  CPU_INDEX=$(CPU_INDEX)"
	@echo "                     the CPU set on Linux: PyTorch's CPU wheels from there where it answers within"
	@echo "                     seconds, else PyPI's build (a CUDA build, 4 GB more)"
	@echo "  DISK_GB=n          the free space (GB) set-up asks for before installing (left out: what the"
	@echo "                     set takes, 5 to 10 GB, and 8 more for $(COLAB_VENV) with test; 0: no check)"
	@echo "  PYTHON=$(PYTHON)     the Python (3.11+) that makes $(VENV); with test-gpu or wheelhouse, the Python whose"
	@echo "                     environment (a CUDA PyTorch already there) the GPU suite runs in"
	@echo "  ENV=system         test-gpu or wheelhouse in python3's environment as found on PATH"
	@echo "  VENV=$(VENV)  COLAB_VENV=$(COLAB_VENV)  where the two environments live"
	@echo "  PORT=$(PORT)  NOTEBOOK_DIR=$(NOTEBOOK_DIR)  lab: its port and folder (NOTEBOOK_DIR=. for the formgrader)"
	@echo "  JOBS=$(JOBS)  THREADS=$(THREADS)  test: pytest workers, and threads per worker and per notebook kernel"
	@echo "  LESSON=NN_topic    grade, report: the lesson (a folder of solutions/)"
	@echo "  GRADE_JOBS=n       grade: submissions graded at once (default: one per core)"
	@echo "  UNSANDBOXED=1      grade: without the sandbox, for submissions you trust"
	@echo '  GPU_ARGS="..."     test-gpu: lessons and flags, e.g. GPU_ARGS="04_mixed_precision --require-all"'
	@echo '  BOOK_ARGS="..."    book: lessons and flags, e.g. BOOK_ARGS="01_verify_gpu --strict" (--help lists them)'
	@echo "  WHEELHOUSE=dir     wheelhouse: where the wheels go; test-gpu: install from there, offline"
	@echo "  HAVE=freeze.txt    gpu-kit, wheelhouse: the GPU machine's pip freeze (only what it lacks is fetched)"
	@echo "  KIT=$(KIT)        gpu-kit: the folder it makes"
	@echo "  PY=3.12  PLATFORM=manylinux_2_28_x86_64  gpu-kit, wheelhouse: the GPU machine's Python and"
	@echo "                     platform (left out: this machine's)"

# Set-up: redone when pyproject.toml changes, .venv is missing, or GPU= switches its set (then it starts afresh:
# pip cannot take out one CUDA major's libraries cleanly, they share file paths). Before anything is made, the
# check stops where the install could not finish: a Python older than 3.11 (the course's tools read TOML with
# tomllib), too little free disk. `make test` and `make colab-set` count $(COLAB_VENV) too.
LAB_OVERRIDES := tools/jupyterlab-overrides.json
$(STAMP): pyproject.toml tools/pyproject.toml $(LAB_OVERRIDES)
ifneq ($(SWITCH),)
	rm -rf $(VENV)
endif
	@if [ $(SET) = gpu ] && [ "$$(uname -s)" != Linux ]; then \
		echo "The GPU set is for Linux and WSL2 (TensorFlow has no GPU build for native Windows or macOS): use GPU=0."; exit 1; fi
	@$$(test -x $(BIN)/python && echo $(BIN)/python || echo $(PYTHON)) tools/choose_set.py check $(SET) $(VENV) \
		'$(if $(filter cpu,$(SET)),$(CPU_WHEELS))' '$(CPU_INDEX)' '$(DISK_GB)' $(if $(filter test colab-set,$(MAKECMDGOALS)),$(COLAB_VENV))
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo $(SET) > $(SET_FILE)
	$(BIN)/python -m pip install --upgrade --quiet pip
ifeq ($(SET),gpu)
	$(BIN)/python -m pip install --quiet --extra-index-url $(GPU_INDEX) -e ".[course,gpu]" \
		|| { echo "The GPU set did not install: PyTorch's CUDA 12 wheels come from $(GPU_INDEX), which must be reachable."; exit 1; }
else
	$(BIN)/python -m pip install --quiet $(if $(CPU_WHEELS),--extra-index-url $(CPU_WHEELS) )-e ".[course]"
endif
	$(BIN)/python -m pip install --quiet -e tools
	$(BIN)/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dali-tf"], sep="\n")' > $(VENV)/dali-tf.txt
	$(BIN)/python -m pip install --quiet --no-build-isolation -r $(VENV)/dali-tf.txt \
		|| echo "DALI's TensorFlow plugin did not build: lesson 05's TensorFlow cells will skip themselves."
	@# JupyterLab's defaults in this environment only (its overrides.d; the learner's own settings still win): no
	@# "get notified about official Jupyter news?" prompt at every first start, no news or update fetching.
	@mkdir -p $(VENV)/share/jupyter/lab/settings/overrides.d
	@cp $(LAB_OVERRIDES) $(VENV)/share/jupyter/lab/settings/overrides.d/gpucourse.json
	@touch $@

lab: $(STAMP)
	$(BIN)/jupyter lab --no-browser --ip=127.0.0.1 --port=$(PORT) --notebook-dir=$(NOTEBOOK_DIR) $(ROOT_FLAG)

# The Colab set (CONTRIBUTING): Colab's versions in $(COLAB_VENV), built when colab/requirements.txt changes (several
# GB, about 3 minutes the first time), gpucourse put there by the lessons' own set-up cells on a stand-in Colab, from
# this checkout's last commit. `make test` runs every lesson in it too (tests/lessons/test_colab_set.py).
COLAB_VENV ?= .venv-colab
colab-set: $(STAMP)
	$(BIN)/python -m coursetools.colab_set --venv $(COLAB_VENV)

# The JOBS workers run side by side: each (and each notebook kernel it starts) uses one
# thread, or PyTorch's default of one thread per core oversubscribes the machine (2-6x slower on 2 cores).
# The book's tests come last: they build the site from the lessons this run executed (no lesson run twice).
test: $(STAMP) colab-set
	GPUCOURSE_COLAB_VENV=$(abspath $(COLAB_VENV)) OMP_NUM_THREADS=$(THREADS) $(BIN)/python -m pytest -n $(JOBS) -m "not gpu" --dist worksteal --durations=15 --ignore=tests/lessons/test_book.py tests
	OMP_NUM_THREADS=$(THREADS) $(BIN)/python -m pytest -q -m "not gpu" --durations=5 tests/lessons/test_book.py

test-fast: $(STAMP)
	OMP_NUM_THREADS=$(THREADS) $(BIN)/python -m pytest -n $(JOBS) -m "not gpu and not slow" tests

# The GPU runner (tools/coursetools/gpurun/, docs/gpu-runner.md). The quick CUDA check needs only the standard library, so a machine
# without a usable GPU stops here at once, before any set-up. Options: make test-gpu GPU_ARGS="04_mixed_precision"
# ENV=system (python3) or PYTHON=/path/to/python on the command line: that Python's environment, which has a CUDA
# PyTorch (an NGC container, a cluster's module), found on PATH as it was before .venv/bin came first; --setup adds
# only what the suite lacks beside its PyTorch, never replacing it, from WHEELHOUSE=dir offline (`make wheelhouse`).
ifneq ($(filter system,$(ENV))$(filter command line,$(origin PYTHON)),)
  GPU_PY := $(or $(shell PATH='$(subst $(abspath $(BIN)):,,$(PATH))' command -v $(PYTHON)),$(PYTHON))
endif
test-gpu:
	@PYTHONPATH=tools $(or $(GPU_PY),$(PYTHON)) -m coursetools.gpurun --preflight
ifneq ($(GPU_PY),)
	PYTHONPATH=tools $(GPU_PY) -m coursetools.gpurun --setup $(if $(WHEELHOUSE),--wheelhouse $(WHEELHOUSE))
	PYTHONPATH=tools $(GPU_PY) -m coursetools.gpurun $(GPU_ARGS)
else ifneq ($(WHEELHOUSE),)
	@echo "WHEELHOUSE=$(WHEELHOUSE) holds no PyTorch: add ENV=system or PYTHON=/path/to/python (a Python with a CUDA PyTorch)"; exit 2
else
	@$(MAKE) --no-print-directory $(STAMP)
	$(BIN)/python -m coursetools.gpurun $(GPU_ARGS)
endif

# The wheels `make test-gpu ENV=system` adds (the suite's small packages, nbval's kernel stack, nbgrader without its
# user interface; no framework), binary only, for the GPU machine's Python and platform, less what HAVE (its
# `pip freeze`, or names one a line) lists: run online, then copy the folder there.
wheelhouse:
	@test -n "$(WHEELHOUSE)" || { echo "usage: make wheelhouse WHEELHOUSE=dir [PY=3.12] [PLATFORM=manylinux_2_28_x86_64] [HAVE=freeze.txt]"; exit 2; }
	PYTHONPATH=tools $(or $(GPU_PY),$(PYTHON)) -m coursetools.gpukit wheels $(WHEELHOUSE) $(if $(PY),--python-version $(PY)) $(if $(PLATFORM),--platform $(PLATFORM)) $(if $(HAVE),--have $(HAVE))

# The GPU kit: one folder to carry to a GPU machine without internet (the project, the wheels it lacks, gpu-kit.sh),
# at most 48 MiB for a machine with PyTorch and no Jupyter (docs/gpu-runner.md; tools/coursetools/gpukit/); it prints
# the one command to run.
KIT ?= gpu-kit
gpu-kit:
	@test -n "$(HAVE)" || { echo "usage: make gpu-kit HAVE=freeze.txt [KIT=dir] [PY=3.12] [PLATFORM=manylinux_2_28_x86_64]"; exit 2; }
	PYTHONPATH=tools $(or $(GPU_PY),$(PYTHON)) -m coursetools.gpukit kit $(KIT) --have $(HAVE) $(if $(PY),--python-version $(PY)) $(if $(PLATFORM),--platform $(PLATFORM))

# The doctor never installs: without $(VENV) it reports on $(PYTHON)'s own environment, saying so.
doctor:
ifneq ($(wildcard $(BIN)/python),)
	@$(BIN)/python -m gpucourse doctor
else
	@echo "No $(VENV) yet, so this reports on $(PYTHON) as it is; make lab sets up the course (the $(SET) set: $(WHY))."
	@PYTHONPATH=utils $(PYTHON) -m gpucourse doctor
endif

# The reading edition (coursetools.book, docs/book/): the lessons as `make test` ran them (it keeps each executed
# lesson in test-artifacts/executed/), with their outputs, as a static site; no lesson runs again here.
book: $(STAMP)
	$(BIN)/python -m coursetools.book $(BOOK_ARGS)

notebooks: $(STAMP)
	$(BIN)/python -m coursetools.notebooks

# The helper's release (coursetools.release): record the version, set-up cells install its tag.
release: $(STAMP)
	$(BIN)/python -m coursetools.release record
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -m coursetools.notebooks

pins: $(STAMP)
	$(BIN)/python -m coursetools.pins

# Grade a class (coursetools.grading): every submission of LESSON, each kernel sandboxed, as many at once as cores.
grade: $(STAMP)
	@test -n "$(LESSON)" || { echo "usage: make grade LESSON=NN_topic [GRADE_JOBS=n] [UNSANDBOXED=1]"; exit 2; }
	$(BIN)/python -m coursetools.grading $(LESSON) $(if $(GRADE_JOBS),--jobs $(GRADE_JOBS)) $(if $(UNSANDBOXED),--unsandboxed)

# The class report (coursetools.grading.report), after grading: reports/LESSON.html and reports/LESSON.csv.
report: $(STAMP)
	@test -n "$(LESSON)" || { echo "usage: make report LESSON=NN_topic"; exit 2; }
	$(BIN)/python -m coursetools.grading.report $(LESSON)

# The classroom on one server (coursetools.hub, docs/instructors.md): as root, JupyterHub with the roster's Unix
# accounts, every user's server in $(VENV), nbgrader's exchange, the instructor's course and the Formgrader.
.PHONY: hub
hub: $(STAMP)
	$(BIN)/python -m coursetools.hub --roster $(or $(ROSTER),hub/roster.csv) $(if $(HUB_URL),--url $(HUB_URL)) \
		$(if $(HUB_ROOT),--root $(HUB_ROOT)) $(if $(HUB_AUTH),--auth $(HUB_AUTH))

# The lessons' code too: ruff formats notebooks at pyproject's 100 columns (tests/course/test_hygiene.py checks it).
lint: $(STAMP)
	$(BIN)/ruff check utils tests tools
	$(BIN)/ruff format --check utils tests tools solutions/*/*.ipynb

clean:
	rm -rf gradebook.db submitted autograded feedback .pytest_cache
