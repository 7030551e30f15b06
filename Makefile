# The two commands of the README: `make demo` and `make test`. Both run scripts/bootstrap
# first, which installs missing Debian packages (ccache among them) and extracts the fixture
# trees. Two compilations of the tree: release (g++) and check (clang: ASan+UBSan, libFuzzer).
SHELL := /bin/bash
JOBS ?= $(shell nproc)
BUILD ?= build
FUZZ_SECONDS ?= 10

# LIVE_TESTS_ONLY=ON (make test): the release build carries ljprof and the live-recording tests
# only (no other tests, no benchmarks); every other test runs once, in the check build.
LIVE_TESTS_ONLY ?= OFF
# Debug info as line tables only (-g1): backtraces, perf and sanitizer reports keep function,
# file and line, and the compile costs 20% less than with full -g (measured on
# tests/luajit/vm_cfi_test.cc under ASan: 29.3 s -> 23.6 s), which make test's cold budget needs.
RELEASE_CONFIGURE = cmake -S . -B $(BUILD)/release -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  -DLJPROF_LIVE_TESTS_ONLY=$(LIVE_TESTS_ONLY)
CHECK_CONFIGURE = CC=clang CXX=clang++ cmake -S . -B $(BUILD)/check -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1 -DCMAKE_C_FLAGS_DEBUG=-g1 -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
  -DLJPROF_SANITIZE=ON

.PHONY: all bootstrap build check release-build check-build ljprof arm64 arm64-build release test demo \
  matrix format check-format clean

all: build

bootstrap:
	scripts/bootstrap $(BUILD)/fixtures

# Everything of the release build: ljprof, tests, benchmarks.
build: bootstrap
	$(MAKE) --no-print-directory release-build

# The clang check build: the tests and the fuzz targets under ASan+UBSan.
check: bootstrap
	$(MAKE) --no-print-directory check-build

release-build:
	$(RELEASE_CONFIGURE)
	cmake --build $(BUILD)/release -j$(JOBS)

check-build:
	$(CHECK_CONFIGURE)
	cmake --build $(BUILD)/check -j$(JOBS)

# Only the ljprof executable (what `make demo` needs).
ljprof: bootstrap
	$(RELEASE_CONFIGURE)
	cmake --build $(BUILD)/release -j$(JOBS) --target ljprof

# The arm64 cross-build: ljprof and its BPF program for aarch64, with Debian's cross g++ and
# multiarch arm64 -dev packages; the program is compiled against the BTF of the Debian arm64
# kernel the VM tests boot (scripts/arm64-kernel-btf). No tests in it: they run on this host and
# boot that kernel (tests/record/record_arm64_vm_test.cc). -O1 without debug info: 20% less
# compile time than -O2 for make test's cold budget (the kernel program is -O2 regardless).
ARM64_BTF = $(abspath $(BUILD))/fixtures/arm64-vm/vmlinux.btf
ARM64_CONFIGURE = cmake -S . -B $(BUILD)/arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE=-O1 -DCMAKE_CXX_FLAGS_RELEASE=-O1 \
  -DLJPROF_BUILD_TESTS=OFF -Dljprof_vmlinux_btf=$(ARM64_BTF)

arm64: bootstrap
	$(MAKE) --no-print-directory arm64-build

arm64-build:
	scripts/arm64-kernel-btf $(ARM64_BTF)
	$(ARM64_CONFIGURE)
	cmake --build $(BUILD)/arm64 -j$(JOBS) --target ljprof_portable

# The portable tarballs, build/dist/ljprof-VERSION-linux-{amd64,arm64}.tar.gz: the executable
# linked against static archives of everything but glibc (packaging/portable), the manual pages,
# the agent's unit. The version is the amd64 executable's own.
release: bootstrap
	$(RELEASE_CONFIGURE)
	cmake --build $(BUILD)/release -j$(JOBS) --target ljprof_portable ljprof_man
	$(MAKE) --no-print-directory arm64-build
	version=$$($(BUILD)/release/portable/ljprof --version | sed -n '1s/^ljprof //p') && \
	scripts/dist $(BUILD)/dist amd64 $(BUILD)/release/portable/ljprof $(BUILD)/release/man "$$version" && \
	scripts/dist $(BUILD)/dist arm64 $(BUILD)/arm64/portable/ljprof $(BUILD)/release/man "$$version"

# Bootstrap, both builds, the release tests, the tests under ASan+UBSan, the fuzzers for a bounded
# time and the formatting check, ending with a table of each step's wall seconds.
test:
	scripts/test-suite $(BUILD) $(JOBS) $(FUZZ_SECONDS)

# Every LuaJIT variant of tests/matrix/variants.txt built from Debian's sources and checked;
# the table goes to docs/compatibility.md (`make test` checks the `test` subset).
matrix: build
	scripts/luajit-matrix $(BUILD)/fixtures/matrix all $(JOBS)
	scripts/matrix-report $(BUILD)/release docs/compatibility.md

demo: ljprof
	scripts/demo $(BUILD)/release/src/cli/ljprof

format:
	clang-format -i $$(git ls-files '*.cc' '*.h' '*.c')

check-format:
	scripts/check-format

clean:
	rm -rf $(BUILD)/release $(BUILD)/check $(BUILD)/arm64 $(BUILD)/dist
