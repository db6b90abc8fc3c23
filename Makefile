# tensorsafe: `make demo` installs, builds and runs the demo; `make test`
# installs, builds and runs every test.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo test test-cpp test-interop bench asan clean

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

# The conversion interop tests: `tensorsafe convert` against numpy,
# safetensors, gguf-py and webdataset from .venv (tests/interop/).
test-interop: build
	@TENSORSAFE_CLI=$(BUILD)/bin/tensorsafe .venv/bin/python -m pytest tests/interop -q

test: test-cpp test-interop

bench: build
	@$(BUILD)/bin/format_bench

clean:
	rm -rf $(BUILD)
