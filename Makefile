# tensorsafe: `make demo` installs, builds and runs the demo; `make test`
# installs, builds and runs every test.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo test test-cpp bench asan clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@bash scripts/demo.sh $(BUILD)

test-cpp: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test: test-cpp

# The whole suite (and the fuzz corpus replay) under ASan + UBSan, built with
# clang in $(ASAN_BUILD), -O1 with asserts on, no sanitizer recovery. Every
# test runs in full: the slowest under ASan take under 30 s (GGUF bit flips
# 23 s; the 200-round SIGKILL crash test 4.5 s), so none is shortened;
# TS_CRASH_ROUNDS still raises or lowers the crash test's rounds.
ASAN_BUILD ?= build-asan
asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
	  -DCMAKE_CXX_COMPILER=clang++ \
	  -DTENSORSAFE_SANITIZE=address,undefined -DTENSORSAFE_BUILD_BENCH=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && \
	  ASAN_OPTIONS=$${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1} \
	  UBSAN_OPTIONS=$${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
	  ctest --output-on-failure -j $(JOBS)

bench: build
	@$(BUILD)/bin/format_bench

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
