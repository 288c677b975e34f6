# Two commands set everything up on a fresh machine with python3 and make:
#   make demo   - a local two-node fabric and the demo workload
#   make test   - every test
VENV   ?= .venv
PYTHON ?= python3
STAMP  := $(VENV)/.installed

.PHONY: demo test system-deps lint bench clean mutation

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

# Debian packages the tests use when present (DAT headers, OFED tools, ucx_perftest, ip netns).
# Best effort: only as root with apt; the tests that need them skip with a stated reason otherwise.
system-deps:
	@if [ ! -f /usr/include/dat2/dat.h ] || ! command -v ip >/dev/null || ! command -v ucx_perftest >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      libdapl-dev dapl2-utils ucx-utils iproute2 >/dev/null) || echo "system-deps: apt-get failed; dependent tests will skip"; \
	  else echo "system-deps: not root or no apt-get; dependent tests will skip"; fi; \
	fi

demo: $(STAMP)
	$(VENV)/bin/fabricctl demo

test: $(STAMP) system-deps
	$(VENV)/bin/pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check proto fabricd client bench tools tests
	$(VENV)/bin/mypy

# Mutation testing of the NIC core and proto/ against the in-memory and unit suites
# (configured in pyproject.toml, [tool.mutmut]; results in docs/mutation.md). Not part of `test`.
mutation: $(STAMP)
	$(VENV)/bin/python -c "import mutmut" 2>/dev/null || $(VENV)/bin/pip install -q "mutmut==3.*"
	$(VENV)/bin/mutmut run --max-children 2
	$(VENV)/bin/mutmut results

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache mutants
