# The two commands of the README: `make demo` and `make test`. Both run scripts/bootstrap
# first, which installs missing Debian packages and extracts the fixture trees.
SHELL := /bin/bash
JOBS ?= $(shell nproc)
BUILD ?= build
FUZZ_SECONDS ?= 30

.PHONY: all bootstrap build asan fuzz test demo format check-format clean

all: build

bootstrap:
	scripts/bootstrap $(BUILD)/fixtures

build: bootstrap
	cmake -S . -B $(BUILD)/release -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD)/release -j$(JOBS)

asan: bootstrap
	cmake -S . -B $(BUILD)/asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 -DLJPROF_SANITIZE=ON
	cmake --build $(BUILD)/asan -j$(JOBS)

fuzz: bootstrap
	CC=clang CXX=clang++ cmake -S . -B $(BUILD)/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLJPROF_FUZZ=ON
	cmake --build $(BUILD)/fuzz -j$(JOBS)

# Normal build + tests, the same tests under ASan+UBSan, the fuzzers for a bounded time,
# and the formatting check.
test: build asan fuzz
	ctest --test-dir $(BUILD)/release --output-on-failure -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(BUILD)/asan --output-on-failure -j$(JOBS)
	scripts/run-fuzzers $(BUILD)/fuzz $(FUZZ_SECONDS)
	scripts/check-format

demo: build
	scripts/demo $(BUILD)/release/src/cli/ljprof

format:
	clang-format -i $$(git ls-files '*.cc' '*.h' '*.c')

check-format:
	scripts/check-format

clean:
	rm -rf $(BUILD)/release $(BUILD)/asan $(BUILD)/fuzz
