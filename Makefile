# llmops.serving: two entry points, `make demo` and `make test` (see README.md).
SHELL := /bin/bash
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
COLLECTIONS := $(CURDIR)/.collections
VERSION := $(shell sed -n 's/^version: *//p' galaxy.yml)
TARBALL := build/llmops-serving-$(VERSION).tar.gz
INVENTORY ?= inventories/local

export PATH := $(BIN):$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

.PHONY: demo test venv system collection docs unit sanity lint integration engines clean

# The test bed's preparation (simulated GPUs, tiny checkpoints) is not part of the shipped
# playbooks: it runs first, and does nothing on hosts that do not set llmops_simulator.
demo: venv collection
	ansible-playbook -i $(INVENTORY) tests/sim/prepare_host.yml
	ansible-playbook -i $(INVENTORY) playbooks/deploy.yml

test: venv system collection
	tests/run-all.sh

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

# OS packages the test bed needs (sshd for the namespace hosts, systemd-nspawn).
system:
	tests/integration/install-system-packages.sh

# Build the collection tarball and install it where ansible looks (ANSIBLE_COLLECTIONS_PATH).
collection: venv
	@mkdir -p build
	@# serialised: concurrent runs would delete each other's install mid-way
	flock build/.collection.lock sh -c 'rm -f build/llmops-serving-*.tar.gz && \
	  ansible-galaxy collection build --force --output-path build . >/dev/null && \
	  ansible-galaxy collection install --force -p $(COLLECTIONS) $(TARBALL) >/dev/null'
	@echo "installed $(TARBALL) into $(COLLECTIONS)"

# The collection's documentation site, as collections publish theirs (antsibull-docs and
# Sphinx), from the installed collection: open build/docs/index.html. Without network the links
# into docs.ansible.com (intersphinx) stay unresolved and Sphinx warns about them; the
# collection's own references are checked by antsibull-docs in `tests/run-all.sh build`.
docs: venv collection
	rm -rf build/docs build/docs-src && mkdir -m 700 -p build/docs-src
	antsibull-docs sphinx-init --use-current --squash-hierarchy --fail-on-error \
	  --dest-dir build/docs-src llmops.serving >/dev/null
	chmod og-w build/docs-src/rst
	antsibull-docs --config-file build/docs-src/antsibull-docs.cfg collection --use-current \
	  --squash-hierarchy --fail-on-error --cleanup everything --dest-dir build/docs-src/rst llmops.serving
	sphinx-build -q -b html -c build/docs-src build/docs-src/rst build/docs
	@echo "documentation site: build/docs/index.html"

unit: venv
	tests/run-all.sh unit

sanity: venv
	tests/run-all.sh sanity

lint: venv
	tests/run-all.sh lint

integration: venv system collection
	tests/run-all.sh integration

engines: venv collection
	tests/run-all.sh engines

clean:
	rm -rf build tests/output .pytest_cache
