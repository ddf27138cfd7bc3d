# Every target runs from a fresh clone with only Go installed; tests and the
# demo start their own throwaway PostgreSQL (see README).
SHELL := /bin/bash
GO    ?= go
SQLC  := $(GO) tool -modfile=tools/go.mod sqlc
STATICCHECK := $(GO) tool -modfile=tools/go.mod staticcheck
FUZZTIME ?= 10s
# Fuzzing runs on Go 1.27.3, which the go command fetches from the module
# proxy: Go 1.26's fuzz coordinator can fail a target with a bare "context
# deadline exceeded" when -fuzztime ends while a worker is mid-call on a
# loaded machine (go.dev/issue/75804, fixed in 1.27). Everything else stays
# on the module's own Go.
FUZZ_GO ?= GOTOOLCHAIN=go1.27.3 $(GO)
# The benchmarks: a module of its own (the bench command at its root, the
# River comparison in ./river), so that neither River nor the bench's
# tooling (throwaway servers, the fault proxy, pgbench) is a dependency of
# the library or linked into the runledger command.
BENCH := bench
SOAK_DURATION ?= 10m
# Extra soak flags; a short CI-friendly form:
#   make soak SOAK_DURATION=20s SOAK_FLAGS='-sample 2s -window 20s'
SOAK_FLAGS    ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: generate
generate: ## Regenerate db/ from schema/ and queries/ with the pinned sqlc, and docs/ERRORS.md from the error catalogue
	$(SQLC) generate
	$(GO) generate ./internal/errs

.PHONY: check-generated
check-generated: ## Fail when a query does not compile or db/ differs from what sqlc writes
	$(SQLC) compile
	$(SQLC) diff

.PHONY: check-sizes
check-sizes: ## Fail when a tracked file is over 1 MiB (a build output committed by mistake)
	tools/check-tracked-sizes

.PHONY: build
build: ## Build every package, the runledger command and the benchmarks
	$(GO) build ./...
	cd $(BENCH) && $(GO) build ./...

.PHONY: test
test: ## Run every test with the race detector against real PostgreSQL
	$(GO) test -race -count=1 ./...
	cd $(BENCH) && $(GO) test -race -count=1 ./...

.PHONY: test-short
test-short: ## Run the tests, skipping the long reliability runs
	$(GO) test -race -count=1 -short ./...
	cd $(BENCH) && $(GO) test -race -count=1 -short ./...

MATRIX_VERSIONS ?= 13,14,15,16,17,18
MATRIX_FLAGS    ?=

.PHONY: pg-binaries
pg-binaries: ## Fetch (once) the PostgreSQL server builds of MATRIX_VERSIONS with npm (tools/pgbin)
	@set -e; for v in $$(echo '$(MATRIX_VERSIONS)' | tr , ' '); do tools/pgbin $$v; done

.PHONY: test-matrix
test-matrix: ## Run the library suites on each PostgreSQL major in MATRIX_VERSIONS (13-18); print a table
	$(GO) run ./internal/testdb/matrix -versions '$(MATRIX_VERSIONS)' $(MATRIX_FLAGS)

# The Citus lane: tools/citus builds Citus from ../shared/citus once (cached
# outside the repository) and prints a PostgreSQL bin directory that can
# load it; every test binary then starts its own coordinator and two
# workers on loopback (RUNLEDGER_TEST_CITUS=1, see internal/testdb) and
# gives each test a distributed database cloned from the migrated template
# (whose build refuses a schema that leaves a table local to the
# coordinator). .ci/run runs it.
CITUS_PACKAGES ?= . ./db/ ./replay/ ./requeue/ ./health/ ./jobs/ ./lease/ ./inspect/ ./schedules/ ./worker/ ./goose/ ./reliability/ ./internal/testdb/planaudit/ ./internal/testdb/pgcitus/
CITUS_FLAGS    ?=

.PHONY: citus-binaries
citus-binaries: ## Build (once) Citus for the machine's PostgreSQL 15 and print its bin directory (tools/citus)
	tools/citus

.PHONY: test-citus
test-citus: ## Run the library suites against a throwaway Citus cluster (coordinator and two workers)
	@set -e; bindir=$$(tools/citus); \
	echo "RUNLEDGER_TEST_CITUS=1 RUNLEDGER_PG_BINDIR=$$bindir $(GO) test -count=1 $(CITUS_FLAGS) $(CITUS_PACKAGES)"; \
	env -u RUNLEDGER_TEST_DATABASE_URL RUNLEDGER_TEST_CITUS=1 RUNLEDGER_PG_BINDIR="$$bindir" \
	  $(GO) test -count=1 $(CITUS_FLAGS) $(CITUS_PACKAGES)

# The figures of docs/SCALING.md: the same benchmarks (one tenant's replay,
# claim and complete, requeue and bulk requeue; the claim across 10, 100
# and 1,000 tenants) on one
# PostgreSQL server and then on the Citus lane's cluster, in one run.
CITUS_BENCH      ?= BenchmarkSucceededJob$$/(inserted|existing)|BenchmarkClaimComplete|BenchmarkClaimAcrossTenants|BenchmarkStatements|BenchmarkJob$$|BenchmarkBulk$$|BenchmarkEnqueueKeyed$$
CITUS_BENCH_TIME ?= 2s

.PHONY: bench-citus
bench-citus: ## Benchmarks of docs/SCALING.md on one server, then on a Citus cluster
	@set -e; bindir=$$(tools/citus); \
	echo "== one PostgreSQL server"; \
	env -u RUNLEDGER_TEST_DATABASE_URL -u RUNLEDGER_TEST_CITUS RUNLEDGER_PG_BINDIR="$$bindir" $(GO) test -run '^$$' -bench '$(CITUS_BENCH)' -benchtime $(CITUS_BENCH_TIME) ./replay/ ./jobs/ ./lease/ ./requeue/ ./internal/testdb/planaudit/; \
	echo "== Citus: a coordinator and two workers"; \
	env -u RUNLEDGER_TEST_DATABASE_URL RUNLEDGER_TEST_CITUS=1 RUNLEDGER_PG_BINDIR="$$bindir" \
	  $(GO) test -run '^$$' -bench '$(CITUS_BENCH)' -benchtime $(CITUS_BENCH_TIME) ./replay/ ./jobs/ ./lease/ ./requeue/ ./internal/testdb/planaudit/

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 10s)
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$target"; \
	    $(FUZZ_GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

.PHONY: soak
soak: ## Soak: 16 clients and three workers for SOAK_DURATION (default 10m; CI runs 20s) on a durable throwaway server, one restart
	$(GO) run ./internal/testdb/soak -duration $(SOAK_DURATION) $(SOAK_FLAGS)

.PHONY: lint
lint: ## go vet plus the pinned staticcheck, of the library and of the bench module
	$(GO) vet ./...
	$(STATICCHECK) ./...
	cd $(BENCH) && $(GO) vet ./...
	cd $(BENCH) && $(GO) tool -modfile=../tools/go.mod staticcheck ./...

.PHONY: bench
bench: ## Go benchmarks, the replay bench against pgbench, then replay and requeue beside River
	$(GO) test -run '^$$' -bench . -benchmem ./replay/ ./requeue/
	cd $(BENCH) && $(GO) run . -compare-pgbench
	cd $(BENCH) && $(GO) run ./river
	cd $(BENCH) && $(GO) run ./river -requeue

WORKER_BENCH_FLAGS ?=

.PHONY: bench-console
bench-console: ## The console's pages (p50/p95 server time on 1,000,000 finished and 100,000 live jobs) and its bulk requeue beside the library's
	$(GO) test -run '^$$' -bench 'ConsolePages' -benchtime 200x -timeout 60m ./console/
	$(GO) test -run '^$$' -bench 'ConsoleBulkRequeue' -benchtime 4x -timeout 60m ./console/

# Every benchmark command the docs give, once and tiny, so none of them can
# rot unseen; CI runs it. The figures it prints mean nothing.
.PHONY: bench-smoke
bench-smoke: ## Every documented benchmark command, once with tiny counts (CI runs it)
	RUNLEDGER_BENCH_HISTORY=20000 RUNLEDGER_BENCH_PRUNE=2000 RUNLEDGER_BENCH_QUIET=1 \
	  $(GO) test -run '^$$' -bench . -benchtime 1x -short ./replay/ ./requeue/ ./jobs/ ./lease/ ./health/ ./worker/
	RUNLEDGER_CONSOLE_BENCH_FINISHED=2000 RUNLEDGER_CONSOLE_BENCH_LIVE=200 RUNLEDGER_CONSOLE_BENCH_BULK=200 \
	  $(GO) test -run '^$$' -bench . -benchtime 2x ./console/
	cd $(BENCH) && $(GO) run . -fast -sources 1000 -clients 1 -duration 1s -warmup 0s
	cd $(BENCH) && $(GO) run ./river -sources 1000 -clients 1 -duration 1s -warmup 0s
	cd $(BENCH) && $(GO) run ./river -requeue -requeue-ops 40 -requeue-blocks 2 -bulk-jobs 500
	cd $(BENCH) && $(GO) run ./river -workers -worker-jobs 300 -worker-default-jobs 100 -worker-latency-samples 5 \
	  -worker-heartbeat-jobs 20 -worker-memory-jobs 0 -added-rtt 0
	RUNLEDGER_HOTPATH=1 RUNLEDGER_HOTPATH_JOBS=2000 $(GO) test -count=1 -run 'TestHotPathCost|TestMigrationCost' ./internal/hotpath/

.PHONY: bench-worker
bench-worker: ## The worker runtime beside River's workers in one run (throughput with server CPU, WAL and index entries per job, pickup latency, +1 ms per round trip, heartbeats, memory)
	cd $(BENCH) && $(GO) run ./river -workers $(WORKER_BENCH_FLAGS)

.PHONY: demo
demo: ## Run the demo on a throwaway local PostgreSQL
	$(GO) run ./cmd/runledger demo

.PHONY: install
install: ## Install the runledger command into GOBIN
	$(GO) install ./cmd/runledger
