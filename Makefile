# make run: install into .venv and start inboxd on SQLite.  make test: lint, type-check, run every test.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
# The sign-in tests' OpenID Connect provider (npm oidc-provider), installed from the lock file.
IDP_STAMP := tests/idp/node_modules/.package-lock.json

.PHONY: install lock run test lint typecheck pytest bench services clean client statements

# uv installs every Python package from uv.lock (hashes included); it comes itself from a hashed
# pin, so nothing on a fresh machine is whatever the index serves that day. `uv sync --locked`
# stops at once when uv.lock and pyproject.toml disagree (run `make lock`).
UV_HOME := .uv
UV := $(UV_HOME)/bin/uv
export UV_PROJECT_ENVIRONMENT := $(VENV)
# pip's site configuration on this kind of machine adds local indexes uv does not read.
export UV_NO_CONFIG := 1
# Compiled at install, as pip does: a dependency's invalid escapes (pyspf's) warn only then, not
# at its first import under the suite's warnings-are-errors.
export UV_COMPILE_BYTECODE := 1

$(UV): requirements-uv.txt
	$(PY) -m venv $(UV_HOME)
	$(UV_HOME)/bin/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements-uv.txt
	touch $@

# setup.py builds the one C module (the search index's word set) into src/ for the editable install.
BUILD_INPUTS := pyproject.toml uv.lock setup.py src/inboxd/services/_words.c

# `make run` keeps the test extras if they are there (--inexact), so it never undoes `make test`'s.
# EXTRAS adds optional extras (`make install EXTRAS=render`: Playwright and Pillow for render.png).
EXTRAS ?=
$(STAMP): $(BUILD_INPUTS) | $(UV)
	$(UV) sync --quiet --locked --inexact --python $(PY)
	touch $@

install: $(STAMP)
ifneq ($(strip $(EXTRAS)),)
	$(UV) sync --quiet --locked --inexact --python $(PY) $(foreach extra,$(EXTRAS),--extra $(extra))
endif

$(TEST_STAMP): $(BUILD_INPUTS) | $(UV)
	$(UV) sync --quiet --locked --extra test --python $(PY)
	touch $@ $(STAMP)

# Renews uv.lock with today's newest releases inside pyproject.toml's ranges, then runs the suite.
lock: | $(UV)
	$(UV) lock --upgrade
	$(MAKE) --no-print-directory test

run: install
	$(BIN)/inboxd serve $(ARGS)

services:
	@pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start
	@redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
	@for i in $$(seq 1 50); do pg_isready -q -h 127.0.0.1 -p 5432 && redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && exit 0; sleep 0.2; done; echo "PostgreSQL or Redis did not come up" >&2; exit 1

# The sync client is generated from the async one; tests/test_client_generated.py checks it is current.
client: $(TEST_STAMP)
	$(BIN)/python -m inboxd.client.generate

# The store's statements compiled ahead of time (src/inboxd/store/statements.json, read by a server
# instead of importing SQLAlchemy); tests/test_store_statements.py checks it is current.
statements: $(TEST_STAMP)
	$(BIN)/python -m inboxd.store.precompile

lint: $(TEST_STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	PYTHONPATH=src $(BIN)/lint-imports

typecheck: $(TEST_STAMP)
	$(BIN)/mypy

# The browser tests drive Debian's chromium through Playwright (Playwright's own browser download
# is not used).
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	$$(command -v flock >/dev/null && echo flock /tmp/apt.lock) sh -c 'apt-get update -q && apt-get install -y -q chromium'

$(IDP_STAMP): tests/idp/package.json tests/idp/package-lock.json
	npm ci --prefix tests/idp --no-audit --no-fund --loglevel=error
	touch $@

# nginx for the smoke test of deploy/nginx-fleet.conf (tests/test_nginx_fleet.py), unpacked from
# Debian's packages into the tree rather than installed: installing nginx starts a server on port 80.
NGINX := tests/.nginx/usr/sbin/nginx

$(NGINX):
	rm -rf tests/.nginx tests/.nginx-debs && mkdir -p tests/.nginx-debs
	cd tests/.nginx-debs && { apt-get download nginx libnginx-mod-stream 2>/dev/null || { apt-get update -q && apt-get download nginx libnginx-mod-stream; }; }
	for deb in tests/.nginx-debs/*.deb; do dpkg-deb -x "$$deb" tests/.nginx; done
	rm -rf tests/.nginx-debs

# rspamd for the spam-score tests (tests/test_checks_spam.py), from Debian's package; the tests run
# it themselves in the foreground on 127.0.0.1 with a configuration of their own, never the
# system's service (without its recommended Redis, which the checks do not need).
RSPAMD := /usr/bin/rspamd

$(RSPAMD):
	$$(command -v flock >/dev/null && echo flock /tmp/apt.lock) sh -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends rspamd || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends rspamd; }'

# Most tests wait on sockets, processes and browsers more than they compute, so two workers
# halve the wall time on two cores; the tests with bounds on time or memory (marked `alone`)
# then run by themselves, as their bounds assume.
pytest: $(TEST_STAMP) $(IDP_STAMP) services $(CHROMIUM) $(NGINX) $(RSPAMD)
	$(BIN)/pytest -n 2 -m "not alone"
	$(BIN)/pytest -m alone

# mypy (about half a minute without its cache) runs beside the suite, which mostly waits; its
# output follows the suite's, and either failing fails `make test`.
test: lint
	@$(MAKE) --no-print-directory typecheck > $(VENV)/typecheck.log 2>&1 & types=$$!; \
	$(MAKE) --no-print-directory pytest; tests=$$?; \
	wait $$types; typed=$$?; cat $(VENV)/typecheck.log; \
	exit $$(( tests != 0 || typed != 0 ))

# The load tools: Postfix's smtp-source (SMTP) and wrk (HTTP), valgrind for
# bench/instructions.sh and perf for bench/handovers.py, from Debian's packages.
LOAD_TOOLS := /usr/sbin/smtp-source /usr/bin/wrk /usr/bin/valgrind /usr/bin/perf

$(LOAD_TOOLS):
	echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections
	$$(command -v flock >/dev/null && echo flock /tmp/apt.lock) sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postfix wrk valgrind linux-perf'

# tests/test_bench.py runs `python -m bench compare`, which needs wrk.
pytest: $(LOAD_TOOLS)

# `make bench`: the performance goals side by side with MailDev and a bare Starlette app, each
# measure repeated 3 times; `python -m bench all` prints the wider tables.
bench: $(TEST_STAMP) services $(LOAD_TOOLS)
	$(BIN)/python -m bench goals

clean:
	rm -rf $(VENV) $(UV_HOME) data tests/idp/node_modules tests/.nginx
