# fsmatrix: `make demo` runs the quick matrix end to end; `make test` runs the test suite.
# Both install what is missing first (Debian packages via apt, Python packages into .venv).
#
# Tests (tests/, a folder per concept; tests/vm/ holds every test that boots a guest): `make check` is
# the quick one before a commit, a few minutes: lint, then every test that needs no VM, no image and
# is not a slow system test (pytest -m "not slow and not image and not system"; tests that need root
# run as root and are skipped otherwise). `make test` (what CI runs) is lint and the whole suite but
# the slow tests (pytest's default -m "not slow", from pyproject.toml): the system tests and the VM
# tests too, building the guest image first when it is not cached. `make test-slow`: -m slow. The
# markers are listed in pyproject.toml; PYTEST_ARGS adds arguments to check's and test's pytest.
# `make test-act`: the workflows run end to end by nektos/act (tests/ci/test_act.py, marker act; ~6 min,
# out of `make test` for CI's time), building act first (`make act`).

SHELL := /bin/bash
PYTHON ?= /usr/bin/python3
VENV := .venv
BIN := $(VENV)/bin
RESULTS ?= results
PYTEST_ARGS ?=

# Debian packages fsmatrix runs and builds with. What the workloads and filesystems need comes from
# their declarations (runner/fsmatrix/agent/packages.py); the rest is device handling and tooling.
# RUN_PACKAGES is what running a matrix takes: the host's and the container image's list
# (`fsmatrix container build` reads CONTAINER_PACKAGES); DEV_PACKAGES only the host's (tests, lint,
# building libvirt-python from PyPI against Debian's libvirt, Vagrant, podman to build and run the
# container image, Slurm and munge for the one-node cluster of tests/runs/test_slurm_cluster.py).
REGISTRY_PACKAGES := $(shell PYTHONPATH=runner $(PYTHON) -m fsmatrix.agent.packages host)
RUN_PACKAGES := $(REGISTRY_PACKAGES) mdadm lvm2 util-linux psmisc kmod python3-venv \
	qemu-system-x86 qemu-utils packer debootstrap grub-pc-bin fdisk busybox-static openssh-client \
	libvirt-daemon-system libvirt-clients libxml2-utils iproute2 dnsmasq-base
DEV_PACKAGES := git shellcheck chromium vagrant vagrant-libvirt libvirt-dev pkg-config gcc python3-dev \
	podman runc slurm-wlm munge
DEB_PACKAGES := $(RUN_PACKAGES) $(DEV_PACKAGES)
# Building the container image: the engine, debootstrap for its base, and what the wheelhouse needs
# (the virtualenv's pip; libvirt-python is built against libvirt-dev).
CONTAINER_BUILD_PACKAGES := podman runc debootstrap make python3-venv libvirt-dev pkg-config gcc python3-dev
# The container image: the host's run list, the PostgreSQL workload's server (duplicates of
# registry packages are dropped), and what debootstrap cannot choose itself for alternatives in
# libvirt's dependencies ("default-dbus-system-bus | dbus-system-bus", "default-logind | logind").
CONTAINER_PACKAGES := $(RUN_PACKAGES) postgresql-15 dbus libpam-systemd

# podman 4.3 as root on a machine like this one: runc (crun rejects a hybrid cgroup setup) and no
# default rlimits (setting them is forbidden here). A drop-in, so the distribution's files stay.
PODMAN_CONF := /etc/containers/containers.conf.d/50-fsmatrix.conf
define PODMAN_CONF_TEXT
# Written by fsmatrix's `make deps`: podman as root with runc, no default rlimits.
[containers]
default_ulimits = []

[engine]
runtime = "runc"
endef
export PODMAN_CONF_TEXT

.PHONY: otava-venv all deps deb-deps container-deps podman-conf print-deb-packages print-container-packages container venv demo demo-host check test test-act test-slow lint bench bench-vm clean image act

all: test

deps: deb-deps podman-conf venv otava-venv

# Idempotent and quick when everything is there: only missing packages go to apt-get.
# $(call apt_install,PACKAGES)
define apt_install
	@missing=$$(for p in $(1); do \
		dpkg-query -W -f='$${Status}\n' "$$p" 2>/dev/null | grep -q '^install ok installed' || echo "$$p"; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:" $$missing; \
		apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
endef

deb-deps:
	$(call apt_install,$(DEB_PACKAGES))

# What building and running the container image takes on a runner that runs everything in it.
container-deps:
	$(call apt_install,$(CONTAINER_BUILD_PACKAGES))

print-deb-packages:
	@echo $(DEB_PACKAGES)

print-container-packages:
	@echo $(CONTAINER_PACKAGES)

# Idempotent: rewritten only when its content differs.
podman-conf:
	@if [ "$$(cat $(PODMAN_CONF) 2>/dev/null)" != "$$PODMAN_CONF_TEXT" ]; then \
		mkdir -p $(dir $(PODMAN_CONF)) && printf '%s\n' "$$PODMAN_CONF_TEXT" > $(PODMAN_CONF) && \
		echo "wrote $(PODMAN_CONF)"; \
	fi

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

# Apache Otava (`fsmatrix history`'s change points) in a virtualenv of its own under the cache: its pins
# would move numpy and scipy under every figure fsmatrix measures (docs/history.md). Quick when there.
otava-venv: venv
	@$(BIN)/fsmatrix history --install-otava >/dev/null

# The last line fsmatrix prints is "report: <absolute path>".
demo: deps
	$(BIN)/fsmatrix image build
	$(BIN)/fsmatrix run matrix/quick.yaml --backend qemu --results $(RESULTS)

lint: deps
	$(BIN)/ruff check runner tests
	$(BIN)/ruff format --check runner tests
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo --no-cache  # the layering contracts: [tool.importlinter] in pyproject.toml
	shellcheck .ci/run .github/scripts/*.sh .github/actions/*/*.sh packer/container/*.sh tests/ci/act/*.sh tests/ci/act/actions/*/*.sh
	$(BIN)/actionlint
	packer fmt -check packer/
	CHECKPOINT_DISABLE=1 packer validate -syntax-only packer/  # full validation: tests/backends/test_image.py

# One pytest on two workers (pytest-xdist, --dist loadgroup): the tests that share the machine (marked
# root, system or image: loop devices, mounts, cgroups, swap, /var/tmp/fsmatrix, VMs) all on one worker,
# in turn, while the tests that touch only their own temporary files run beside them (tests/conftest.py).
CHECK_MARKS := not slow and not image and not system
check: lint
	$(BIN)/pytest -n 2 --dist loadgroup -m "$(CHECK_MARKS)" $(PYTEST_ARGS)

test: lint
	$(BIN)/pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

test-act: lint act
	$(BIN)/pytest -m act $(PYTEST_ARGS)

# nektos/act, which runs the workflows on this host in tests/ci/test_act.py: built with `go install`
# through the Go module proxy into $${FSMATRIX_CACHE:-/var/cache/fsmatrix}/act (Debian's golang-go
# first when there is no Go); quick when it is there.
act:
	@bash tests/ci/act/install.sh > /dev/null

test-slow: deps
	$(BIN)/pytest -m slow

bench: deps
	$(BIN)/python -m fsmatrix.bench

# VM benchmarks (docs/measurements.md): boot-to-agent, per-run overhead, guest/host fio fidelity.
bench-vm: deps
	$(BIN)/python -m fsmatrix.bench.vm

# The quick matrix without VMs: loop devices on this host (cells its kernel cannot run are skipped).
demo-host: deps
	$(BIN)/fsmatrix run matrix/quick.yaml --backend host --results $(RESULTS) --run-id quick-host

# A guest image (debootstrap base + Packer) in $${FSMATRIX_CACHE:-/var/cache/fsmatrix}/images;
# reused when its inputs are unchanged. IMAGE: a definition in packer/images/ (make image IMAGE=debian13).
IMAGE ?= debian12
image: deps
	$(BIN)/fsmatrix image build --image $(IMAGE)

# The runner as a container image (fsmatrix:<version>-<inputs hash>), built offline; reused when
# its inputs are unchanged. The last line is the image's name.
# Needs only CONTAINER_BUILD_PACKAGES on the host, not the whole toolchain.
container: container-deps podman-conf venv
	@$(BIN)/fsmatrix container build

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
