# Meshwork: every task is a target; `make help` lists them.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

MODULES := pkg migrations workers services/marketplace services/mesh-exec services/orchestrator deploy
PKGS := $(addsuffix /...,$(addprefix ./,$(MODULES)))
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/meshwork/meshwork/pkg/buildinfo.Version=$(VERSION)
GOARCH ?= $(shell go env GOARCH)
BIN := bin/linux_$(GOARCH)
TOOLS := $(CURDIR)/.tools
GOLANGCI_LINT_VERSION ?= v2.15.0

# Binary name -> main package.
CMDS := marketplace=./services/marketplace/cmd/marketplace \
        meshworker=./services/marketplace/cmd/meshworker \
        mesh-exec=./services/mesh-exec/cmd/mesh-exec \
        mesh-exec-hook=./services/mesh-exec/cmd/mesh-exec-hook \
        orchestrator=./services/orchestrator/cmd/orchestrator \
        meshctl=./services/orchestrator/cmd/meshctl \
        mcp-echo=./services/marketplace/cmd/mcp-echo

# Service images: image name -> binary. BASE is the image the binary is copied
# onto; the default is public, `make offline-images` uses scratch.
IMAGE_PREFIX ?= meshwork
IMAGE_TAG ?= latest
IMAGES := marketplace=marketplace worker=meshworker mesh-exec=mesh-exec orchestrator=orchestrator mcp-echo=mcp-echo

# Tests: Postgres comes from POSTGRES_IMAGE (default postgres:17, pulled from
# a registry). Without one, run `make offline-images` and set
# POSTGRES_IMAGE=$(OFFLINE_POSTGRES_IMAGE).
OFFLINE_POSTGRES_IMAGE ?= meshwork/postgres-offline:15
export TESTCONTAINERS_RYUK_DISABLED ?= true
# Published container ports are reached on localhost. Set it empty to let
# testcontainers guess (e.g. when Docker runs outside your dev container).
export TESTCONTAINERS_HOST_OVERRIDE ?= localhost
TEST_FLAGS ?=
BENCHTIME ?= 2s
FUZZTIME ?= 30s

##@ Build

.PHONY: build
build: ## Build every binary, static (CGO_ENABLED=0), into bin/linux_$GOARCH
	@mkdir -p $(BIN)
	@for c in $(CMDS); do \
	  name=$${c%%=*}; pkg=$${c#*=}; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH) go build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$$name $$pkg; \
	  echo "built $(BIN)/$$name"; \
	done

.PHONY: images
images: build ## Build the service images onto public bases (BASE overrides the base)
	@for i in $(IMAGES); do \
	  img=$${i%%=*}; bin=$${i#*=}; \
	  log=$$(mktemp); \
	  docker build -q -f deploy/docker/service.Dockerfile \
	    --build-arg BINARY=$(BIN)/$$bin $${BASE:+--build-arg BASE=$$BASE} \
	    --label org.opencontainers.image.version=$(VERSION) \
	    -t $(IMAGE_PREFIX)/$$img:$(IMAGE_TAG) . >"$$log" 2>&1 || { cat "$$log" >&2; rm -f "$$log"; exit 1; }; \
	  rm -f "$$log"; \
	  echo "built $(IMAGE_PREFIX)/$$img:$(IMAGE_TAG)"; \
	done

.PHONY: offline-images
offline-images: ## Build every image tests and the stack need, with no registry (debootstrap + docker import)
	IMAGE=$(OFFLINE_POSTGRES_IMAGE) deploy/offline/postgres/build.sh
	$(MAKE) --no-print-directory images BASE=scratch
	IMAGE=$(IMAGE_PREFIX)/shell-worker:$(IMAGE_TAG) BIN=$(BIN) deploy/offline/shell-worker/build.sh
	$(MAKE) --no-print-directory test-images

# The fake codex answers every task with this script's reply.
FAKE_CODEX_SCRIPT := {"runs": [{"steps": [{"reply": "The fake codex did the task (a test double: no work was done)."}]}]}

.PHONY: test-images
test-images: build ## Build the test-only images: the agent workers with the FAKE claude and FAKE codex (meshwork/claude-worker-fake:test, meshwork/codex-worker-fake:test)
	@mkdir -p bin/test
	CGO_ENABLED=0 go build -trimpath -o bin/test/fakeclaude ./services/mesh-exec/testdata/fakeclaude
	@log=$$(mktemp); docker build -q -f deploy/docker/claude-worker-fake.Dockerfile --build-arg BIN=$(BIN) -t meshwork/claude-worker-fake:test . >"$$log" 2>&1 \
	  || { cat "$$log" >&2; rm -f "$$log"; exit 1; }; rm -f "$$log"; echo "built meshwork/claude-worker-fake:test"
	CGO_ENABLED=0 go build -trimpath -o bin/test/fakeagents ./services/mesh-exec/testdata/fakeagents
	@printf '%s\n' '$(FAKE_CODEX_SCRIPT)' >bin/test/fakecodex-script.json
	@log=$$(mktemp); docker build -q -f deploy/docker/codex-worker-fake.Dockerfile --build-arg BIN=$(BIN) -t meshwork/codex-worker-fake:test . >"$$log" 2>&1 \
	  || { cat "$$log" >&2; rm -f "$$log"; exit 1; }; rm -f "$$log"; echo "built meshwork/codex-worker-fake:test"

.PHONY: image-claude-worker
image-claude-worker: build ## Build the Claude Code worker image for users (needs a registry and npm; CLAUDE_CODE_VERSION)
	docker build -f deploy/docker/claude-worker.Dockerfile --build-arg BIN=$(BIN) $${CLAUDE_CODE_VERSION:+--build-arg CLAUDE_CODE_VERSION=$$CLAUDE_CODE_VERSION} \
	  -t $(IMAGE_PREFIX)/claude-worker:$(IMAGE_TAG) .

.PHONY: image-codex-worker
image-codex-worker: build ## Build the Codex worker image for users (needs a registry and npm; CODEX_VERSION)
	docker build -f deploy/docker/codex-worker.Dockerfile --build-arg BIN=$(BIN) $${CODEX_VERSION:+--build-arg CODEX_VERSION=$$CODEX_VERSION} \
	  -t $(IMAGE_PREFIX)/codex-worker:$(IMAGE_TAG) .

.PHONY: image-shell-worker
image-shell-worker: build ## Build the shell worker image on the official Go image (needs a registry; GO_IMAGE); offline-images builds it without one
	docker build -f deploy/docker/shell-worker.Dockerfile --build-arg BIN=$(BIN) $${GO_IMAGE:+--build-arg GO_IMAGE=$$GO_IMAGE} \
	  -t $(IMAGE_PREFIX)/shell-worker:$(IMAGE_TAG) .

##@ Run

# The stack is deploy/compose.yaml, project "meshwork", settings in ENV_FILE.
# COMPOSE is `docker compose` (v2) when the plugin answers, else
# docker-compose (1.29); it is looked up once, when first used.
ifndef COMPOSE
COMPOSE = $(eval COMPOSE := $$(shell docker compose version >/dev/null 2>&1 && echo 'docker compose' || echo docker-compose))$(COMPOSE)
endif
ENV_FILE ?= deploy/.env
STACK = $(COMPOSE) -p meshwork -f deploy/compose.yaml --env-file $(ENV_FILE)
# Stopping needs no real settings, only values that satisfy compose.yaml.
STACK_DOWN = $(if $(wildcard $(ENV_FILE)),,$(CHECK_TOKENS)) $(COMPOSE) -p meshwork -f deploy/compose.yaml --env-file $(if $(wildcard $(ENV_FILE)),$(ENV_FILE),deploy/.env.example)
# Placeholder tokens for commands that read the compose file but start
# nothing (down without deploy/.env, config): the example has none.
CHECK_TOKENS := MESHWORK_CLIENT_TOKEN=placeholder-token-0000 MESHWORK_ORCHESTRATOR_TOKEN=placeholder-token-0000 MESH_EXEC_TOKEN=placeholder-token-0000
# What up/offline starts: everything but lgtm, whose image must be pulled.
CORE_SERVICES := postgres migrate marketplace mesh-exec orchestrator
FAKE_MESH_EXEC_IMAGE := meshwork/claude-worker-fake:test
FAKE_CODEX_IMAGE := meshwork/codex-worker-fake:test
# up/offline's worker catalog: the built-in one, the Claude Code and Codex workers on their fake images.
OFFLINE_CATALOG_DIR := $(CURDIR)/.build/offline-catalog

.PHONY: env
env: ## Write deploy/.env from deploy/.env.example with fresh random tokens and this host's Docker group (never overwrites it)
	@if [ -e $(ENV_FILE) ]; then exit 0; fi; \
	  token() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }; \
	  sock="$${DOCKER_SOCKET:-/var/run/docker.sock}"; \
	  gid=$$(stat -L -c %g "$$sock" 2>/dev/null || stat -L -f %g "$$sock" 2>/dev/null || echo 999); \
	  case "$$(docker info --format '{{.OperatingSystem}}' 2>/dev/null)" in *"Docker Desktop"*) gid=0 ;; esac; \
	  umask 077; \
	  while IFS= read -r line; do \
	    case "$$line" in \
	      MESHWORK_CLIENT_TOKEN=*|MESHWORK_ORCHESTRATOR_TOKEN=*|MESH_EXEC_TOKEN=*|POSTGRES_PASSWORD=*) printf '%s=%s\n' "$${line%%=*}" "$$(token)" ;; \
	      DOCKER_GID=*) printf 'DOCKER_GID=%s\n' "$$gid" ;; \
	      *) printf '%s\n' "$$line" ;; \
	    esac; \
	  done <deploy/.env.example >$(ENV_FILE); \
	  echo "env: wrote $(ENV_FILE) (fresh tokens and Postgres password, DOCKER_GID=$$gid); put your Claude credentials in it"

# The repositories spawn_worker may take (mounted at /sources): made here,
# as the user's, before Compose would make a missing one as root's.
SOURCES_DIR := deploy/sources

# A start that fails says why: Compose itself only says that a dependency
# failed to start; the service's own log says what it refused.
OR_SAY_WHY = || { deploy/dev/show-unhealthy.sh meshwork; exit 1; }

.PHONY: up
up: env images image-shell-worker image-claude-worker image-codex-worker ## Build every image, then start the whole stack with Grafana (needs a registry; settings in deploy/.env)
	@mkdir -p $(SOURCES_DIR)
	$(STACK) up -d $(OR_SAY_WHY)
	@deploy/dev/wait-healthy.sh meshwork
	@echo "up: marketplace MCP http://127.0.0.1:8080/mcp, orchestrator http://127.0.0.1:8090, Grafana http://127.0.0.1:3000 (default ports; tokens in $(ENV_FILE))"

# The fake claude logs in with any key; real credentials are kept from it.
.PHONY: up/offline
up/offline: env offline-images ## No registry: start the core services (no Grafana) on the offline images, the agents with the FAKE claude and codex
	@echo "up/offline: *** mesh-exec and the Claude Code worker run $(FAKE_MESH_EXEC_IMAGE), the Codex worker $(FAKE_CODEX_IMAGE): FAKE CLIs that imitate the real ones for trying the stack without credentials; their agents do no real work ***"
	@rm -rf $(OFFLINE_CATALOG_DIR) && mkdir -p $(OFFLINE_CATALOG_DIR) && cp -R workers/. $(OFFLINE_CATALOG_DIR)/ && \
	  rm -f $(OFFLINE_CATALOG_DIR)/*.go $(OFFLINE_CATALOG_DIR)/go.* && chmod -R a+rX $(OFFLINE_CATALOG_DIR) && \
	  sed -i -e 's|image: meshwork/claude-worker:latest|image: $(FAKE_MESH_EXEC_IMAGE)|' \
	    -e 's|image: meshwork/codex-worker:latest|image: $(FAKE_CODEX_IMAGE)|' $(OFFLINE_CATALOG_DIR)/*.yaml
	@mkdir -p $(SOURCES_DIR)
	POSTGRES_IMAGE=$(OFFLINE_POSTGRES_IMAGE) MESH_EXEC_IMAGE=$(FAKE_MESH_EXEC_IMAGE) OFFLINE_CATALOG_DIR=$(OFFLINE_CATALOG_DIR) \
	  ANTHROPIC_API_KEY=fake-key-for-the-fake-claude CLAUDE_CODE_OAUTH_TOKEN= OTEL_EXPORTER_OTLP_ENDPOINT= \
	  $(STACK) -f deploy/offline/compose.fake-agents.yaml up -d $(CORE_SERVICES) $(OR_SAY_WHY)
	@deploy/dev/wait-healthy.sh meshwork
	@echo "up/offline: marketplace MCP http://127.0.0.1:8080/mcp, orchestrator http://127.0.0.1:8090 (default ports; tokens in $(ENV_FILE))"

.PHONY: up/db
up/db: build ## Development: Postgres alone on 127.0.0.1:5432 (MESHWORK_PG_PORT), migrated, for servers run from bin/
	deploy/dev/postgres.sh

.PHONY: down
down: ## Stop the stack; volumes are kept. Workers of live journeys keep running: stop_worker them first
	$(STACK_DOWN) down

.PHONY: down/volumes
down/volumes: ## Stop the stack and delete its volumes (database, archives, telemetry) and the workers it spawned, with their workspaces and the egress network
	$(STACK_DOWN) down -v
	@# The workers are the marketplace's, not Compose's; with the database
	@# gone no journey is left to resume them.
	@ids=$$(docker ps -aq --filter label=meshwork.stack=true --filter label=meshwork.journey); \
	  if [ -n "$$ids" ]; then echo "removing $$(echo $$ids | wc -w) worker container(s)"; docker rm -f $$ids >/dev/null; fi; \
	  vols=$$(docker volume ls -q --filter label=meshwork.stack=true --filter label=meshwork.journey); \
	  if [ -n "$$vols" ]; then echo "removing $$(echo $$vols | wc -w) workspace volume(s)"; docker volume rm $$vols >/dev/null; fi; \
	  nets=$$(docker network ls -q --filter label=meshwork.stack=true --filter label=meshwork.network); \
	  if [ -n "$$nets" ]; then echo "removing the egress network"; docker network rm $$nets >/dev/null; fi

.PHONY: down/db
down/db: ## Stop the Postgres of up/db; its data stays in the volume meshwork-pgdata
	docker rm -f meshwork-postgres >/dev/null 2>&1 || true

.PHONY: config
config: ## Check deploy/compose.yaml with deploy/.env.example, and that it refuses to start without its tokens (for CI)
	$(CHECK_TOKENS) $(COMPOSE) -p meshwork -f deploy/compose.yaml --env-file deploy/.env.example config -q
	$(CHECK_TOKENS) OFFLINE_CATALOG_DIR=$(OFFLINE_CATALOG_DIR) $(COMPOSE) -p meshwork -f deploy/compose.yaml -f deploy/offline/compose.fake-agents.yaml --env-file deploy/.env.example config -q
	@empty=$$(mktemp); trap 'rm -f "$$empty"' EXIT; \
	  if out=$$(env -u MESHWORK_CLIENT_TOKEN -u MESHWORK_ORCHESTRATOR_TOKEN -u MESH_EXEC_TOKEN \
	      $(COMPOSE) -p meshwork -f deploy/compose.yaml --env-file "$$empty" config -q 2>&1); then \
	    echo "config: deploy/compose.yaml accepts a configuration without tokens" >&2; exit 1; fi; \
	  grep -q 'TOKEN (16+ characters) in deploy/.env' <<<"$$out" || { echo "$$out" >&2; exit 1; }; \
	  echo "config: deploy/compose.yaml is valid, and refuses to start without its tokens"

##@ Test

.PHONY: test
test: ## Run every test (Docker needed; Postgres from POSTGRES_IMAGE)
	@status=0; go test -count=1 $(TEST_FLAGS) $(PKGS) || status=$$?; \
	  $(MAKE) --no-print-directory test/cleanup; exit $$status

.PHONY: test/race
test/race: ## Run every test with the race detector
	@$(MAKE) --no-print-directory test TEST_FLAGS="-race $(TEST_FLAGS)"

.PHONY: test/short
test/short: ## Run the tests that need neither Docker nor Postgres
	go test -short -count=1 $(PKGS)

.PHONY: test/cleanup
test/cleanup: ## Remove anything tests left behind (containers, volumes and networks labelled meshwork.test)
	@ids=$$(docker ps -aq --filter label=meshwork.test); \
	  if [ -n "$$ids" ]; then echo "removing leftover test containers: $$ids"; docker rm -fv $$ids >/dev/null; fi
	@vols=$$(docker volume ls -q --filter label=meshwork.test); \
	  if [ -n "$$vols" ]; then docker volume rm $$vols >/dev/null; fi
	@nets=$$(docker network ls -q --filter label=meshwork.test); \
	  if [ -n "$$nets" ]; then docker network rm $$nets >/dev/null || true; fi

.PHONY: e2e
e2e: offline-images e2e/images ## End to end: the compose stack from the offline images (FAKE claude), driven over MCP and meshctl, traced into a test OTLP sink
	TESTCONTAINERS_RYUK_DISABLED=true go test -tags e2e -count=1 -timeout 25m -v ./deploy/e2e/

.PHONY: e2e/images
e2e/images: ## Build the test-only OTLP receiver image the e2e test puts in place of the collector (meshwork/otlp-sink:test)
	@mkdir -p bin/test
	CGO_ENABLED=0 go build -trimpath -o bin/test/otlpsink ./deploy/e2e/otlpsink
	@log=$$(mktemp); docker build -q -f deploy/docker/service.Dockerfile --build-arg BASE=scratch --build-arg BINARY=bin/test/otlpsink \
	  -t meshwork/otlp-sink:test . >"$$log" 2>&1 || { cat "$$log" >&2; rm -f "$$log"; exit 1; }; rm -f "$$log"; echo "built meshwork/otlp-sink:test"

.PHONY: bench
bench: ## Run the benchmarks (BENCHTIME=2s); figures with p50/p99 where goals are percentiles
	go test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

.PHONY: bench/scale
bench/scale: ## Spawn N journeys (default 500) with 20 clients, then measure them idle: memory, list and read latency, reconciliation
	MESHWORK_SCALE_N=$(or $(N),500) go test -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 60m ./services/marketplace/internal/mcpserver/

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 30s)
	go test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./pkg/action
	go test -run '^$$' -fuzz '^FuzzEvaluate$$' -fuzztime $(FUZZTIME) ./pkg/gate
	go test -run '^$$' -fuzz '^FuzzEvaluateResult$$' -fuzztime $(FUZZTIME) ./pkg/gate
	go test -run '^$$' -fuzz '^FuzzEvaluateExec$$' -fuzztime $(FUZZTIME) ./pkg/gate
	go test -run '^$$' -fuzz '^FuzzSplitShell$$' -fuzztime $(FUZZTIME) ./pkg/gate
	go test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) ./pkg/workerdef
	go test -run '^$$' -fuzz '^FuzzArchive$$' -fuzztime $(FUZZTIME) ./services/marketplace/internal/source
	go test -run '^$$' -fuzz '^FuzzCheckPack$$' -fuzztime $(FUZZTIME) ./services/marketplace/internal/bases
	go test -run '^$$' -fuzz '^FuzzIsDotGit$$' -fuzztime $(FUZZTIME) ./pkg/gitpath
	go test -run '^$$' -fuzz '^FuzzCompute$$' -fuzztime $(FUZZTIME) ./services/marketplace/internal/workdiff
	go test -run '^$$' -fuzz '^FuzzPathsStayInRoot$$' -fuzztime $(FUZZTIME) ./services/marketplace/internal/meshworker
	go test -run '^$$' -fuzz '^FuzzPolicyHidesDenied$$' -fuzztime $(FUZZTIME) ./services/marketplace/internal/meshworker
	go test -run '^$$' -fuzz '^FuzzTextParser$$' -fuzztime $(FUZZTIME) ./services/mesh-exec/internal/backend/command
	go test -run '^$$' -fuzz '^FuzzJSONLParser$$' -fuzztime $(FUZZTIME) ./services/mesh-exec/internal/backend/command
	go test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) ./services/orchestrator/internal/pipeline
	go test -run '^$$' -fuzz '^FuzzParser$$' -fuzztime $(FUZZTIME) ./services/mesh-exec/internal/backend/claude
	go test -run '^$$' -fuzz '^FuzzAnswerNamesItsCall$$' -fuzztime $(FUZZTIME) ./services/mesh-exec/internal/agenthook
	go test -run '^$$' -fuzz '^FuzzParsers$$' -fuzztime $(FUZZTIME) ./services/mesh-exec/internal/backend/jsonstream
	go test -run '^$$' -fuzz '^FuzzSSEReader$$' -fuzztime $(FUZZTIME) ./services/orchestrator/internal/apiclient
	go test -run '^$$' -fuzz '^FuzzSideBySide$$' -fuzztime $(FUZZTIME) ./services/orchestrator/internal/console

##@ Code

.PHONY: lint
lint: $(TOOLS)/golangci-lint ## Run golangci-lint (installed into .tools with go install)
	@for m in $(MODULES); do echo "lint $$m"; (cd $$m && $(TOOLS)/golangci-lint run --config $(CURDIR)/.golangci.yaml ./...); done

$(TOOLS)/golangci-lint:
	GOBIN=$(TOOLS) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: fmt
fmt: $(TOOLS)/golangci-lint ## Format the code (gofumpt, goimports)
	@for m in $(MODULES); do (cd $$m && $(TOOLS)/golangci-lint fmt --config $(CURDIR)/.golangci.yaml ./...); done

.PHONY: tidy
tidy: ## go mod tidy every module (as image builds see them, without go.work)
	@for m in $(MODULES); do echo "tidy $$m"; (cd $$m && GOWORK=off go mod tidy); done

.PHONY: schema
schema: ## Regenerate workers/worker.schema.json from the Go types
	go test ./workers -run '^TestSchemaIsCurrent$$' -update

.PHONY: clean
clean: ## Remove build output
	rm -rf bin .build

##@ Help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^##@/ {printf "\n%s\n", substr($$0, 5)} /^[a-zA-Z0-9_\/-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)
