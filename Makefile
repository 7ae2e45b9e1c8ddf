# Meshwork: every task is a target; `make help` lists them.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

MODULES := pkg migrations workers services/marketplace services/mesh-exec services/orchestrator
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
	$(MAKE) --no-print-directory test-images

.PHONY: test-images
test-images: build ## Build the test-only images: the agent worker with the FAKE claude (meshwork/claude-worker-fake:test)
	@mkdir -p bin/test
	CGO_ENABLED=0 go build -trimpath -o bin/test/fakeclaude ./services/mesh-exec/testdata/fakeclaude
	@log=$$(mktemp); docker build -q -f deploy/docker/claude-worker-fake.Dockerfile -t meshwork/claude-worker-fake:test . >"$$log" 2>&1 \
	  || { cat "$$log" >&2; rm -f "$$log"; exit 1; }; rm -f "$$log"; echo "built meshwork/claude-worker-fake:test"

.PHONY: image-claude-worker
image-claude-worker: build ## Build the Claude Code worker image for users (needs a registry and npm; CLAUDE_CODE_VERSION)
	docker build -f deploy/docker/claude-worker.Dockerfile $${CLAUDE_CODE_VERSION:+--build-arg CLAUDE_CODE_VERSION=$$CLAUDE_CODE_VERSION} \
	  -t $(IMAGE_PREFIX)/claude-worker:$(IMAGE_TAG) .

##@ Run

.PHONY: up
up: build ## Start what exists so far: Postgres (POSTGRES_IMAGE) with the schema migrated
	deploy/dev/up.sh

.PHONY: down
down: ## Stop what `make up` started; the data volume is kept
	docker rm -f meshwork-postgres >/dev/null 2>&1 || true

.PHONY: down/volumes
down/volumes: down ## Stop what `make up` started and delete its data
	docker volume rm meshwork-pgdata >/dev/null 2>&1 || true

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
test/cleanup: ## Remove anything tests left behind (containers and volumes labelled meshwork.test)
	@ids=$$(docker ps -aq --filter label=meshwork.test); \
	  if [ -n "$$ids" ]; then echo "removing leftover test containers: $$ids"; docker rm -fv $$ids >/dev/null; fi
	@vols=$$(docker volume ls -q --filter label=meshwork.test); \
	  if [ -n "$$vols" ]; then docker volume rm $$vols >/dev/null; fi

.PHONY: bench
bench: ## Run the benchmarks (BENCHTIME=2s); figures with p50/p99 where goals are percentiles
	go test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 30s)
	go test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./pkg/action
	go test -run '^$$' -fuzz '^FuzzEvaluate$$' -fuzztime $(FUZZTIME) ./pkg/gate
	go test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) ./pkg/workerdef
	go test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) ./services/orchestrator/internal/pipeline
	go test -run '^$$' -fuzz '^FuzzParser$$' -fuzztime $(FUZZTIME) ./services/mesh-exec/internal/backend/claude
	go test -run '^$$' -fuzz '^FuzzSSEReader$$' -fuzztime $(FUZZTIME) ./services/orchestrator/internal/apiclient

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
