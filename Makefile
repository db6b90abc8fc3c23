# tensorsafe: `make demo` installs, builds and runs the demo; `make test`
# installs, builds and runs every test (C++ through CTest, then Python through
# pytest). Both also install the Python package into .venv.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# Unity builds of the library and the test suites (cmake/UnityByFolder.cmake):
# each source folder compiles as one translation unit, about half the CPU time
# of a clean build. For an edit-compile loop, where one edit then recompiles
# its whole folder, use a second tree: make BUILD=build-dev UNITY=OFF
UNITY ?= ON

.PHONY: all deps configure build python demo test test-cpp test-python test-interop bench asan format format-check clean

all: build

deps:
	@bash scripts/install-deps.sh

# -g1: line tables and function names, enough for backtraces and profiles; full
# -g triples the objects (the library is 300 MB with it) and costs CI ~25% of
# its compile time. For a debugger:
#   make CMAKE_FLAGS='-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g -DNDEBUG"'
configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DTENSORSAFE_UNITY=$(UNITY) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The Python package (pyproject.toml, scikit-build-core): built in
# build/python-*, incrementally, and installed into .venv with its CLI. It
# links the library and ships the CLI of $(BUILD) (TENSORSAFE_PREBUILT_DIR)
# rather than compiling them again.
python: configure
	@cmake --build $(BUILD) -j $(JOBS) --target tensorsafe tensorsafe_cli
	@CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) .venv/bin/python -m pip install -q --disable-pip-version-check \
	  --no-build-isolation --no-deps -C cmake.define.TENSORSAFE_PREBUILT_DIR=$(abspath $(BUILD)) . \
	  && echo "python: tensorsafe installed into .venv"

demo: build python
	@bash scripts/demo.sh $(BUILD)

test-cpp: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The conversion interop tests: `tensorsafe convert` against numpy,
# safetensors, gguf-py and webdataset from .venv (tests/interop/).
test-interop: build
	@TENSORSAFE_CLI=$(BUILD)/bin/tensorsafe TENSORSAFE_COMPAT_DUMP=$(BUILD)/bin/compat_dump .venv/bin/python -m pytest tests/interop -q

# pytest exits 5 when it collects nothing: that is a failure here too.
test-python: python
	@.venv/bin/python -m pytest -q tests/python; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "test-python: no Python tests were collected" >&2; exit 1; fi; exit $$rc

test: test-cpp test-python test-interop

# The whole suite (and the fuzz corpus replay) under ASan + UBSan, built with
# clang in $(ASAN_BUILD), -O1 with asserts on, no sanitizer recovery. Every
# test runs in full: the slowest under ASan take under 30 s (GGUF bit flips
# 23 s; the 200-round SIGKILL crash test 4.5 s), so none is shortened;
# TS_CRASH_ROUNDS still raises or lowers the crash test's rounds.
ASAN_BUILD ?= build-asan
asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" \
	  -DCMAKE_CXX_COMPILER=clang++ \
	  -DTENSORSAFE_SANITIZE=address,undefined -DTENSORSAFE_BUILD_BENCH=OFF -DTENSORSAFE_UNITY=$(UNITY) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && \
	  ASAN_OPTIONS=$${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1} \
	  UBSAN_OPTIONS=$${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
	  ctest --output-on-failure -j $(JOBS)

bench: build
	@$(BUILD)/bin/format_bench

# C++ formatting (.clang-format, Debian's clang-format 14): `format` rewrites
# every C++ file in place; `format-check` (CI) fails when one differs from
# clang-format's output. The whole tree was formatted at once on 2026-11-28.
FORMAT_GLOBS = 'src/*.cc' 'src/*.h' 'include/*.h' 'tools/*.cc' 'tools/*.h' 'python/src/*.cc' 'python/src/*.h' \
  'tests/*.cc' 'tests/*.h' 'fuzz/*.cc' 'fuzz/*.h' 'bench/*.cc' 'bench/*.h' 'examples/*.cc'
FORMAT_FILES = $(shell { git ls-files $(FORMAT_GLOBS); git ls-files --others --exclude-standard -- $(FORMAT_GLOBS); } | sort -u)
format: deps
	@$(if $(FORMAT_FILES),clang-format -i $(FORMAT_FILES),true)
	@echo "format: $(words $(FORMAT_FILES)) files"

format-check: deps
	@bad=$$(for f in $(FORMAT_FILES); do clang-format $$f | cmp -s - $$f || echo $$f; done); \
	  if [ -n "$$bad" ]; then echo "format-check: not formatted as .clang-format says (make format):"; echo "$$bad"; exit 1; fi; \
	  echo "format-check: $(words $(FORMAT_FILES)) files, all formatted"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
