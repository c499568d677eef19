# fsmatrix: `make demo` runs the quick matrix end to end; `make test` runs the test suite.
# Both install what is missing first (Debian packages via apt, Python packages into .venv).

SHELL := /bin/bash
PYTHON ?= /usr/bin/python3
VENV := .venv
BIN := $(VENV)/bin
RESULTS ?= results
PYTEST_ARGS ?=

# Debian packages fsmatrix runs and builds with. What the workloads and filesystems need comes from
# their declarations (runner/fsmatrix/agent/packages.py); the rest is device handling and tooling.
REGISTRY_PACKAGES := $(shell PYTHONPATH=runner $(PYTHON) -m fsmatrix.agent.packages host)
DEB_PACKAGES := $(REGISTRY_PACKAGES) mdadm lvm2 util-linux psmisc kmod python3-venv git shellcheck \
	qemu-system-x86 qemu-utils packer debootstrap grub-pc-bin fdisk busybox-static openssh-client chromium \
	libvirt-daemon-system libvirt-clients libxml2-utils iproute2 dnsmasq-base vagrant vagrant-libvirt \
	libvirt-dev pkg-config gcc python3-dev
# (the last line builds libvirt-python from PyPI against Debian's libvirt)

.PHONY: all deps deb-deps print-deb-packages venv demo demo-host test test-slow lint bench bench-vm clean image

all: test

deps: deb-deps venv

# Idempotent and quick when everything is there: only missing packages go to apt-get.
deb-deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' "$$p" 2>/dev/null | grep -q '^install ok installed' || echo "$$p"; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:" $$missing; \
		apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

print-deb-packages:
	@echo $(DEB_PACKAGES)

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

# The last line fsmatrix prints is "report: <absolute path>".
demo: deps
	$(BIN)/fsmatrix image build
	$(BIN)/fsmatrix run matrix/quick.yaml --backend qemu --results $(RESULTS)

lint: deps
	$(BIN)/ruff check runner tests
	$(BIN)/ruff format --check runner tests
	$(BIN)/mypy
	shellcheck .ci/run .github/scripts/*.sh .github/actions/*/*.sh
	$(BIN)/actionlint
	packer fmt -check packer/
	CHECKPOINT_DISABLE=1 packer validate -syntax-only packer/  # full validation: tests/test_image.py

test: lint
	$(BIN)/pytest $(PYTEST_ARGS)

test-slow: deps
	$(BIN)/pytest -m slow

bench: deps
	$(BIN)/python -m fsmatrix.bench

# VM benchmarks (README, Performance): boot-to-agent, per-run overhead, guest/host fio fidelity.
bench-vm: deps
	$(BIN)/python -m fsmatrix.vmbench

# The quick matrix without VMs: loop devices on this host (cells its kernel cannot run are skipped).
demo-host: deps
	$(BIN)/fsmatrix run matrix/quick.yaml --backend host --results $(RESULTS) --run-id quick-host

# The guest image (debootstrap base + Packer) in $${FSMATRIX_CACHE:-/var/cache/fsmatrix}/images;
# reused when its inputs are unchanged.
image: deps
	$(BIN)/fsmatrix image build

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
