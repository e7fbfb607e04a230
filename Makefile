# gpuplane — run `make help` for the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash

UV := $(shell command -v uv 2>/dev/null || echo "python3 -m uv")
PYTEST_MARKERS ?= not gpu and not docker and not slow
PYTEST_ARGS ?=

.PHONY: help
help: ## Show the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: uv
uv: ## Install uv (from PyPI) if it is missing
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet uv

.PHONY: install
install: uv ## Install the workspace and dev tools from the lock file
	$(UV) sync --frozen

.PHONY: cluster-build
cluster-build: install ## Build etcd, kube-apiserver/-controller-manager/-scheduler and kwok from Go modules (cached)
	$(UV) run devcluster build

.PHONY: cluster-up
cluster-up: cluster-build ## Start the local devcluster with 3 simulated 8×H100 nodes
	$(UV) run devcluster up --gpu-nodes 3 --gpus-per-node 8 --gpu-model H100

.PHONY: cluster-down
cluster-down: install ## Stop the local devcluster and delete its state
	$(UV) run devcluster down

RUN_ARGS ?=

.PHONY: run
run: cluster-build ## Start the whole platform on the local devcluster (Ctrl-C stops it; RUN_ARGS="--help")
	$(UV) run python scripts/run_platform.py $(RUN_ARGS)

.PHONY: test
test: cluster-build helm ## Run every test except the gpu, docker and slow ones
	$(UV) run pytest -m "$(PYTEST_MARKERS)" $(PYTEST_ARGS)

.PHONY: test-slow
test-slow: cluster-build ## Run the slow suites (scale, faults)
	$(UV) run pytest -m "slow" $(PYTEST_ARGS)

RELIABILITY_MARKERS ?= not gpu and not docker

.PHONY: test-reliability
test-reliability: cluster-build ## Run tests/reliability, the slow fault tests included (docs/RELIABILITY.md)
	$(UV) run pytest tests/reliability -m "$(RELIABILITY_MARKERS)" $(PYTEST_ARGS)

.PHONY: test-gpu
test-gpu: install ## Run the real-NVML tests (needs an NVIDIA GPU)
	$(UV) run pytest -m "gpu" $(PYTEST_ARGS)

.PHONY: helm
helm: install ## Build helm from its Go module into the devcluster cache (cached per version)
	$(UV) run devcluster build --only-helm

.PHONY: chart-test
chart-test: cluster-build helm ## Lint, render, dry-run and install the Helm chart into the devcluster
	$(UV) run pytest tests/chart -m "not docker" $(PYTEST_ARGS)

SERVICES := controller hypervisor gpuctl lens
IMAGE_REGISTRY ?= ghcr.io/gpuplane
IMAGE_TAG ?= dev

.PHONY: images
images: ## Build one image per service (services/<name>/Dockerfile) where Docker exists
	@if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then \
		echo "make images: no Docker engine on this machine; nothing built (the Dockerfiles are services/*/Dockerfile)"; \
		exit 0; \
	fi; \
	for s in $(SERVICES); do \
		echo "building $(IMAGE_REGISTRY)/$$s:$(IMAGE_TAG)"; \
		docker build -f services/$$s/Dockerfile -t $(IMAGE_REGISTRY)/$$s:$(IMAGE_TAG) . || exit 1; \
	done

.PHONY: lint
lint: install ## ruff, mypy (libs + domain code), import-linter layer contracts, generated-code check
	$(UV) run ruff check .
	$(UV) run ruff format --check .
	$(UV) run mypy libs/core/src services/*/src/*/domain
	$(UV) run lint-imports
	$(UV) run python scripts/gen_protos.py --check

.PHONY: fmt
fmt: install ## Format the code with ruff
	$(UV) run ruff format .
	$(UV) run ruff check --fix .

.PHONY: protos
protos: install ## Regenerate Python code from proto/ into libs/proto
	$(UV) run python scripts/gen_protos.py

.PHONY: bench
bench: cluster-build ## Run every benchmark and write docs/BENCHMARKS.md
	$(UV) run python bench/run.py
