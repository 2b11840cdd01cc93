# Trellis developer tasks. `make help` lists them.
.PHONY: help test test-short lint bench ci dev proto proto-check proto-release proto-ts build build-cgo sdk-ts sdk-py vet-tool

STORE ?= sqlite://$(CURDIR)/bench.db

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

test: ## run every test with the race detector (as CI does)
	go test -race -count=1 ./...

test-short: ## skip the crash and multi-process tests
	go test -short -count=1 ./...

# The tools (buf, staticcheck, the protoc plugins) are tool dependencies of
# tools/go.mod, apart from the root module's.
TOOL = go tool -modfile=tools/go.mod

lint: ## gofmt, go vet, staticcheck (staticcheck.conf) and the .proto checks
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	go vet ./...
	$(TOOL) staticcheck ./...
	$(MAKE) proto-check

bench: ## trellis bench on STORE (default: a SQLite file here); e.g. make bench STORE='sqlite:///tmp/b.db?durability=relaxed'
	go run ./cmd/trellis bench --store '$(STORE)' --workload w1,w2,w3 --json

ci: ## what CI runs
	./.ci/run

build: ## build ./trellis (pure-Go SQLite, modernc.org/sqlite)
	go build -o trellis ./cmd/trellis

build-cgo: ## build ./trellis on SQLite's C library (-tags trellis_cgo; needs cgo and a C compiler)
	CGO_ENABLED=1 go build -tags trellis_cgo -o trellis ./cmd/trellis

dev: ## run the demo on ./trellis.db
	go run ./cmd/trellis dev

proto: ## regenerate the worker protocol's Go code (internal/gen) from proto/ with buf (tools/go.mod)
	go generate ./proto

proto-check: ## buf lint, and buf breaking against the protocol as last released (proto/released)
	$(TOOL) buf lint
	$(TOOL) buf breaking --against proto/released/trellis.worker.v1.binpb

proto-release: ## renew the released protocol, buf breaking's baseline: at a release only (docs/worker-protocol.md)
	$(TOOL) buf build --exclude-source-info -o proto/released/trellis.worker.v1.binpb

vet-tool: ## build ./trellis-vet, the determinism analyzer (go vet -vettool=$(pwd)/trellis-vet ./...)
	go build -o trellis-vet ./cmd/trellis-vet

proto-ts: ## regenerate the TypeScript SDK's protocol code (sdk/typescript/gen; after npm ci there)
	cd sdk/typescript && npm run generate

sdk-ts: build ## the TypeScript SDK's tests against ./trellis (npm ci first)
	cd sdk/typescript && npm ci --no-audit --no-fund && TRELLIS_BIN=$(CURDIR)/trellis npm test

sdk-py: build ## the Python SDK's tests against ./trellis
	cd sdk/python && TRELLIS_BIN=$(CURDIR)/trellis python3 -m unittest discover -s tests
