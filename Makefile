# watchbot: `make demo` and `make test` do all the set-up a fresh machine needs (Go 1.26,
# Node 20 and npm must be installed; npm packages come from the committed package-lock.json).
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)

.PHONY: all build test vet cross fmt-check demo bench soak emulator clean

all: build

## build: a static binary in bin/watchbot. It is built beside (bin/.watchbot.build, which keeps go
## build's up-to-date check) and renamed into place, so a bin/watchbot started meanwhile runs the
## old binary or the new one, never a half-written or missing one; builds run one at a time
build:
	@mkdir -p bin
	exec 9>bin/.build.lock && flock 9 && \
	  CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/.watchbot.build ./cmd/watchbot && \
	  cp bin/.watchbot.build bin/.watchbot.new && mv -f bin/.watchbot.new bin/watchbot

node_modules/.package-lock.json: package-lock.json
	scripts/local-sqs --install

## test: everything CI runs: formatting, vet, the cross-builds and aws-lambda-ric's native addon
## side by side; the race-enabled test suite (unit, emulator, linter) with the fault-injection
## scenarios beside it; then the container smoke run, the built binary under env -i and the demo
## against its golden transcript, side by side, each one's output printed whole when it ends.
## internal/testing/testprogress prints a line per package as it ends, failures in full, and
## "N passed, N failed" last; it fails when go test did, though the pipe drops go test's exit
## status. The suite's tests mostly wait on processes and emulators in real time (the cores sit
## idle half the run), so the scenarios run beside the rest, their report read after it from a
## file (two writers on one pipe could interleave a long line), and -parallel 8 runs more tests
## than the cores at once
test: node_modules/.package-lock.json
	@$(MAKE) --no-print-directory -j4 --output-sync=target fmt-check vet cross ric-addon
	@scenarios=$$(mktemp); trap 'rm -f "$$scenarios"' EXIT; \
	$(GO) test -json -race -count=1 -timeout 12m ./internal/testing/scenarios >"$$scenarios" 2>&1 & bg=$$!; \
	{ $(GO) test -json -race -count=1 -parallel 8 -timeout 12m $$($(GO) list ./... | grep -v -e /internal/testing/scenarios -e /internal/testing/container); \
	  wait $$bg; cat "$$scenarios"; } 2>&1 | $(GO) run ./internal/testing/testprogress
	@$(MAKE) --no-print-directory -j3 --output-sync=target smoke-container smoke demo-golden

## ric-addon: aws-lambda-ric's native addon, built from the pinned package's sources
## (scripts/ric-addon), for the listen --lambda Node.js test to run the client as Lambda does
.PHONY: ric-addon
ric-addon: node_modules/.package-lock.json
	scripts/ric-addon

## smoke-container: the static binary run as a container runs it (docs/containers.md): PID 1 of
## a new PID namespace, read-only root, a writable /tmp, /dev/shm of 64 MiB, uid 65534, only the
## task definition's environment; it needs root (CI runs as root: under CI=true it never skips)
.PHONY: smoke-container
smoke-container: node_modules/.package-lock.json
	$(GO) test -count=1 -timeout 5m -v -run TestContainer ./internal/testing/container

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './node_modules/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# CROSS are the GOOS/GOARCH pairs the operator tools are built for besides linux/amd64 (listen
# and try run on Linux only; elsewhere they say so and exit 2: docs/containers.md, Platforms).
CROSS := darwin/arm64 windows/amd64 linux/arm64

## cross: every package built, and vetted with its tests, for each of CROSS; the static binaries
## land in bin/watchbot-GOOS-GOARCH
cross:
	@set -e; for p in $(CROSS); do \
	  os=$${p%/*}; arch=$${p#*/}; ext=; [ "$$os" = windows ] && ext=.exe; \
	  echo "cross: $$os/$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build ./... ; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) vet ./... ; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' \
	    -o bin/watchbot-$$os-$$arch$$ext ./cmd/watchbot; \
	done

## demo: run the supervisor end to end against the local emulator
demo: build node_modules/.package-lock.json
	scripts/demo

## demo-http: the same with an HTTP worker (--http-worker), as in an Elastic Beanstalk worker environment
.PHONY: demo-http
demo-http: build node_modules/.package-lock.json
	DEMO_HTTP=1 scripts/demo

## demo-mapreduce: a map-reduce job with `watchbot progress` on the local SQS and DynamoDB emulators:
## the map fans out parts, the part that completes the job sends the reduce, exactly once
.PHONY: demo-mapreduce
demo-mapreduce: build node_modules/.package-lock.json
	scripts/demo-mapreduce

## demo-golden: make demo twice from a fresh copy of the checkout, each transcript compared with
## scripts/testdata/demo.golden, times, ids and ports masked; scripts/demo-golden -update
## rewrites the golden file
.PHONY: demo-golden
demo-golden: node_modules/.package-lock.json
	scripts/demo-golden

## smoke: the built binary as a user runs it, under env -i with only the documented variables,
## against the local emulator: send, listen (success, retry, dead-letter), status, dead-letter
## count, a SIGTERM drain; any panic fails it. CI ends with it
.PHONY: smoke
smoke: build node_modules/.package-lock.json
	scripts/smoke

## bench: watchbot against a minimal receive-spawn-delete loop on the same emulator
bench: build node_modules/.package-lock.json
	scripts/bench

## bench-docs: the same, then rewrite the performance table of docs/performance.md with its figures
.PHONY: bench-docs
bench-docs: build node_modules/.package-lock.json
	scripts/bench -page docs/performance.md

## soak: the long fault-injection and soak runs (20 minutes by default)
soak: build node_modules/.package-lock.json
	scripts/soak

## emulator: the local emulators in the foreground: SQS and S3 on 127.0.0.1:4566 (each of QUEUES
## with its DLQ, the bucket watchbot-payloads), DynamoDB on 127.0.0.1:4567 (the tables
## watchbot-dedupe, watchbot-limits, watchbot-progress); prints the variables and the
## bin/watchbot commands that use them; Ctrl-C stops them. Variables: FAUXQS_PORT=4566
## DYNALITE_PORT=4567 QUEUES=jobs (or QUEUE=jobs) MAX_RECEIVE_COUNT=3 VISIBILITY_TIMEOUT=30
## FIFO=1 (see scripts/local-sqs)
emulator: build node_modules/.package-lock.json
	scripts/local-sqs

## lint-template: lint CloudFormation templates, TEMPLATES=stack.yaml (several, space-separated),
## with the linter and the current resource specification the tests use (scripts/lint-template)
.PHONY: lint-template
lint-template: node_modules/.package-lock.json
	scripts/lint-template $(TEMPLATES)

clean:
	rm -rf bin

## docs: rewrite the generated flag tables of docs/ from the CLI's definitions (a test fails when
## one is stale)
.PHONY: docs
docs:
	$(GO) test -count=1 -run TestDocsFlagTables ./cmd/watchbot -update-docs

## scalesim: rerun the autoscaling simulation and rewrite its table and charts in docs/template.md
.PHONY: scalesim
scalesim:
	$(GO) test -count=1 -run TestDocs ./internal/testing/scalesim -update
