# The two README commands: `make demo` and `make test`. Both do all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Python keeps its compiled modules: a machine that sets PYTHONDONTWRITEBYTECODE would otherwise compile
# labctl's ~230 modules again in every one of the thousands of labctl processes the tests start.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test check docs dist format test-deps vllm-cpu-image auth-proxy-image tiny-models test-fast venv docker-lab harness-image bench-cli bench-harness bench-up bench-client bench-real typecheck lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,docs]'
	touch $(STAMP)

venv: $(STAMP)

docker-lab:
	bash scripts/docker-lab.sh

harness-image: $(STAMP) docker-lab
	bash scripts/harness-image.sh

test-deps:
	bash scripts/test-deps.sh

# The vLLM CPU image (engines/vllm-cpu/) from a hash-locked wheelhouse, built with --network none; the first run
# downloads about 0.9 GB, later runs are offline and leave an up-to-date image alone. The real-engine tier of
# `make test` (tests/real/) runs it.
vllm-cpu-image: docker-lab
	bash scripts/vllm-cpu-image.sh

# labctl's authenticating proxy (Debian's nginx) for resident engines that leave model routes open without a key.
auth-proxy-image: docker-lab
	bash scripts/auth-proxy-image.sh

# The tiny Qwen3 and Qwen3-MoE test models (build/tiny-models), made deterministically inside that image.
tiny-models: vllm-cpu-image
	bash scripts/tiny-models.sh

# Format, lint and types first: a check nobody runs is decoration.
check: $(STAMP)
	$(VENV)/bin/ruff format --check labctl tests scripts
	$(VENV)/bin/ruff check labctl tests scripts
	$(PY) -m mypy --strict labctl

# The tiers side by side (scripts/test_tiers.py; tests/conftest.py says which test is in which), then the
# exclusive tests alone; it ends with each tier's time, the 15 slowest tests and the totals. The real-engine tier
# makes vllm-cpu-image and tiny-models itself, first, while the other tiers already test; `check`, `docs` and
# `dist` run as a tier of their own beside them (no test waits for them), and fail `make test` like any tier.
test: $(STAMP) docker-lab harness-image auth-proxy-image sim-lab remote-lab slurm-lab test-deps
	$(PY) scripts/test_tiers.py

# The distribution as it would be published (llm-labctl on PyPI; the command is labctl): the sdist, then the
# wheel built from that sdist (so the sdist is shown complete), both checked by twine as PyPI would check them.
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --quiet --outdir dist .
	$(PY) -m twine check --strict dist/*

# The documentation site (mkdocs.yml, docs/) into build/site, offline and strict: a broken link, a broken
# anchor or a page missing from the nav fails. Open build/site/index.html, or `.venv/bin/mkdocs serve`.
# Never --quiet: MkDocs 1.6 then drops the warnings before --strict counts them, and passes.
# NO_MKDOCS_2_WARNING: Material's end-of-life notice (printed at every build) is not a build result.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site

# Every provisioning script on state roots that do not exist yet (instances of its own, never the labs
# other tests use), again (idempotent), then torn down; and each made to fail loudly. Part of `make test`.
.PHONY: test-first-run
test-first-run: $(STAMP) docker-lab
	$(PY) -m pytest -q tests/provisioning

# The unit tier: the pure core, in-process, no Docker, in seconds.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m unit

demo: $(STAMP) docker-lab harness-image
	bash scripts/demo.sh

typecheck: $(STAMP)
	$(PY) -m mypy --strict labctl

lint: $(STAMP)
	$(VENV)/bin/ruff check labctl tests scripts

format: $(STAMP)
	$(VENV)/bin/ruff format labctl tests scripts

bench-cli: $(STAMP)
	$(PY) scripts/bench_cli.py

bench-harness: $(STAMP)
	$(PY) scripts/bench_harness.py

clean:
	rm -rf $(VENV) dist .pytest_cache .mypy_cache .hypothesis compose/*.yaml

bench-up: $(STAMP) docker-lab harness-image vllm-cpu-image tiny-models
	$(PY) scripts/bench_up.py

bench-client: $(STAMP)
	$(PY) scripts/bench_client.py

# labctl's bench and vLLM's own `vllm bench serve` (same image) taking turns against one real vLLM CPU server
# (core 0; the clients on core 1): TTFT, TPOT, ITL and output tok/s side by side and as ratios labctl / vllm.
bench-real: $(STAMP) vllm-cpu-image tiny-models
	$(PY) scripts/bench_real.py

# The simulated GPU lab (two simulated GPU hosts, each a second dockerd with a no-op NVIDIA hook;
# the main daemon is left alone). Writes build/sim-lab/hosts.yaml. Test lab only; refuses on GPU hosts.
.PHONY: sim-lab demo-sim
sim-lab: $(STAMP) docker-lab harness-image
	bash scripts/sim-lab.sh
	$(PY) scripts/sim_lab_folder.py

# The seed's own command on the simulated lab, end to end (simulated GPUs: labelled harness-check).
demo-sim: sim-lab
	bash scripts/demo-sim.sh

# A whole study on the simulated lab's two hosts (studies/harness-demo.yaml); prints where the report is.
.PHONY: demo-study
demo-study: sim-lab
	bash scripts/demo-study.sh

.PHONY: slurm-lab slurm-lab-down
# A Slurm test cluster (munge, slurmdbd + MariaDB, slurmctld, nodes n1 with 4 and n2 with 2 simulated GPUs, n2 in a
# network namespace), each node with a simulated GPU dockerd of its own: scripts/slurm-lab.sh; see its header.
slurm-lab: docker-lab harness-image
	bash scripts/slurm-lab.sh

slurm-lab-down:
	bash scripts/slurm-lab.sh down

.PHONY: remote-lab remote-lab-down
# A second, simulated Docker host (netns labb, reached over SSH): scripts/remote-lab.sh; see its header.
remote-lab: docker-lab
	bash scripts/remote-lab.sh

remote-lab-down:
	bash scripts/remote-lab.sh down

# The CLI reference page (docs/reference/cli.md), from the CLI itself, and the environment variables' page
# (docs/reference/environment.md), from their table, and the editors' JSON Schemas (labctl/schemas/), from the
# loaders' field tables; unit tests keep each equal to what it is made from.
.PHONY: reference
reference: $(STAMP)
	$(PY) -c 'from pathlib import Path; from labctl.cli import app; from labctl.cli.reference import write_reference; print("docs/reference/cli.md", "updated" if write_reference(app, Path("docs/reference/cli.md")) else "unchanged")'
	$(PY) -c 'from pathlib import Path; from labctl.cli.environment import reference_page as page; p = Path("docs/reference/environment.md"); old = p.read_text() if p.exists() else ""; p.write_text(page()); print(p, "updated" if page() != old else "unchanged")'
	$(PY) -c 'from labctl.cli.schemas import write_schemas; print("labctl/schemas:", ", ".join(write_schemas()) or "unchanged")'

# The generated part of docs/development/architecture.md (the layers and every module's first docstring sentence);
# a unit test fails when it is stale.
.PHONY: architecture
architecture: $(STAMP)
	$(PY) scripts/architecture_page.py

# Engine CLI contracts (engines/<engine>/cli/<version>.yaml), from the engines' own parsers, and HTTP-surface
# contracts (engines/<engine>/http/<version>.yaml) from their servers' source. `make contract-check
# HTTP_ONLY=1` checks engine.yaml's probes and the personas against the HTTP contracts alone (no wheels).
# Wheels and venvs are cached outside the repository (LABCTL_CONTRACTS_CACHE, default
# /var/cache/labctl/contracts). `make contracts ENGINE=vllm VERSION=0.34.0` regenerates one.
.PHONY: contracts contract-check
contracts: $(STAMP)
	$(PY) scripts/contracts/generate.py $(if $(ENGINE),--engine $(ENGINE)) $(if $(VERSION),--version $(VERSION))

contract-check: $(STAMP)
	$(PY) scripts/contracts/check.py $(if $(CASES),--cases $(CASES)) $(if $(HTTP_ONLY),--http-only)
