# Makefile: a thin layer over CMake. `make run` builds and runs the main job (devrt demo on the
# best backend present: every result checked, a report in $(BUILD)/report; it fails if any check
# failed); `make test` builds and runs the whole test suite.
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# cmake --build runs make beneath this one: no "Entering/Leaving directory" lines from it
MAKEFLAGS += --no-print-directory

.PHONY: all build run test clean

all: build

build:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/devrt demo --report $(BUILD)/report

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
