# dlkit: the README's two commands are `make demo` and `make test`; each installs what it needs
# and builds first, so either works alone on a fresh Debian machine.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=
# Ninja when it is installed (scripts/install-deps.sh installs it) and no CMAKE_GENERATOR is set:
# it compiles a library's objects while the libraries below it still archive, where Make's
# generator finishes each target before the next starts (two cores sat half idle at the end of
# each library). scripts/test-sanitize.sh makes the same choice for its build folders.
GENERATOR_FLAG := $(if $(CMAKE_GENERATOR),,$(if $(shell command -v ninja 2> /dev/null),-G Ninja))

FUZZ_SECONDS ?= 60

.PHONY: all build configure deps test test-emulated test-sanitize fuzz demo bench clean

all: build

deps:
	./scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(GENERATOR_FLAG) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Every phase (deps, build, ctest, the emulated device, the sanitizers and fuzzing), each timed:
# scripts/test.sh prints a table of the phases' wall times at the end.
test:
	BUILD=$(BUILD) JOBS=$(JOBS) MAKE="$(MAKE)" ./scripts/test.sh

# The suite under ASan + UBSan, the fuzz targets for 10 s each, the thread pool and dist/ under
# TSan (clang, -O1, CPU only; build-asan/ and build-tsan/; docs/RELIABILITY.md).
test-sanitize: deps
	JOBS=$(JOBS) ./scripts/test-sanitize.sh

# Every fuzz target for FUZZ_SECONDS seconds (default 60), continuing from build-asan/fuzz-work.
fuzz: deps
	JOBS=$(JOBS) ./scripts/test-sanitize.sh --build-only
	./scripts/fuzz.sh build-asan $(FUZZ_SECONDS) $(JOBS)

# The CUDA backend on the emulated device (docs/CUDA.md), in the normal build folder: the
# emulated device library and the programs linked to it, then their tests. Needs the CUDA
# toolkit (no GPU).
test-emulated: configure
	BUILD=$(BUILD) JOBS=$(JOBS) ./scripts/test-emulated.sh

demo: deps
	$(MAKE) build
	./scripts/demo.sh $(BUILD)

bench: deps
	$(MAKE) build
	./scripts/bench.sh $(BUILD)
	./scripts/bench-dist.sh $(BUILD)
	./scripts/bench-sweep.sh $(BUILD)
	./scripts/bench-tokenize.sh $(BUILD)
	./scripts/bench-hf-tokenizer.sh $(BUILD)
	./scripts/bench-init-from.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-tsan
