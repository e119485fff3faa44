# dlkit: the README's two commands are `make demo` and `make test`; each installs what it needs
# and builds first, so either works alone on a fresh Debian machine.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build configure deps test demo bench clean

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
	rm -rf $(BUILD)
