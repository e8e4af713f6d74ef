# pmhash — the front door.
#   make test    build (warnings as errors) and run every test
#   make bench   build a release driver and compare the schemes on an emulated-PM pool
#   make ci      test + ASan/UBSan + TSan builds (what .ci/run runs)
JOBS    ?= 2
PYTHON  ?= /usr/bin/python3
POOL_DIR ?= /dev/shm
CMAKE_COMMON = -DPMHASH_WERROR=ON -DPython_EXECUTABLE=$(PYTHON)

.PHONY: all deps build test test-asan test-tsan test-pip ci bench bench-suite results format format-check clean fuzz

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B build/test $(CMAKE_COMMON) >/dev/null
	cmake --build build/test -j$(JOBS)

test: build
	cd build/test && ctest --output-on-failure -j$(JOBS)

# Sanitizer builds: lighter crash exploration (they run 5-20x slower). Under TSan the damage
# fuzz (forked, single-threaded children) runs each damage kind once per scheme and format:
# 72 cases, not 360 (it took 194 s of the TSan run).
test-asan: deps
	cmake -S . -B build/asan $(CMAKE_COMMON) -DPMHASH_SANITIZE=address,undefined \
	  -DPMHASH_BUILD_BENCH=OFF -DPMHASH_BUILD_PYTHON=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build build/asan -j$(JOBS)
	cd build/asan && PMHASH_CRASH_LIGHT=1 ctest --output-on-failure -j$(JOBS)

test-tsan: deps
	cmake -S . -B build/tsan $(CMAKE_COMMON) -DPMHASH_SANITIZE=thread \
	  -DPMHASH_BUILD_BENCH=OFF -DPMHASH_BUILD_PYTHON=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build build/tsan -j$(JOBS)
	cd build/tsan && PMHASH_CRASH_LIGHT=1 PMHASH_FUZZ_CASES=72 \
	  TSAN_OPTIONS="halt_on_error=1 die_after_fork=0" ctest --output-on-failure -j$(JOBS)

# libFuzzer on damaged pools (tests/fuzz/pool_fuzz.cpp), ASan+UBSan, FUZZ_TIME seconds.
# Optional: needs clang; the rest of the build never does. Soak the forked-child fuzz test
# instead with: PMHASH_FUZZ_CASES=5000 build/test/pmhash-tests --gtest_filter='DamageFuzz*'
FUZZ_TIME ?= 60
fuzz: deps
	@command -v clang++ >/dev/null || { echo "make fuzz needs clang++ (apt install clang)"; exit 1; }
	CC=clang CXX=clang++ cmake -S . -B build/fuzz $(CMAKE_COMMON) -DPMHASH_BUILD_FUZZ=ON \
	  -DPMHASH_SANITIZE=address,undefined -DPMHASH_BUILD_TESTS=OFF -DPMHASH_BUILD_BENCH=OFF \
	  -DPMHASH_BUILD_PYTHON=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build build/fuzz -j$(JOBS) --target pmhash-fuzz
	mkdir -p build/fuzz/corpus
	build/fuzz/pmhash-fuzz -max_total_time=$(FUZZ_TIME) -timeout=10 build/fuzz/corpus

# `pip install .` into a fresh virtualenv (build backend from PyPI), then the Python tests
# against the installed package.
test-pip: deps
	rm -rf build/venv
	$(PYTHON) -m venv --system-site-packages build/venv
	build/venv/bin/pip install -q .
	cd build && venv/bin/python -m pytest -q -p no:cacheprovider ../python/tests

ci: test test-asan test-tsan test-pip format-check

build/release/pmhash-bench: deps FORCE
	cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DPMHASH_CRASH_HOOKS=OFF \
	  -DPMHASH_BUILD_TESTS=OFF -DPMHASH_BUILD_PYTHON=OFF >/dev/null
	cmake --build build/release -j$(JOBS) --target pmhash-bench
FORCE:

# The quick suite: every scheme, fixed 8/8, 2 threads, 10M keys; a table, JSON and a plot.
bench: build/release/pmhash-bench
	mkdir -p results
	build/release/pmhash-bench --suite quick --pool-dir $(POOL_DIR) --json results/quick.json \
	  --csv results/quick.csv
	$(PYTHON) bench/plot.py results/quick.json --out results/quick.png

# One paper's experiments: make bench-suite SUITE=turbohash
bench-suite: build/release/pmhash-bench
	mkdir -p results
	build/release/pmhash-bench --suite $(SUITE) --pool-dir $(POOL_DIR) \
	  --json results/$(SUITE).json --csv results/$(SUITE).csv
	$(PYTHON) bench/plot.py results/$(SUITE).json --out results/$(SUITE).png

# docs/RESULTS.md's data and figures: the cross-scheme comparisons (compare: 1M keys, every
# setup; large: 20M keys, pre-sized and growing; writes: flushes and fences per write; churn:
# space under churn) at full size and every paper's suite scaled by RESULTS_SCALE (rows
# whose size is the point are not scaled), each run RESULTS_REPEAT times (medians, min-max).
RESULTS_SCALE ?= 0.2
RESULTS_REPEAT ?= 3
RESULTS_SUITES ?= compare large writes churn turbohash smartht wophi hdnh pmeh
results: build/release/pmhash-bench
	mkdir -p docs/results
	for s in $(RESULTS_SUITES); do \
	  scale=$(RESULTS_SCALE); case $$s in compare|large) scale=1;; esac; \
	  PMHASH_BENCH_SCALE=$$scale build/release/pmhash-bench --suite $$s --repeat $(RESULTS_REPEAT) \
	    --pool-dir $(POOL_DIR) --json docs/results/$$s.json --csv docs/results/$$s.csv || exit 1; \
	done
	$(PYTHON) bench/results.py docs/results

SOURCES = $$(git ls-files --cached --others --exclude-standard '*.cpp' '*.hpp' '*.h')
format:
	clang-format -i $(SOURCES)

format-check:
	clang-format --dry-run -Werror $(SOURCES)

clean:
	rm -rf build results
