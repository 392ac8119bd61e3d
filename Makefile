# The two README commands: `make demo` and `make test`. Both do all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-deps test-fast venv docker-lab harness-image bench-cli bench-harness bench-up bench-client typecheck lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

docker-lab:
	bash scripts/docker-lab.sh

harness-image: $(STAMP) docker-lab
	bash scripts/harness-image.sh

test-deps:
	bash scripts/test-deps.sh

test: $(STAMP) docker-lab harness-image test-deps
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not docker"

demo: $(STAMP) docker-lab harness-image
	bash scripts/demo.sh

typecheck: $(STAMP)
	$(PY) -m mypy labctl

lint: $(STAMP)
	$(VENV)/bin/ruff check --select F,E9 labctl tests scripts

bench-cli: $(STAMP)
	$(PY) scripts/bench_cli.py

bench-harness: $(STAMP)
	$(PY) scripts/bench_harness.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .hypothesis compose/*.yaml

bench-up: $(STAMP) docker-lab harness-image
	$(PY) scripts/bench_up.py

bench-client: $(STAMP)
	$(PY) scripts/bench_client.py

# Engine CLI contracts (engines/<engine>/cli/<version>.yaml), from the engines' own parsers.
# Wheels and venvs are cached outside the repository (LABCTL_CONTRACTS_CACHE, default
# /var/cache/labctl/contracts). `make contracts ENGINE=vllm VERSION=0.34.0` regenerates one.
.PHONY: contracts contract-check
contracts: $(STAMP)
	$(PY) scripts/contracts/generate.py $(if $(ENGINE),--engine $(ENGINE)) $(if $(VERSION),--version $(VERSION))

contract-check: $(STAMP)
	$(PY) scripts/contracts/check.py $(if $(CASES),--cases $(CASES))
