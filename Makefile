# seer — build, test and run.
#
#   make setup     install Debian deps, build, run the example (README step 1)
#   make test      unit + integration tests, then the sanitizer runs (README step 2)
#   make           build bin/ and lib/ (release)
#   make asan      ASan+UBSan build, unit and integration tests under it
#   make tsan      TSan build, unit tests and the ring/prefetcher stress under it
#   make test-stress  the integration tests beside CPU hogs (stress-ng): no test
#                  may race the job it observes
#
# Variants build into build/<variant>/; the release variant also fills bin/ and lib/.

V ?= release
CC ?= gcc
PY := /usr/bin/python3
B := build/$(V)

ifeq ($(V),release)
  OPT := -O2
  BIN := bin
  LIB := lib
else ifeq ($(V),asan)
  OPT := -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
  BIN := $(B)/bin
  LIB := $(B)/lib
else ifeq ($(V),tsan)
  # -Wno-tsan: TSan does not model fences, and the doorbell protocol pairs
  # seq_cst fences across processes (which TSan cannot see anyway)
  OPT := -O1 -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan
  BIN := $(B)/bin
  LIB := $(B)/lib
else ifeq ($(V),fuzz)
  CC := clang
  OPT := -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
	-fno-omit-frame-pointer
  BIN := $(B)/bin
  LIB := $(B)/lib
else
  $(error unknown variant V=$(V): release, asan, tsan or fuzz)
endif

SONAME := libseer.so.0
SOVER := 0.1.0
PKGS := libxxhash inih zlib libdeflate hdf5-openmpi hwloc libfabric libturbojpeg libjpeg libpng jansson
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CRIT_LIBS := $(shell pkg-config --libs criterion 2>/dev/null)

CFLAGS := -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -g $(OPT) \
	-fPIC -fvisibility=hidden -ffunction-sections -Iinclude -MMD -MP $(PKG_CFLAGS)
LDFLAGS := $(filter -fsanitize=%,$(OPT))
LIBS := $(PKG_LIBS) -lpthread -lm

# src/ is one folder per subsystem (src/README.md). libseer is built from the
# client-safe folders (nothing there logs, aborts or exits: src/common/base.h)
# and the two xform files that parse a transform and pick its crop; the
# daemon, the tools and the tests link every folder
CLIENT_SAFE_SRC := $(wildcard src/common/*.c src/sampler/*.c) src/xform/xf_config.c src/xform/xf_crop.c
CORE_SRC := $(wildcard $(patsubst %,src/%/*.c,common sampler config catalog fmt xform plan net sim util))
# libseer: client code only (no logging, no allocator that aborts)
CLIENT_SRC := $(wildcard client/*.c) $(CLIENT_SAFE_SRC)
DAEMON_SRC := $(wildcard daemon/*.c)
# daemon modules the unit tests drive directly, without a daemon
UNIT_DAEMON_SRC := daemon/staging.c daemon/route.c daemon/drain_pace.c daemon/node_path.c daemon/resume_file.c \
	daemon/nvme.c
UNIT_SRC := $(wildcard tests/unit/test_*.c)

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))
CORE_OBJ := $(call obj,$(CORE_SRC))
CLIENT_OBJ := $(call obj,$(CLIENT_SRC))
DAEMON_OBJ := $(call obj,$(DAEMON_SRC))
UNIT_BIN := $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRC))
# tools/<name>.c -> bin/<name>, linked with the core modules
TOOL_SRC := $(wildcard tools/*.c)
TOOLS := $(BIN)/seer-trainer $(patsubst tools/%.c,$(BIN)/%,$(TOOL_SRC)) \
	$(if $(wildcard tests/integration/hostile.c),$(BIN)/seer-hostile) $(BIN)/seer-apitest
# the PFS emulator: a FUSE file system writing its counters with libjansson;
# its modules are in tools/pfsemu/ (the timing model is also unit-tested)
PFSEMU_PKGS := fuse3 jansson
FUSE_CFLAGS := $(shell pkg-config --cflags $(PFSEMU_PKGS) 2>/dev/null)
FUSE_LIBS := $(shell pkg-config --libs $(PFSEMU_PKGS) 2>/dev/null)
PFSEMU_OBJ := $(call obj,$(wildcard tools/pfsemu/*.c))

.SECONDARY:
.PHONY: all setup deps demo test unit integration asan tsan sanitize clean install fuzz fuzz-run \
	bench check-aarch64 test-stress
all: $(BIN)/seerd $(LIB)/libseer.so $(TOOLS)

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/libcore.a: $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BIN)/seerd: $(DAEMON_OBJ) $(B)/libcore.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# the resampler's widening multiply-add loops vectorise only under -O3's cost model
$(B)/obj/src/xform/xf_resample.o: CFLAGS += -O3

$(LIB)/libseer.so.$(SOVER): $(CLIENT_OBJ) client/libseer.map
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=client/libseer.map \
		-Wl,--no-undefined -Wl,--gc-sections -o $@ $(CLIENT_OBJ) -lpthread -lz -lm

$(LIB)/libseer.so: $(LIB)/libseer.so.$(SOVER)
	ln -sf libseer.so.$(SOVER) $(LIB)/$(SONAME)
	ln -sf libseer.so.$(SOVER) $@

# a C trainer used by the example and the tests (links the public library only)
$(BIN)/seer-trainer: $(B)/obj/tests/integration/trainer.o $(LIB)/libseer.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(LIB) -lseer -Wl,-rpath,'$$ORIGIN/../lib' -lz

# C-API misuse scenarios for test_client_api.py (the public library only)
$(BIN)/seer-apitest: $(B)/obj/tests/integration/apitest.o $(LIB)/libseer.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(LIB) -lseer -Wl,-rpath,'$$ORIGIN/../lib' -lz -lpthread

# a deliberately misbehaving client for the fault tests (speaks the wire
# protocol itself, so it can break every rule of it)
$(BIN)/seer-hostile: $(B)/obj/tests/integration/hostile.o $(B)/libcore.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# the PFS emulator is a FUSE file system: its own flags and modules
$(B)/obj/tools/seer-pfsemu.o $(PFSEMU_OBJ): CFLAGS += $(FUSE_CFLAGS)
# (only src/util/util.o of libcore is used: no libfabric/MPI libraries, whose
# constructors take signals such as SIGTERM)
$(BIN)/seer-pfsemu: $(B)/obj/tools/seer-pfsemu.o $(PFSEMU_OBJ) $(B)/libcore.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(FUSE_LIBS) -lpthread -lm

# the benchmark trainer speaks the client protocol itself (no libseer.so)
$(BIN)/seer-bench: $(B)/obj/tools/seer-bench.o $(call obj,$(wildcard client/*.c)) $(B)/libcore.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# seerctl needs none of the daemon's large libraries (MPI, HDF5, libfabric,
# hwloc): --as-needed leaves them out, so it starts in a tenth of the time
# (1.35 s -> 0.25 s under ASan, which the status-polling tests feel)
$(BIN)/seerctl: $(B)/obj/tools/seerctl.o $(B)/libcore.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -Wl,--as-needed $(LIBS)

$(BIN)/%: $(B)/obj/tools/%.o $(B)/libcore.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# The unit tests link only the libraries their code uses (--as-needed): MPI,
# HDF5 and libfabric loaded into each of Criterion's test processes cost
# 0.3 s a test under ASan (test_config: 112 s -> 43 s)
$(B)/tests/%: $(B)/obj/tests/unit/%.o $(B)/obj/tests/unit/sanitizer_shim.o \
		$(call obj,$(UNIT_DAEMON_SRC)) $(B)/libcore.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -Wl,--as-needed $(CRIT_LIBS) $(LIBS)
# the emulator's timing model, tested on its own
$(B)/tests/test_pfsemu_model: $(B)/obj/tests/unit/test_pfsemu_model.o \
		$(B)/obj/tests/unit/sanitizer_shim.o $(B)/obj/tools/pfsemu/model.o $(B)/libcore.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -Wl,--as-needed $(CRIT_LIBS) $(LIBS)

# libFuzzer harnesses (clang): make fuzz [FUZZ_SECONDS=n] runs each for n s on
# a generated seed corpus plus the corpus it grew before, after replaying
# tests/fuzz/regressions/<harness>/* (inputs that once crashed)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(patsubst tests/fuzz/%.c,$(B)/fuzz/%,$(FUZZ_SRC))
FUZZ_SECONDS ?= 10
$(B)/fuzz/%: $(B)/obj/tests/fuzz/%.o $(B)/libcore.a
	@mkdir -p $(dir $@)
	$(CC) -fsanitize=fuzzer,address,undefined -o $@ $^ $(LIBS)

# the client-API harness links libseer's objects only (no libcore)
$(B)/fuzz/fuzz_client: $(B)/obj/tests/fuzz/fuzz_client.o $(CLIENT_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -fsanitize=fuzzer,address,undefined -o $@ $^ -lpthread -lz

fuzz:
	$(MAKE) -j$(JOBS) all
	$(MAKE) -j$(JOBS) V=fuzz fuzz-run

fuzz-run: $(FUZZ_BIN)
	@set -e; tests/fuzz/make_seeds.sh $(B)/seeds >/dev/null; \
	for f in $(FUZZ_BIN); do n=$$(basename $$f); \
	  mkdir -p $(B)/corpus/$$n $(B)/artifacts; \
	  if ls tests/fuzz/regressions/$$n/* >/dev/null 2>&1; then \
	    $$f -timeout=10 tests/fuzz/regressions/$$n/* > $(B)/$$n.regressions.log 2>&1 || \
	      { tail -40 $(B)/$$n.regressions.log; echo "FUZZ REGRESSION in $$n (tests/fuzz/regressions/$$n)"; exit 1; }; \
	    echo "$$n: $$(ls tests/fuzz/regressions/$$n | wc -l) regression inputs, no crash"; fi; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
	    -artifact_prefix=$(B)/artifacts/$$n- $(B)/corpus/$$n $(B)/seeds/$$n \
	    > $(B)/$$n.log 2>&1 || { tail -40 $(B)/$$n.log; echo "FUZZ CRASH in $$n: reproducer in $(B)/artifacts/"; exit 1; }; \
	  echo "$$n: $$(grep -o 'stat::number_of_executed_units: [0-9]*' $(B)/$$n.log | grep -o '[0-9]*$$') executions in $(FUZZ_SECONDS) s, corpus $$(ls $(B)/corpus/$$n | wc -l), no crash"; \
	done

# libseer built for aarch64 (Grace, A64FX) with Debian's cross compiler
# (gcc-aarch64-linux-gnu): the client library has no x86-only code
A64 := build/aarch64
check-aarch64:
	@mkdir -p $(A64)
	@set -e; for f in $(CLIENT_SRC); do \
	  aarch64-linux-gnu-gcc -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -O2 \
	    -fPIC -fvisibility=hidden -ffunction-sections -Iinclude -c $$f \
	    -o $(A64)/$$(echo $$f | tr / _).o; done
	@# (linked without --no-undefined: Debian has no arm64 zlib for the host;
	@# crc32 stays a dynamic reference to libz, as on x86)
	aarch64-linux-gnu-gcc -shared -Wl,--version-script=client/libseer.map \
		-Wl,--gc-sections -o $(A64)/libseer.so $(A64)/*.o -lpthread -lm
	@file $(A64)/libseer.so | grep -q aarch64 && tests/unit/libseer_symbols.sh $(A64)/libseer.so

# benchmarks (not tests: they print numbers and never fail on a timing)
bench: all
	$(PY) scripts/bench/run.py $(BENCH_ARGS)

deps:
	@scripts/deps.sh

# the builds of setup, test, sanitize and fuzz use every core (CI calls plain
# `make setup` and `make test`); the tests themselves run as before
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

# README step 1: everything a new machine needs, then the example job
setup: deps
	$(MAKE) -j$(JOBS) all
	$(MAKE) demo

demo: all
	@scripts/demo.sh

# Under TSan the unit tests run without address-space randomisation: Criterion
# (BoxFort) maps its shared arena at a random address in the one range TSan
# leaves to applications, where PIE binaries and their heap also live, and a
# test process re-executed with another random layout maps it there again
# with MAP_FIXED (tests/unit/sanitizer_shim.c). With one fixed layout the
# address the runner found free is free in every test process. (A CI run
# lost test_xform's whole runner to a segfault once; not reproduced in 100
# runs here.)
UNIT_RUN := $(if $(filter tsan,$(V)),$(shell setarch $$(uname -m) -R true 2>/dev/null && echo setarch $$(uname -m) -R))
unit: $(UNIT_BIN) $(LIB)/libseer.so
	@PREFIX="$(UNIT_RUN)" tests/unit/run.sh $(UNIT_BIN)
	@echo "== libseer's symbols"; tests/unit/libseer_symbols.sh $(LIB)/libseer.so.$(SOVER)
	@if [ "$(V)" = release ]; then echo "== sampler vs torch DistributedSampler"; \
		$(PY) tests/unit/sampler_vs_torch.py $(LIB)/libseer.so && \
		echo "== checkpoint records through the Python shim and torch.save" && \
		$(PY) tests/unit/sampler_resume.py $(LIB)/libseer.so && \
		echo "== transform vs PIL + torchvision" && \
		$(PY) tests/unit/xform_vs_torch.py $(LIB)/libseer.so $(BIN)/seer-xform; fi

integration: all
	@V=$(V) BIN=$(BIN) LIB=$(LIB) SEER_TESTS="$(SEER_TESTS)" tests/integration/run.sh

# The integration tests (release build, or SEER_TESTS="...") on a busy machine:
# STRESS_CPUS stress-ng CPU hogs run beside them, started here and always
# stopped, whatever the outcome (docs/faults.md, "Tests on a busy machine").
STRESS_CPUS ?= 2
test-stress: all
	@command -v stress-ng >/dev/null || { echo "test-stress needs stress-ng (make deps)"; exit 1; }
	@stress-ng --cpu $(STRESS_CPUS) --timeout 2h --quiet & hog=$$!; \
	trap 'kill $$hog 2>/dev/null; wait $$hog 2>/dev/null; exit 130' INT TERM HUP; \
	sleep 1; kill -0 $$hog 2>/dev/null || { echo "stress-ng did not start"; exit 1; }; \
	echo "== integration tests beside stress-ng --cpu $(STRESS_CPUS) (pid $$hog), load $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	start=$$(date +%s); rc=0; \
	V=release BIN=bin LIB=lib SEER_TESTS="$(SEER_TESTS)" tests/integration/run.sh || rc=$$?; \
	echo "== test-stress: $$([ $$rc -eq 0 ] && echo passed || echo FAILED) in $$(( $$(date +%s) - start )) s, load $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	kill $$hog 2>/dev/null; wait $$hog 2>/dev/null; exit $$rc

# README step 2
test:
	$(MAKE) -j$(JOBS) all
	$(MAKE) -j$(JOBS) unit
	$(MAKE) integration
	$(MAKE) sanitize
	$(MAKE) fuzz

# the daemon-centric integration tests again with sanitized binaries (the
# Python trainers keep the release libseer)
SAN_TESTS := test_single_node test_nvme test_multi_node test_ops test_formats_e2e test_faults \
	test_client_api test_replicas test_transform test_transform_threads test_hostile_daemon \
	test_huge_pages test_exact_paths test_startup test_tar test_checkpoint test_catalog_rewrite
# (under TSan also the peers, replicas, hostile clients and the exact paths:
# tests/tsan.supp suppresses Open MPI's own lock-order report in MPI_Init;
# test_faults and test_transform expect SIGSEGV and RSS bounds TSan changes)
TSAN_TESTS := test_single_node test_nvme test_formats_e2e test_client_api test_transform_threads \
	test_startup test_multi_node test_replicas test_hostile_daemon test_exact_paths test_ops \
	test_checkpoint
sanitize:
	$(MAKE) -j$(JOBS) V=asan all unit
	$(MAKE) V=asan integration SEER_TESTS="$(SAN_TESTS)"
	$(MAKE) -j$(JOBS) V=tsan all unit
	$(MAKE) V=tsan integration SEER_TESTS="$(TSAN_TESTS)"

asan:
	$(MAKE) V=asan all unit integration

tsan:
	$(MAKE) V=tsan all unit

# make install PREFIX=/opt/seer  (DESTDIR for packaging)
PREFIX ?= /usr/local
PYDIR ?= $(PREFIX)/lib/python3/dist-packages
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PYDIR)/seer
	install -m 0755 bin/seerd bin/seerctl bin/seer-plan bin/seer-bench bin/seer-pfsemu \
		$(DESTDIR)$(PREFIX)/bin/
	install -m 0755 lib/libseer.so.$(SOVER) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libseer.so.$(SOVER) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf libseer.so.$(SOVER) $(DESTDIR)$(PREFIX)/lib/libseer.so
	install -m 0644 include/seer.h $(DESTDIR)$(PREFIX)/include/
	sed 's|@PREFIX@|$(PREFIX)|' client/seer.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/seer.pc
	install -m 0644 docs/man/seerd.1 docs/man/seerctl.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 client/python/seer/__init__.py client/python/seer/torch.py client/python/seer/xform.py \
		client/python/seer/_workers.py client/python/seer/checkpoint.py \
		$(DESTDIR)$(PYDIR)/seer/
	echo 'LIB = "$(PREFIX)/lib/$(SONAME)"' > $(DESTDIR)$(PYDIR)/seer/_libpath.py
	@echo "installed under $(DESTDIR)$(PREFIX); Python shim in $(DESTDIR)$(PYDIR)"

clean:
	rm -rf build bin lib

-include $(shell find build -name '*.d' 2>/dev/null)
