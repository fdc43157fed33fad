# One-command entry points. CI calls `make test` unchanged (see .ci/run).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
WHEELS := $(VENV)/wheelhouse
PORT   ?= 8001
DATA   ?= .gpufleet
LOG_LEVEL ?= warning

.PHONY: up test lint venv torch wheelhouse agent-wheel postgres system-packages clean screenshots

venv: $(STAMP)

# uv installs the project and its dev extras: 6 s where pip took 45 s in a fresh clone, a
# minute of `make test`'s ten (#32). The virtualenv keeps its pip (tests/install builds and
# installs our wheel with it, as a user's `pip install` would).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip 'uv>=0.5'
	$(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev]'
	touch $(STAMP)

# PyTorch's CPU build for the example's `--ddp` tests (tests/multinode: gloo across network
# namespaces, #35), from the wheel on this machine's disk: never from an index, and not a
# runtime or dev dependency of the package. Its few small dependencies come from uv's cache,
# as does the `multinode` extra (Accelerate, whose launcher starts a SimpleTuner config on a
# gang: tests/e2e/test_worker_gang.py), installed with it so that its PyTorch is
# this wheel.
TORCH_VERSION := 2.13.0
TORCH_WHEEL   ?= /opt/wheels/torch-$(TORCH_VERSION)+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
TORCH_STAMP   := $(VENV)/.torch-$(TORCH_VERSION)

torch: $(TORCH_STAMP)

$(TORCH_STAMP): pyproject.toml | $(STAMP)
	@test -f $(TORCH_WHEEL) || { echo "make torch: $(TORCH_WHEEL) is missing:" \
	  "put PyTorch $(TORCH_VERSION)'s CPU wheel for CPython 3.11 there, or pass TORCH_WHEEL=path"; \
	  exit 1; }
	$(BIN)/uv pip install -q --python $(BIN)/python $(TORCH_WHEEL) -r pyproject.toml --extra multinode
	touch $@

# The released SimpleTuner worker agent, as published, for tests/e2e/test_simpletuner_agent.py.
# Only its wheel is fetched (no dependencies: the tests import its worker_agent.py alone), once,
# into the virtualenv; nothing downloads while the tests run.
AGENT_VERSION := 4.10.1
AGENT_WHEEL   := $(VENV)/agent-wheels/simpletuner-$(AGENT_VERSION)-py3-none-any.whl

agent-wheel: $(AGENT_WHEEL)

$(AGENT_WHEEL): | $(STAMP)
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
	  -d $(VENV)/agent-wheels simpletuner==$(AGENT_VERSION)

# Wheels of the runtime dependencies and the build backend, read from pyproject.toml (not the
# dev extras): tests/install builds our wheel and installs it into a fresh virtualenv from
# these, offline, as a user's `pip install` would. Only this step may download.
wheelhouse: $(WHEELS)/.done

$(WHEELS)/.done: pyproject.toml | $(STAMP)
	rm -rf $(WHEELS) && mkdir -p $(WHEELS)
	$(BIN)/python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); \
	  print("\n".join(p["project"]["dependencies"] + p["build-system"]["requires"]))' \
	  > $(WHEELS)/requirements.txt
	$(BIN)/python -m pip wheel -q -w $(WHEELS) -r $(WHEELS)/requirements.txt
	touch $@

# The orchestrator on SQLite under $(DATA), with a local persistent worker, ready for jobs.
up: venv
	PORT=$(PORT) DATA=$(DATA) BIN=$(BIN) LOG_LEVEL=$(LOG_LEVEL) scripts/up.sh

# PostgreSQL on 127.0.0.1:5432 backs the storage tests; start it if it is down.
postgres:
	@pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start
	@for i in $$(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && exit 0; sleep 1; done; \
	  echo "PostgreSQL did not come up on 127.0.0.1:5432"; exit 1

# Debian's packages the tests drive: Chromium for the browser tests (Playwright never
# downloads a browser), nginx in front of two replicas (docs/deploy.md), and Slurm 22.05 with
# munge for the slurm provider's tests (tests/slurm: a single-node cluster the tests start;
# the packages' own services are not used).
system-packages:
	@missing=""; \
	  command -v chromium >/dev/null || missing="$$missing chromium"; \
	  command -v nginx >/dev/null || test -x /usr/sbin/nginx || missing="$$missing nginx"; \
	  if [ -n "$$missing" ]; then apt-get update && apt-get install -y $$missing; fi
	@missing=""; \
	  command -v sbatch >/dev/null || missing="$$missing slurm-client"; \
	  command -v slurmctld >/dev/null || test -x /usr/sbin/slurmctld || missing="$$missing slurmctld"; \
	  command -v slurmd >/dev/null || test -x /usr/sbin/slurmd || missing="$$missing slurmd"; \
	  command -v munged >/dev/null || test -x /usr/sbin/munged || missing="$$missing munge"; \
	  if [ -n "$$missing" ]; then \
	    apt-get update && apt-get install -y --no-install-recommends $$missing; fi

# PYTHONDONTWRITEBYTECODE (set on some machines, CI's among them) would have every server and
# worker process a test starts compile the package again (a second of CPU each), and pytest
# rewrite every test module's asserts again in each of its processes: the bytecode is kept.
# Three test files at a time on two cores: a third of the suite's time is spent waiting (on
# timeouts, on subprocesses, on the SimpleTuner agent's own pace), and a third process keeps the
# CPUs busy meanwhile (773 s against 844 s at -n 2, one run each; docs/benchmarks.md, #19).
# Each test's time lands in test-output/junit.xml: tests/conftest.py's LONGEST_FIRST is ranked by it.
test: venv torch wheelhouse agent-wheel postgres system-packages
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -p no:cacheprovider --durations=10 -n 3 --dist loadgroup --no-loadscope-reorder --junitxml=test-output/junit.xml

# The screenshots of docs/ui.md, retaken by the browser tests in Debian's Chromium.
screenshots: venv postgres system-packages
	GPUFLEET_SCREENSHOTS=1 $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile tests/browser
	scripts/screenshots.sh

lint: venv
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy

# Every scenario of docs/benchmarks.md at full size against a real server: tens of minutes.
.PHONY: bench
bench: venv postgres
	$(BIN)/python -m bench --size full --json-out test-output/bench

# Before and after in one run (#39; docs/benchmarks.md): each scenario against BASE's server
# (another checkout: `git worktree add /tmp/base <commit>`), then this checkout's, ROUNDS times.
#   make bench-baseline BASE=/tmp/base BENCH_ARGS="--scenario 2 --size medium" ROUNDS=3
ROUNDS ?= 1
BENCH_ARGS ?= --size full
.PHONY: bench-baseline
bench-baseline: venv postgres
	@test -n "$(BASE)" || { echo "BASE=<a checkout of gpufleet>: git worktree add /tmp/base <commit>"; exit 2; }
	$(BIN)/python -m bench --baseline $(BASE) --rounds $(ROUNDS) $(BENCH_ARGS) --json-out test-output/bench-baseline

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache test-output
