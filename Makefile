# trainwarden: `make demo` shows it working, `make test` runs every test.
# Everything below installs what it needs itself (a venv from PyPI, Go modules, Debian's
# Prometheus package) and caches it under .venv/ and .cluster/ (both gitignored).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export GOTOOLCHAIN := local

.PHONY: help venv helm crds chart-readme lint unit e2e test cluster cluster-down image release demo demo-down clean bench faults conformance

help:
	@echo "make demo          local cluster + operator + sample policies and GPU jobs"
	@echo "make test          lint, unit tests and e2e tests against the local cluster"
	@echo "make cluster       start the local control plane (idempotent); make cluster-down"
	@echo "make crds          regenerate crds/ from the pydantic models"
	@echo "make helm          build the Helm CLI into .cluster/bin/helm (the chart's tests use it)"
	@echo "make image         (re)build the trainwarden OCI image; import it if the real node is up"
	@echo "make release       VERSION=x.y.z REGISTRY=host/path: push the image and the chart, print digests"
	@echo "make bench         the scale benchmark (~50 min; BENCH_ARGS=--quick: ~8 min)"
	@echo "make faults        the fault-injection suite (long; FAULTS_ARGS=\"--runs 5 --areas suspend\")"
	@echo "make conformance   prune checkpoints the real trainers write (HF, Lightning, DCP, DeepSpeed, Orbax; own venv)"

$(BIN)/.installed: pyproject.toml
	@echo "==> creating the Python venv in $(VENV) and installing trainwarden[dev]"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install --quiet --upgrade pip
	@$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

venv: $(BIN)/.installed

# The conformance suite (issue 31; docs/checkpoints.md): real checkpoints written by Hugging
# Face Trainer, Lightning, torch.distributed.checkpoint, DeepSpeed and Orbax (tiny models,
# CPU), pruned by `trainwarden prune`, then handed back to the library. Its heavy
# dependencies live in their own venv; not part of `make test`. CONFORMANCE_ARGS passes
# pytest options; TRAINWARDEN_CLI=<checkout>/.venv/bin/trainwarden tries another checkout.
CONFORMANCE_VENV := .venv-conformance
$(CONFORMANCE_VENV)/.installed: conformance/requirements.txt conformance/requirements-optional.txt
	@echo "==> creating $(CONFORMANCE_VENV) (torch, transformers, lightning: some 6 GiB)"
	@test -x $(CONFORMANCE_VENV)/bin/python || $(PYTHON) -m venv $(CONFORMANCE_VENV)
	@$(CONFORMANCE_VENV)/bin/pip install --quiet --upgrade pip
	@$(CONFORMANCE_VENV)/bin/pip install --quiet -r conformance/requirements.txt
	@$(CONFORMANCE_VENV)/bin/pip install --quiet --no-build-isolation \
		-r conformance/requirements-optional.txt \
		|| echo "==> DeepSpeed or Orbax could not be installed: their tests are skipped"
	@touch $@

conformance: venv $(CONFORMANCE_VENV)/.installed
	TRAINWARDEN_CLI=$${TRAINWARDEN_CLI:-$(abspath $(BIN))/trainwarden} \
		$(CONFORMANCE_VENV)/bin/pytest -c conformance/pytest.ini --rootdir conformance \
		conformance $(CONFORMANCE_ARGS)

helm:
	@e2e/cluster/helm.sh

crds: venv
	$(BIN)/trainwarden crds --output crds
	$(BIN)/trainwarden crds --output helm/trainwarden/crds

chart-readme: venv
	$(BIN)/python helm/readme.py

lint: venv
	@echo "==> ruff, mypy, import-linter, shellcheck"
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	MYPYPATH=operator:e2e $(BIN)/mypy --follow-imports=silent faults
	$(BIN)/lint-imports
	$(BIN)/shellcheck $$(git ls-files '*.sh') .ci/run

# No cluster and no Go-built tool: pure logic, reconcilers against the fake API server.
unit: venv
	@echo "==> unit tests"
	$(BIN)/pytest tests

cluster: venv
	@e2e/cluster/up.sh

cluster-down:
	@e2e/cluster/down.sh

image: venv
	@e2e/cluster/node/image.sh $(if $(wildcard .cluster/state/node/containerd/containerd.sock),--import)

# Release artifacts (docs/install.md, "Releasing"): the image and the chart, pinned to the
# image's digest, pushed to REGISTRY; REGISTRY_CA names the registry's CA if not a system one.
# It never creates a git tag.
release: venv
	@e2e/cluster/release.sh "$(VERSION)" "$(REGISTRY)"

e2e: cluster helm
	@echo "==> e2e tests against the local cluster"
	$(BIN)/pytest e2e

# Each phase prints its time; the first failing phase fails `make test` (set -e).
test: lint
	@set -e; \
	start=$$(date +%s); $(MAKE) --no-print-directory unit; \
	echo "==> unit tests took $$(( $$(date +%s) - start ))s"; \
	start=$$(date +%s); $(MAKE) --no-print-directory cluster; \
	echo "==> cluster up took $$(( $$(date +%s) - start ))s"; \
	start=$$(date +%s); $(MAKE) --no-print-directory e2e; \
	echo "==> e2e tests took $$(( $$(date +%s) - start ))s"

# The scale benchmark (issue 12; docs/scale.md): 1,000 kwok GPU nodes, 10,000 pods, the
# operator side by side with a naive janitor and a bare watch client. Not part of `make test`.
# BENCH_ARGS passes options, e.g. BENCH_ARGS="--quick --json results.json".
bench: cluster
	$(BIN)/python bench/scale.py $(BENCH_ARGS)

# The fault-injection suite (issue 17; docs/reliability.md): the operator SIGKILLed during
# budget actions, leader failover, Prometheus down, the operator down for 10 minutes; a
# table of actions expected/taken/doubled/lost/wrong. Not part of `make test` (it takes
# long). FAULTS_ARGS passes options, e.g. FAULTS_ARGS="--runs 10 --areas suspend,resume".
faults: cluster
	$(BIN)/python -m faults $(FAULTS_ARGS)

demo: cluster
	@$(BIN)/python e2e/demo

# Stop the operator `make demo` left running (the cluster stays up): the Helm release on
# the real node, or the local process.
demo-down:
	@.cluster/bin/helm --kubeconfig .cluster/kubeconfig uninstall trainwarden-demo \
	  -n trainwarden --wait 2>/dev/null && echo "uninstalled the demo's Helm release" || true
	@pid=$$(cat .cluster/state/pids/operator.pid 2>/dev/null) && kill "$$pid" 2>/dev/null \
	  && echo "stopped the demo's operator (pid $$pid)" || true
	@rm -f .cluster/state/pids/operator.pid
	@.cluster/bin/kubectl --kubeconfig .cluster/kubeconfig delete mutatingwebhookconfiguration \
	  trainwarden-demo-local-hold --ignore-not-found 2>/dev/null || true

clean: cluster-down
	rm -rf $(VENV) .cluster
