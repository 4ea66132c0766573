# runbox: the targets a developer and CI need. `make test` is what CI runs.
GO ?= go
PKGS := ./...

.PHONY: all deps demo test unit vet cross bench fuzz build clean

all: vet test

## deps: install what demo and test need (static busybox, bubblewrap), or say what is missing
deps:
	@./scripts/deps

## demo: open a session on a locally built image, run, snapshot, reopen, close
demo: deps
	CGO_ENABLED=0 $(GO) run ./cmd/runbox demo

## test: vet for every platform, then every test (integration tests need a Docker Engine) under -race
test: deps vet cross
	$(GO) test -race -count=1 -timeout 25m $(PKGS)

## unit: the tests that need no Docker Engine: every package but integration/
unit:
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v '/integration$$')

## vet: go vet, gofmt, and a tidy go.mod/go.sum
vet:
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

## cross: the macOS and Windows code must at least compile and vet
cross:
	GOOS=darwin $(GO) vet $(PKGS)
	GOOS=windows $(GO) vet $(PKGS)
	GOOS=darwin $(GO) test -c -o /dev/null ./host/
	GOOS=windows $(GO) test -c -o /dev/null ./host/

## bench: runbox beside the raw Engine API / os/exec in one run, as ratios
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1s -count 3 -timeout 30m ./integration/ ./host/ | $(GO) run ./internal/benchtable

## fuzz: fuzz the agent's frame decoder for a while
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzReader -fuzztime 60s ./internal/agent/

## build: a static runbox, which can also serve as the in-session agent, and beside it the host sandbox's small helper
build:
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$$(git describe --tags --always --dirty 2>/dev/null || echo unknown)" -o bin/runbox ./cmd/runbox
	CGO_ENABLED=0 $(GO) build -o bin/runbox-sandbox ./cmd/runbox-sandbox

clean:
	rm -rf bin
