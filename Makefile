# dlkit: the README's two commands are `make demo` and `make test`; each installs what it needs
# and builds first, so either works alone on a fresh Debian machine.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=

FUZZ_SECONDS ?= 60

.PHONY: all build configure deps test test-emulated test-sanitize fuzz demo bench clean

all: build

deps:
	./scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: deps
	$(MAKE) build
	@# ctest lists skipped tests without their reason: print the reason each one gave.
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS); rc=$$?; \
	  grep -h '^skipped:' $(BUILD)/Testing/Temporary/LastTest.log 2>/dev/null | sort -u | sed 's/^/ctest: /'; \
	  $(MAKE) test-emulated || rc=1; \
	  exit $$rc
	$(MAKE) test-sanitize

# The suite under ASan + UBSan, the fuzz targets for 10 s each, the thread pool and dist/ under
# TSan (clang, -O1, CPU only; build-asan/ and build-tsan/; docs/RELIABILITY.md).
test-sanitize: deps
	JOBS=$(JOBS) ./scripts/test-sanitize.sh

# Every fuzz target for FUZZ_SECONDS seconds (default 60), continuing from build-asan/fuzz-work.
fuzz: deps
	JOBS=$(JOBS) ./scripts/test-sanitize.sh --build-only
	./scripts/fuzz.sh build-asan $(FUZZ_SECONDS) $(JOBS)

# The CUDA backend on an emulated device (docs/CUDA.md): its own build folder, only the targets
# its tests need. Needs NVIDIA's headers (no GPU, no CUDA libraries).
EMU_BUILD ?= $(BUILD)-emu
EMU_TARGETS = dl-train dl-bench dl-shard kernel_fault_worker test_cuda_emulated test_cuda_emulator backend-ops \
              test_cuda test_cuda_host
test-emulated:
	@if [ ! -f /usr/local/cuda/include/cuda_runtime.h ] && [ -z "$$CUDA_HOME" ]; then \
	  echo "ctest: emulated CUDA device skipped: NVIDIA's headers (cuda_runtime.h) not found"; exit 0; fi; \
	[ -f $(EMU_BUILD)/CMakeCache.txt ] || cmake -S . -B $(EMU_BUILD) -DCMAKE_BUILD_TYPE=Release \
	  -DDL_CUDA_EMULATION=ON $(CMAKE_FLAGS) || exit 1; \
	cmake --build $(EMU_BUILD) -j $(JOBS) --target $(EMU_TARGETS) || exit 1; \
	ctest --test-dir $(EMU_BUILD) --output-on-failure -j $(JOBS) -R '^(cuda_emulated.*|cuda_emulator|backend-ops.*|cuda|cuda-host)$$'

demo: deps
	$(MAKE) build
	./scripts/demo.sh $(BUILD)

bench: deps
	$(MAKE) build
	./scripts/bench.sh $(BUILD)
	./scripts/bench-dist.sh $(BUILD)
	./scripts/bench-sweep.sh $(BUILD)
	./scripts/bench-tokenize.sh $(BUILD)
	./scripts/bench-init-from.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(EMU_BUILD) build-asan build-tsan
