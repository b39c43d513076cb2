# relaybus: PGXS build of the extension (C++17), plus the core unit tests and the test
# runner. `make` builds, `make install` installs, `make test` runs every test.

EXTENSION = relaybus
MODULE_big = relaybus
# The version, in one place: relaybus.control's default_version.
RELAYBUS_VERSION := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" relaybus.control)

CORE_SRCS = $(sort $(wildcard src/core/*.cpp))
PG_SRCS = $(sort $(wildcard src/pg/*.cpp))
OBJS = $(CORE_SRCS:.cpp=.o) $(PG_SRCS:.cpp=.o)
# The objects of sources outside the extension: a test program's own files (build/test/)
# and the runtime's (build/client/, mk/client-library.mk), which the test programs link.
test_objs = $(patsubst %.cpp,build/test/%.o,$(1))
runtime_objs = $(patsubst src/%.cpp,build/client/%.o,$(1))

# Extension scripts, built from sql/parts/ by scripts/build-sql (and committed).
SQL_SCRIPTS = sql/relaybus--0.1.0.sql sql/relaybus--0.2.0.sql sql/relaybus--0.1.0--0.2.0.sql sql/relaybus--0.2.1.sql sql/relaybus--0.2.0--0.2.1.sql sql/relaybus--0.3.0.sql sql/relaybus--0.2.1--0.3.0.sql
DATA = $(SQL_SCRIPTS)

# pg_regress: one file per topic in sql/ and expected/
REGRESS = $(sort $(basename $(notdir $(filter-out sql/relaybus--%,$(wildcard sql/*.sql)))))
REGRESS_OPTS = --load-extension=relaybus

PG_CXXFLAGS = -std=c++17 -Wno-register -Wall -Wextra -Wno-unused-parameter \
              -Wno-missing-field-initializers -MMD -MP
# clang builds LLVM bitcode of every object for JIT inlining; it needs the same dialect.
override BITCODE_CXXFLAGS += -std=c++17 -Wno-register
# Spelled out: the postgres binary happens to pull libstdc++ in through ICU, which would
# hide a missing link otherwise.
SHLIB_LINK += -lstdc++

PG_CONFIG ?= pg_config
PGXS := $(wildcard $(shell $(PG_CONFIG) --pgxs 2>/dev/null))
ifneq ($(PGXS),)
include $(PGXS)
else
# No PostgreSQL server headers yet: only `make test` (which installs them first) works.
.DEFAULT_GOAL := missing-pgxs
.PHONY: missing-pgxs
missing-pgxs all install installcheck:
	@echo "PostgreSQL 15 server headers not found: run scripts/install-deps as root" >&2; exit 1
endif

all: $(SQL_SCRIPTS)
# The 0.2.0 parts take constants from these headers (scripts/build-sql reads them).
SQL_CONSTANT_HEADERS = $(addprefix src/core/,lane.hpp lane_lease.hpp claim_request.hpp \
                                             retry_policy.hpp sql_timeout.hpp)
$(SQL_SCRIPTS) &: $(wildcard sql/parts/*.sql) scripts/build-sql $(SQL_CONSTANT_HEADERS)
	scripts/build-sql

# Header dependencies (PGXS tracks none without --enable-depend).
-include $(OBJS:.o=.d)

# Core must stay free of PostgreSQL and MongoDB headers (it is shared with the Mongo store).
.PHONY: check-core
check-core:
	@if grep -rnE '#\s*include\s*[<"](postgres|postgres_ext|fmgr|executor/|utils/|catalog/|access/|mongoc|bson)' src/core; then \
	  echo "src/core must not include PostgreSQL or MongoDB headers" >&2; exit 1; fi

$(OBJS): | check-core

# Core unit tests (GoogleTest), built without PostgreSQL: the test files' objects
# (build/test/, below) linked with the runtime's objects of core (build/client/core/), so
# core is compiled once for the runtime and every test binary, one file per compile (make -j).
UNIT_SRCS = $(sort $(wildcard test/unit/*.cpp))
test/unit/core_tests: $(call test_objs,$(UNIT_SRCS)) $(call runtime_objs,$(CORE_SRCS))
	$(CXX) -o $@ $^ -lgtest -lgtest_main -pthread

.PHONY: unit test test-fast
unit: test/unit/core_tests
	./test/unit/core_tests

# The libpq worker runtime (dispatcher) and the `relaybus` command-line tool. Built apart
# from the extension: the extension never links libpq.
CLIENT_CXXFLAGS = -std=c++17 -O2 -g -Wall -Wextra -Isrc -I$(shell $(PG_CONFIG) --includedir 2>/dev/null) \
                  $(CLIENT_EXTRA_CXXFLAGS)
# Extra compile and link flags for the runtime, the CLI and the MongoDB store, all built
# outside PGXS (which owns CPPFLAGS, CXXFLAGS and LDFLAGS): debian/rules passes
# dpkg-buildflags' hardening flags through them. Empty by default.
CLIENT_EXTRA_CXXFLAGS ?=
CLIENT_EXTRA_LDFLAGS ?=
# The runtime links core (the in-memory store runs the protocol) and the store seam's
# implementations that need no server (src/store).
STORE_SRCS = $(sort $(wildcard src/store/*.cpp))
CLIENT_SRCS = $(sort $(wildcard src/client/*.cpp)) $(CORE_SRCS) $(STORE_SRCS)
# PgStore: the only sources of the runtime that need libpq.
PG_STORE_SRCS = src/client/pg_store.cpp src/client/pg_operator.cpp
# The two programs: bin/relaybus, the operator tool (src/client/cli), and bin/relaybus-bench,
# the benchmark driver (src/client/bench). Both parse their command lines with
# Boost.Program_options (libboost-program-options-dev) through src/client/tool, and print
# RELAYBUS_VERSION (relaybus.control's default_version) for --version.
CLIENT_TOOL_SRCS = $(sort $(wildcard src/client/tool/*.cpp))
CLIENT_CLI_SRCS = $(sort $(wildcard src/client/cli/*.cpp))
CLIENT_BENCH_SRCS = $(sort $(wildcard src/client/bench/*.cpp))
CLIENT_TOOL_HDRS = $(wildcard src/client/tool/*.hpp src/client/bench/*.hpp)
CLIENT_TOOL_FLAGS = -DRELAYBUS_VERSION='"$(RELAYBUS_VERSION)"'
CLIENT_TOOL_LIBS = -lboost_program_options
CLIENT_HDRS = $(wildcard src/client/*.hpp src/client/cli/*.hpp src/store/*.hpp src/core/*.hpp)
# The tool speaks to the MongoDB store too (a mongodb:// --db) when libmongoc is installed
# (scripts/install-deps installs it); WITH_MONGO=0 builds it for PostgreSQL only.
WITH_MONGO ?= $(shell pkg-config --exists libmongoc-1.0 2>/dev/null && echo 1 || echo 0)
ifeq ($(WITH_MONGO),1)
CLI_MONGO_FLAGS = -DRELAYBUS_WITH_MONGO $(shell pkg-config --cflags libmongoc-1.0 2>/dev/null)
CLI_MONGO_LIBS = lib/librelaybus_mongo.a $(shell pkg-config --libs libmongoc-1.0 2>/dev/null)
CLI_MONGO_DEPS = lib/librelaybus_mongo.a $(wildcard src/mongo/*.hpp)
endif
# The runtime's objects (mk/client-library.mk, one compile per file, shared with the library)
# are linked into both programs, so `make -j2` compiles the runtime once, in parallel.
include mk/client-library.mk

# The test programs' own files, one object each under build/test/ (their path kept), with
# one set of flags for all of them: the contract suite's backends need libpq's and, when it
# is built in, libmongoc's headers, and an include path more changes nothing for the others.
TEST_CXXFLAGS = -std=c++17 -O1 -g -Wall -Wextra -Isrc -Itest \
                -I$(shell $(PG_CONFIG) --includedir 2>/dev/null) $(MONGO_CFLAGS) -MMD -MP
build/test/%.o: %.cpp | check-core
	@mkdir -p $(dir $@)
	$(CXX) $(TEST_CXXFLAGS) -c -o $@ $<
-include $(wildcard build/test/test/*/*.d build/test/test/*/*/*.d)
# Every test program, for `make -j2 test-programs` (scripts/run-tests builds them with the rest).
.PHONY: test-programs
test-programs: test/unit/core_tests test/client/client_tests test/contract/contract_tests
# The programs' own files, one object each under build/tool/: one flag set for both (the
# version from relaybus.control, the MongoDB store when built in), so the shared tool files
# compile once.
TOOL_OBJS = $(patsubst src/%.cpp,build/tool/%.o,$(CLIENT_TOOL_SRCS))
CLI_OBJS = $(patsubst src/%.cpp,build/tool/%.o,$(CLIENT_CLI_SRCS))
BENCH_OBJS = $(patsubst src/%.cpp,build/tool/%.o,$(CLIENT_BENCH_SRCS))
build/tool/%.o: src/%.cpp relaybus.control $(CLI_MONGO_DEPS) | check-core
	@mkdir -p $(dir $@)
	$(CXX) $(CLIENT_CXXFLAGS) $(CLIENT_TOOL_FLAGS) $(CLI_MONGO_FLAGS) -MMD -MP -c -o $@ $<
-include $(wildcard build/tool/client/*/*.d)
bin/relaybus: $(RUNTIME_OBJS) $(TOOL_OBJS) $(CLI_OBJS) $(CLI_MONGO_DEPS)
	@mkdir -p bin
	$(CXX) -o $@ $(RUNTIME_OBJS) $(TOOL_OBJS) $(CLI_OBJS) $(CLI_MONGO_LIBS) $(CLIENT_TOOL_LIBS) \
	  -lpq -pthread $(CLIENT_EXTRA_LDFLAGS)
bin/relaybus-bench: $(RUNTIME_OBJS) $(TOOL_OBJS) $(BENCH_OBJS) $(CLI_MONGO_DEPS)
	@mkdir -p bin
	$(CXX) -o $@ $(RUNTIME_OBJS) $(TOOL_OBJS) $(BENCH_OBJS) $(CLI_MONGO_LIBS) $(CLIENT_TOOL_LIBS) \
	  -lpq -pthread $(CLIENT_EXTRA_LDFLAGS)

# The tool's manual page, made by help2man (scripts/install-deps) from its --help and
# --version, with every command's own --help as its COMMANDS section: the page says what
# the tool says, and cannot drift from it.
bin/relaybus.1: bin/relaybus scripts/cli-manual-commands
	@mkdir -p build/man
	scripts/cli-manual-commands ./bin/relaybus >build/man/commands.h2m
	help2man --no-info --name="operate a relaybus store" \
	  --include=build/man/commands.h2m --output=$@ ./bin/relaybus

.PHONY: client client-tests cli-install cli-uninstall
client: bin/relaybus bin/relaybus-bench bin/relaybus.1
# `make install` installs the operator tool as a user command, under PREFIX (from
# mk/client-library.mk, /usr/local by default; not pg_config's bindir, which holds the
# server's programs), and its manual page under PREFIX/share/man (`man relaybus`).
# relaybus-bench stays in the tree: bench/ runs it from there.
MANDIR ?= $(PREFIX)/share/man
cli-install: bin/relaybus bin/relaybus.1
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(MANDIR)/man1
	install -m 755 bin/relaybus $(DESTDIR)$(PREFIX)/bin/relaybus
	install -m 644 bin/relaybus.1 $(DESTDIR)$(MANDIR)/man1/relaybus.1
cli-uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/relaybus $(DESTDIR)$(MANDIR)/man1/relaybus.1
# Part of `make` (and `make install`) where libpq's headers are installed; the extension
# itself never needs them.
ifneq ($(wildcard $(shell $(PG_CONFIG) --includedir 2>/dev/null)/libpq-fe.h),)
all: client client-library
install: client-install cli-install
uninstall: client-uninstall cli-uninstall
endif

# Dispatcher unit tests against an in-memory store (no libpq, no server).
CLIENT_TEST_SRCS = $(sort $(wildcard test/client/*.cpp))
test/client/client_tests: $(call test_objs,$(CLIENT_TEST_SRCS)) \
                          $(call runtime_objs,$(filter-out $(PG_STORE_SRCS),$(CLIENT_SRCS)))
	$(CXX) -o $@ $^ -lgtest -lgtest_main -pthread
client-tests: test/client/client_tests
	./test/client/client_tests

# The store contract suite: one GoogleTest suite over the seam (src/store/store.hpp), run
# against every backend in test/contract/*_backend.cpp: the in-memory store (when
# src/store/memory_store.hpp exists) and PgStore on the database RELAYBUS_CONTRACT_PG
# names (a libpq connection string; unset: that backend is skipped).
# PgStore's setup errors name the statements to run (src/client/setup_hints.cpp).
CONTRACT_SRCS = $(sort $(wildcard test/contract/*.cpp)) $(PG_STORE_SRCS) \
                src/client/setup_hints.cpp $(CORE_SRCS) $(sort $(wildcard src/store/*.cpp))
# The MongoDB backend (test/contract/mongo_backend.cpp, on a replica set named by
# RELAYBUS_MONGO_URI; skipped, with one line saying so, while that is unset) is built in
# whenever libmongoc is found. CONTRACT_MONGO=0 leaves it out.
CONTRACT_MONGO ?= $(WITH_MONGO)
ifeq ($(CONTRACT_MONGO),1)
CONTRACT_MONGO_FLAGS = $(MONGO_CFLAGS)
CONTRACT_MONGO_LIBS = $(MONGO_LIB) $(MONGO_LIBS)
else
CONTRACT_SRCS := $(filter-out test/contract/mongo_backend.cpp,$(CONTRACT_SRCS))
endif
test/contract/contract_tests: $(call test_objs,$(filter test/%,$(CONTRACT_SRCS))) \
                              $(call runtime_objs,$(filter src/%,$(CONTRACT_SRCS))) \
                              $(if $(CONTRACT_MONGO_LIBS),lib/librelaybus_mongo.a)
	$(CXX) -o $@ $(filter %.o,$^) $(CONTRACT_MONGO_LIBS) -lpq -lgtest -lgtest_main -pthread
.PHONY: contract-tests
contract-tests: test/contract/contract_tests
	./test/contract/contract_tests

# The MongoDB store (src/mongo): a library of its own on libmongoc, with core and the
# store seam. Never part of the extension's OBJS: the extension does not link libmongoc.
# Its own objects go to build/mongo/; core's are the runtime's (build/client/core/, the same
# flags but for include paths core does not use), so a build compiles core twice, not three
# times (the extension's PGXS objects are the other).
MONGO_PKG = libmongoc-1.0
MONGO_CFLAGS = $(shell pkg-config --cflags $(MONGO_PKG) 2>/dev/null)
MONGO_LIBS = $(shell pkg-config --libs $(MONGO_PKG) 2>/dev/null)
MONGO_CXXFLAGS = -std=c++17 -O2 -g -fPIC -Wall -Wextra -Isrc $(MONGO_CFLAGS) -MMD -MP \
                 $(CLIENT_EXTRA_CXXFLAGS)
MONGO_SRCS = $(sort $(wildcard src/mongo/*.cpp))
MONGO_OBJS = $(patsubst src/%.cpp,build/mongo/%.o,$(MONGO_SRCS)) $(call runtime_objs,$(CORE_SRCS))
MONGO_LIB = lib/librelaybus_mongo.a
# The headers mongo-install installs; the other src/mongo/*.hpp are internal to the library.
MONGO_PUBLIC_HDRS = src/mongo/commands.hpp src/mongo/documents.hpp src/mongo/mongo_store.hpp \
  src/mongo/operator_commands.hpp src/mongo/maintenance_commands.hpp
# The Python with Debian's python3-mockupdb and python3-pymongo (not a pyenv shim).
MONGO_PYTHON ?= /usr/bin/python3

build/mongo/%.o: src/%.cpp | check-core check-mongo-deps
	@mkdir -p $(dir $@)
	$(CXX) $(MONGO_CXXFLAGS) -c -o $@ $<
-include $(MONGO_OBJS:.o=.d)

$(MONGO_LIB): $(MONGO_OBJS)
	@mkdir -p lib
	rm -f $@
	ar rcs $@ $^

.PHONY: mongo mongo-test mongo-install check-mongo-deps
check-mongo-deps:
	@pkg-config --exists $(MONGO_PKG) || \
	  { echo "libmongoc not found: run scripts/install-deps as root (libmongoc-dev)" >&2; exit 1; }
mongo: $(MONGO_LIB)

# Unit tests: golden command documents, no server.
MONGO_UNIT_SRCS = $(sort $(wildcard test/mongo/unit/*.cpp))
test/mongo/unit/mongo_unit_tests: $(call test_objs,$(MONGO_UNIT_SRCS)) $(MONGO_LIB)
	$(CXX) -o $@ $^ $(MONGO_LIBS) -lgtest -lgtest_main -pthread
# Wire tests: the real libmongoc code path against a scripted server (python3-mockupdb).
test/mongo/wire/driver: test/mongo/wire/driver.cpp $(MONGO_LIB) $(wildcard src/mongo/*.hpp)
	$(CXX) -std=c++17 -O1 -g -Wall -Wextra -Isrc $(MONGO_CFLAGS) -o $@ $< $(MONGO_LIB) $(MONGO_LIBS)

# cli_test.py runs bin/relaybus on a mongodb:// URI.
mongo-test: test/mongo/unit/mongo_unit_tests test/mongo/wire/driver bin/relaybus
	./test/mongo/unit/mongo_unit_tests
	@for t in $(sort $(wildcard test/mongo/wire/*_test.py)); do \
	  echo "-- $$t"; $(MONGO_PYTHON) $$t ./test/mongo/wire/driver || exit 1; done

# Installs the library, its headers (with the core and seam headers they include) and
# relaybus-mongo.pc (from relaybus-mongo.pc.in) under MONGO_PREFIX.
MONGO_PREFIX ?= $(PREFIX)
mongo-install: $(MONGO_LIB)
	install -d $(DESTDIR)$(MONGO_PREFIX)/lib/pkgconfig \
	  $(DESTDIR)$(MONGO_PREFIX)/include/relaybus/mongo $(DESTDIR)$(MONGO_PREFIX)/include/relaybus/core \
	  $(DESTDIR)$(MONGO_PREFIX)/include/relaybus/store
	install -m 644 $(MONGO_LIB) $(DESTDIR)$(MONGO_PREFIX)/lib/
	install -m 644 $(MONGO_PUBLIC_HDRS) $(DESTDIR)$(MONGO_PREFIX)/include/relaybus/mongo/
	install -m 644 src/core/*.hpp $(DESTDIR)$(MONGO_PREFIX)/include/relaybus/core/
	install -m 644 src/store/store.hpp $(DESTDIR)$(MONGO_PREFIX)/include/relaybus/store/
	sed -e 's|@PREFIX@|$(MONGO_PREFIX)|' -e 's|@VERSION@|$(RELAYBUS_VERSION)|' relaybus-mongo.pc.in \
	  > $(DESTDIR)$(MONGO_PREFIX)/lib/pkgconfig/relaybus-mongo.pc

# Everything: build, install, throwaway cluster, unit + pg_regress + pgTAP + integration.
test:
	./scripts/run-tests

# The fast layer: unit tests, pg_regress and pgTAP on one cluster (scripts/run-tests --fast).
test-fast:
	./scripts/run-tests --fast

# The PGXN release archive: $(DIST_DIR)/relaybus-VERSION.zip, one top directory
# relaybus-VERSION/, made by `git archive` from HEAD, so it holds tracked files only. Changes
# to tracked files that are not committed would silently be left out: they make dist refuse
# (DIST_DIRTY=warn only warns; make test's archive check uses that). Untracked files are
# named in a warning. test/packaging/check_dist.py validates the archive and its META.json.
DIST_NAME = $(EXTENSION)-$(RELAYBUS_VERSION)
DIST_DIR ?= .
DIST_DIRTY ?= refuse
.PHONY: dist
dist:
	@git rev-parse --is-inside-work-tree >/dev/null 2>&1 \
	  || { echo "make dist: not a git checkout: the archive is made with git archive" >&2; exit 1; }
	@if [ -n "$$(git status --porcelain --untracked-files=no)" ]; then \
	  git status --short --untracked-files=no >&2; \
	  if [ "$(DIST_DIRTY)" = warn ]; then \
	    echo "make dist: warning: these uncommitted changes are not in the archive (it is HEAD)" >&2; \
	  else \
	    echo "make dist: refused: uncommitted changes (above) would not be in the archive, which is HEAD; commit them, or run with DIST_DIRTY=warn" >&2; \
	    exit 1; \
	  fi; \
	fi
	@untracked=$$(git ls-files --others --exclude-standard); if [ -n "$$untracked" ]; then \
	  echo "make dist: warning: untracked files, not in the archive:" $$untracked >&2; fi
	@mkdir -p $(DIST_DIR)
	git archive --format=zip --prefix=$(DIST_NAME)/ -o $(DIST_DIR)/$(DIST_NAME).zip HEAD
	@echo "make dist: $(DIST_DIR)/$(DIST_NAME).zip from HEAD ($$(git rev-parse --short HEAD))"

EXTRA_CLEAN = $(OBJS:.o=.d) build/mongo build/client build/man lib test/mongo/unit/mongo_unit_tests test/mongo/wire/driver test/unit/core_tests test/client/client_tests test/contract/contract_tests bin results regression.diffs regression.out
