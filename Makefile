# Each target bootstraps what it needs, so `make demo` and `make test` work on a fresh
# Debian machine. See README.md.
SHELL := /bin/bash
STAMP := node_modules/.zmesh-bootstrap
# Every target runs on the pinned Node LTS that scripts/bootstrap.sh installs in .tools/node
# (pnpm, tsc, ava, the tests' pods and the bench included), not on the machine's node.
NODE := .tools/node/bin/node
export PATH := $(CURDIR)/.tools/node/bin:$(PATH)

.PHONY: all bootstrap build bpf native lint test fuzz demo bench bench-node image clean

all: build

$(NODE): scripts/bootstrap.sh
	@scripts/bootstrap.sh node
	@touch $(NODE)

$(STAMP): package.json pnpm-lock.yaml scripts/bootstrap.sh $(NODE)
	@scripts/bootstrap.sh
	@touch $(STAMP)

bootstrap: $(STAMP)

bpf: bootstrap
	@$(MAKE) -s -C bpf

# The N-API addon for ZDS's SOCK_SEQPACKET socket and SCM_RIGHTS (docs/zds.md), with gcc.
native: bootstrap
	@$(MAKE) -s -C packages/shared/native

build: bootstrap bpf native
	@pnpm exec tsc -b
	@node scripts/build-info.mjs
	@node scripts/bundle.mjs

# biome (format, lint); knip (knip.json: no unused file, export, type or dependency, no unlisted
# dependency or binary; an export only a spawned script uses is tagged `@public` with the reason); dependency-cruiser (.dependency-cruiser.cjs: ztunnel's stage order,
# no harness or test support in the products, no cycles; the waypoint's request/forward
# cycle is a known violation in .dependency-cruiser-known-violations.json).
lint: bootstrap
	@pnpm exec biome check .
	@pnpm exec depcruise packages test --ignore-known --output-type err
	@pnpm exec knip --no-config-hints

test: build lint
	@scripts/test.sh

# Property-based fuzzing of the HBONE parsers (*-fuzz.test.ts) with a long budget; CI runs
# the same targets with ZMESH_FUZZ_RUNS=300 and seed 38. FUZZ_RUNS=N FUZZ_SEED=S to change.
fuzz: build
	@ZMESH_LOG=fatal ZMESH_FUZZ_RUNS=$(or $(FUZZ_RUNS),20000) $(if $(FUZZ_SEED),ZMESH_FUZZ_SEED=$(FUZZ_SEED)) pnpm exec ava --timeout=10m $$(find packages -path '*/dist/*' -prune -o -name '*-fuzz.test.ts' -print)

demo: build
	@bin/zmesh demo

# The full bench; rewrites the generated section of docs/performance.md from the run's JSON.
# BASELINE=/other/checkout/bin/zmesh adds that build's ztunnel pair as "before".
bench: build
	@mkdir -p out && bin/zmesh bench --json out/bench.json --png out/bench.png $(if $(BASELINE),--baseline $(BASELINE))
	@node scripts/perf-section.mjs out/bench.json docs/performance.md

# The ztunnel pair's memory and throughput rows on each Node runtime of RUNTIMES, in one run,
# each divided by the first (docs/performance.md, "Node 20 vs Node 24"). An item is nodeNN
# (the checkout's or the machine's Node of that major) or a node's path, then extra node flags,
# which override bin/zmesh's tuned ones.
RUNTIMES ?= node20,node24,node24 --max-semi-space-size=1,node24 --max-semi-space-size=4,node24 --max-semi-space-size=8,node24 --turbofan --maglev
bench-node: build
	@mkdir -p out && bin/zmesh bench --runtimes '$(RUNTIMES)' --workloads memory,iperf3,HTTP --json out/bench-node.json --png out/bench-node.png

# The OCI image (Containerfile), built with podman from the local build, no registry involved;
# podman and runc are installed when root and missing. ZMESH_IMAGE=name:tag overrides the tag.
image: build
	@scripts/image.sh

clean:
	@rm -rf packages/*/dist test/dist bpf/build packages/shared/native/build
	@find packages test -name '*.tsbuildinfo' -delete
