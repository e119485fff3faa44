# dlkit: the README's two commands are `make demo` and `make test`; each installs what it needs
# and builds first, so either works alone on a fresh Debian machine.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=

FUZZ_SECONDS ?= 60

.PHONY: all build configure deps test test-sanitize fuzz demo bench clean

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
	  exit $$rc
	$(MAKE) test-sanitize

# The suite under ASan + UBSan, the fuzz targets for 15 s each, the thread pool and dist/ under
# TSan (clang, -O1, CPU only; build-asan/ and build-tsan/; docs/RELIABILITY.md).
test-sanitize: deps
	JOBS=$(JOBS) ./scripts/test-sanitize.sh

# Every fuzz target for FUZZ_SECONDS seconds (default 60), continuing from build-asan/fuzz-work.
fuzz: deps
	JOBS=$(JOBS) ./scripts/test-sanitize.sh --build-only
	./scripts/fuzz.sh build-asan $(FUZZ_SECONDS) $(JOBS)

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
	rm -rf $(BUILD) build-asan build-tsan
