# Two commands set everything up on a fresh machine with python3 and make:
#   make demo   - a local two-node fabric and the demo workload
#   make test   - every test (it builds the C provider too)
# And for C DAT programs: make provider builds provider/build/libdatfabric.so (docs/provider.md).
# And on a container engine (docs/containers.md):
#   make containers       - three node containers and the demo across them, then all removed
#   make containers-up    - the same topology, left running (make containers-down removes it)
VENV   ?= .venv
# The interpreter the venv, and so every daemon and client, runs on: the distribution's own
# python3 where there is one of 3.11 or later (Debian builds it with profile-guided and link-time
# optimisation and links libpython into the executable; a default source build, pyenv's for one,
# has neither and calls through a shared libpython: 64 B Writes at window 1 took ~25 % longer on
# it, docs/performance.md), else python3 on PATH. `make PYTHON=...` picks another.
SYSTEM_PYTHON := /usr/bin/python3
PYTHON ?= $(shell $(SYSTEM_PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	&& echo $(SYSTEM_PYTHON) || echo python3)
STAMP  := $(VENV)/.installed
BASE   := $(VENV)/.python

.PHONY: FORCE demo test provider system-deps container-deps containers containers-up containers-down lint bench clean mutation fuzz

# The install builds the C extensions and compiles the native modules (setup.py, proto/native.py):
# it needs Python's headers. A change to any of their sources or headers installs again.
NATIVE := $(shell $(PYTHON) -c 'import runpy; n = runpy.run_path("proto/native.py"); \
	print(*(n["source"](m).relative_to(n["ROOT"]) for m in n["NATIVE"]))' 2>/dev/null)
EXTENSIONS := $(wildcard client/*.[ch] fabricd/*.[ch] proto/*.[ch]) provider/df-abi.h proto/native.py $(NATIVE)
# A venv made from another interpreter than $(PYTHON) is made again ($(BASE) names its base; the
# file changes only when the choice does).
$(BASE): FORCE
	@want=$$(command -v $(PYTHON)); \
	if [ "$$(cat $@ 2>/dev/null)" != "$$want" ]; then \
	  rm -rf $(VENV) && mkdir -p $(VENV) && echo "$$want" > $@; \
	fi

# Debian's python3 makes venvs only with python3-venv (ensurepip), and the extensions need
# python3-dev and libmsgpack-dev (msgpack-c: the daemon's C lanes decode and pack the data
# path's frame headers with it): all installed where it runs as root with apt and they are
# missing; without msgpack-c's headers the install stops and says so.
$(STAMP): $(BASE) pyproject.toml setup.py $(EXTENSIONS)
	@inc=$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	need=""; [ -f "$$inc/Python.h" ] || need="python3-dev"; \
	$(PYTHON) -c 'import ensurepip, sys; sys.exit(not ensurepip.version())' 2>/dev/null \
	  || need="$$need python3-venv"; \
	[ -f /usr/include/msgpack.h ] || need="$$need libmsgpack-dev"; \
	if [ -n "$$need" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need >/dev/null; \
	fi; \
	if [ ! -f /usr/include/msgpack.h ]; then \
	  echo "the C extensions need msgpack-c's headers: install libmsgpack-dev (Debian)"; exit 1; \
	fi
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

# Debian packages the tests use when present (DAT headers, OFED tools, msgpack for C, ucx_perftest,
# ip netns).
# Best effort: only as root with apt; the tests that need them skip with a stated reason otherwise.
system-deps:
	@if [ ! -f /usr/include/dat2/dat.h ] || [ ! -f /usr/include/msgpack.h ] || ! command -v ip >/dev/null \
	    || ! command -v ucx_perftest >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      libdapl-dev dapl2-utils libmsgpack-dev ucx-utils iproute2 >/dev/null) || echo "system-deps: apt-get failed; dependent tests will skip"; \
	  else echo "system-deps: not root or no apt-get; dependent tests will skip"; fi; \
	fi

# A container engine, compose, and debootstrap (a local base image when no registry is reachable).
# Docker's engine from Debian unless an engine is there already (docker-ce, podman: left alone).
# Best effort like system-deps: without them the container tests skip and say what is missing.
container-deps:
	@pkgs=""; \
	if ! command -v dockerd >/dev/null && ! command -v podman >/dev/null; then \
	  pkgs="docker.io docker-compose iptables"; \
	elif command -v docker >/dev/null && ! docker compose version >/dev/null 2>&1 \
	     && ! command -v docker-compose >/dev/null; then pkgs="docker-compose"; fi; \
	command -v debootstrap >/dev/null || pkgs="$$pkgs debootstrap"; \
	if [ -n "$$pkgs" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends $$pkgs >/dev/null) \
	      || echo "container-deps: apt-get failed; container tests will skip"; \
	  else echo "container-deps: not root or no apt-get ($$pkgs missing); container tests will skip"; fi; \
	fi

containers: $(STAMP) system-deps container-deps
	$(VENV)/bin/python -m tools.containers demo

containers-up: $(STAMP) system-deps container-deps
	$(VENV)/bin/python -m tools.containers up

containers-down: $(STAMP)
	$(VENV)/bin/python -m tools.containers down

provider: system-deps
	$(MAKE) -C provider

demo: $(STAMP)
	$(VENV)/bin/fabricctl demo

test: $(STAMP) system-deps container-deps
	$(VENV)/bin/pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check proto fabricd client bench tools tests
	$(VENV)/bin/mypy

# Mutation testing of the NIC core and proto/ against the in-memory and unit suites
# (configured in pyproject.toml, [tool.mutmut]; results in docs/mutation.md). Not part of `test`.
mutation: $(STAMP)
	$(VENV)/bin/python -c "import mutmut" 2>/dev/null || $(VENV)/bin/pip install -q "mutmut==3.*"
	DATFABRIC_INTERPRETED=1 $(VENV)/bin/mutmut run --max-children 2
	$(VENV)/bin/mutmut results

# The hostile-input suites (tests/core/test_fuzz.py) ten times longer than `test` runs them:
# 1,000,000 inputs per plane; FUZZ_SEED=N for another sequence.
fuzz: $(STAMP)
	DATFABRIC_FUZZ_INPUTS=1000000 DATFABRIC_FUZZ_SEED=$${FUZZ_SEED:-20261125} \
		$(VENV)/bin/pytest -q tests/core/test_fuzz.py

clean:
	$(MAKE) -C provider clean
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache mutants build client/*.so fabricd/*.so proto/*.so
