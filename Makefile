# Makefile for the inbox extension (PGXS)
#
#   make demo        set up, build, install, and show two consumers racing
#   make test        set up, build, install, and run every test, the
#                    README's SQL and the client examples among them
#   make examples    the client examples alone (examples/README.md)
#   make test-all    the same on every supported major (15 to 18), the
#                    others built from source once (scripts/build-pg)
#   make test-prometheus  prometheus-postgres-exporter with
#                    contrib/prometheus/inbox-queries.yaml against a
#                    throwaway server after a known workload
#                    (test/prometheus/run)
#   make test-citus  a Citus cluster on loopback (a coordinator and two
#                    workers, Citus built once by scripts/build-citus) and
#                    the checks of a distributed inbox (test/citus/run)
#   make bench       set up, build, install, and compare inbox_claim with
#                    what users write by hand (bench/results/)
#   make bench-majors  the claim comparison on 15 and 18 side by side
#   make bench-citus  claims through a Citus coordinator against the raw
#                    statements through it (bench/citus)
#   make e2e         exactly-once end to end: RabbitMQ, PgBouncer, consumers
#                    killed mid-message, a database crash (e2e/README.md)
#   make test-dotnet the .NET library's tests and packages (clients/dotnet)
#   make             build only (needs PostgreSQL's server headers)
#   make install     install into the PostgreSQL that pg_config names
#   make installcheck  run the tests against the installed extension; each
#                    suite starts its own throwaway server (never run as root)
#
# Releases (from what HEAD commits; the version is inbox.control's):
#   make deb         the Debian package postgresql-<major>-inbox, built by
#                    dpkg-buildpackage with pg_buildext in a scratch copy,
#                    checked by lintian, into build/deb/ (scripts/deb)
#   make test-deb    install that package (as root, apt-get) and run the
#                    regression tests against it, preloaded (scripts/test-deb)
#   make check-meta  META.json against the PGXN Meta Spec, inbox.control,
#                    CHANGELOG.md and debian/changelog (scripts/check-meta)
#   make dist        the PGXN archive build/dist/inbox-<version>.zip
#                    (git archive; after check-meta)

EXTENSION = inbox
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" inbox.control)

MODULE_big = inbox
PGFILEDESC = "inbox - idempotent message consumption for PostgreSQL"
OBJS = \
	src/inbox.o \
	src/settings.o \
	src/objects.o \
	src/validate.o \
	src/configure.o \
	src/guard.o \
	src/probe.o \
	src/claim.o \
	src/result.o \
	src/floor.o \
	src/twophase.o \
	src/twophase_citus.o \
	src/begin_wait.o \
	src/tokens.o \
	src/citus.o \
	src/prune.o \
	src/reclaim.o \
	src/pass.o \
	src/worker.o \
	src/shmem.o \
	src/counters.o \
	src/trust.o \
	src/operate.o

# The install script is built from inbox.sql; every upgrade script
# (inbox--A--B.sql, committed as written) is installed as it is, and so is
# the install script of every earlier release, as it shipped
# (test/upgrade/), so that CREATE EXTENSION inbox VERSION 'A' works and
# t/041_extension_update.pl can update from each.
DATA_built = inbox--$(EXTVERSION).sql
DATA = $(wildcard inbox--*--*.sql) \
	$(filter-out test/upgrade/inbox--$(EXTVERSION).sql,$(wildcard test/upgrade/inbox--*.sql))

# Regress and isolation tests bring their own server, with the library
# preloaded, so that installcheck never touches a user's cluster.
REGRESS = objects dba partition bounds security fuzz claim claim_many claim_indexes claim_errors privileges search_path cache \
	twophase twophase_indexes sweeper twophase_errors configure maintenance prune_resume schema_quote twophase_outcome \
	tokens citus executor timezone result result_rls operate floor counters begin_wait
REGRESS_OPTS = --temp-instance=tmp_check_regress --temp-config=test/inbox.conf
ISOLATION = race-commit-rollback race-repeatable-read race-serializable \
	duplicate-keeps-transaction race-claim-many race-prune prune-skips-held \
	twophase-begin-race twophase-takeover twophase-sweepers twophase-reclaim \
	twophase-complete-race twophase-token-order twophase-busy dba-index-builds dba-drop-guard \
	tokens-sessions vacuum-claim-wait tokens-takeover-above twophase-busy-no-lock \
	result-fingerprint-race operate-late-owner floor-race \
	begin-wait
ISOLATION_OPTS = --temp-instance=tmp_check_iso --temp-config=test/inbox.conf
TAP_TESTS = 1

EXTRA_CLEAN = tmp_check_regress tmp_check_iso

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)

ifneq ($(PGXS),)
include $(PGXS)
else
all install installcheck:
	@echo "pg_config was not found: install PostgreSQL's server headers first"
	@echo "(as root: apt-get install postgresql-15 postgresql-server-dev-15),"
	@echo "or run 'make demo' / 'make test', which do it for you."
	@exit 1
endif

inbox--$(EXTVERSION).sql: inbox.sql
	cp $< $@

# PGXS tracks no header dependencies; every source file includes both.
$(OBJS): src/inbox.h src/compat.h

# The newcomer's two commands.  Both install what is missing, build,
# install, and run as an unprivileged user; see scripts/.
.PHONY: demo test test-all test-citus bench bench-majors bench-prune bench-growth bench-robustness bench-citus
demo:
	@scripts/demo

test:
	@scripts/test

test-all:
	@scripts/test-all

test-citus:
	@test/citus/run

.PHONY: test-prometheus
test-prometheus:
	@test/prometheus/run

# Not part of make test: benchmarks take minutes and assert nothing.
bench:
	@bench/run

bench-majors:
	@bench/majors

bench-prune:
	@bench/prune

bench-growth:
	@bench/growth

bench-robustness:
	@bench/robustness

bench-citus:
	@bench/citus

# The client examples (Python, Node, Java) and the PgBouncer checks,
# against a throwaway server; see examples/README.md.
.PHONY: examples
examples:
	@examples/test

# The .NET library (clients/dotnet): restore, build with warnings as
# errors, xunit against its own PostgreSQL and RabbitMQ, pack.
.PHONY: test-dotnet
test-dotnet:
	@scripts/test-dotnet

# Exactly-once end to end: a real broker, PgBouncer, consumers killed
# mid-message, a crashing database; see e2e/README.md.
.PHONY: e2e
e2e:
	@e2e/run

# Releases; see the header.  build/ holds what they make (git-ignored).
.PHONY: deb test-deb check-meta dist
deb:
	@scripts/deb

test-deb:
	@scripts/test-deb

check-meta:
	@scripts/check-meta

dist: check-meta
	@if [ -n "$$(git status --porcelain)" ]; then \
		echo "error: the archive is made from HEAD: commit (or remove) the changes first"; \
		git status --short; exit 1; \
	fi
	@mkdir -p build/dist
	git archive --format=zip --prefix=$(EXTENSION)-$(EXTVERSION)/ \
		--output=build/dist/$(EXTENSION)-$(EXTVERSION).zip HEAD
	@echo "build/dist/$(EXTENSION)-$(EXTVERSION).zip"
