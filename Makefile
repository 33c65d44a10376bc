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

# slow tests not marked `slow` (yet): the report and dashboard pages over a recorded run
# (a real `swarmfab run` in their fixture, then Chromium), the policy benchmark's
# command, and verifications of the recurrent template, which takes ~10 s to compile
# (the red-team C rows check the same verdicts faster); `make test` runs them all
FAST_DESELECT := \
	--deselect tests/report/test_dashboard.py \
	--deselect tests/report/test_html_report.py::test_the_report_is_one_file_that_needs_no_network \
	--deselect tests/report/test_html_report.py::test_the_report_draws_every_chart_in_chromium \
	--deselect tests/report/test_html_report.py::test_an_unwritable_report_path_is_a_clear_error \
	--deselect tests/report/test_html_report.py::test_every_command_that_takes_a_run_accepts_latest \
	--deselect tests/swarm/test_policy_bench.py::test_bench_policy_command_measures_real_candidates \
	--deselect tests/test_cli.py::test_verify_accepts_the_rendered_template \
	--deselect tests/test_cli.py::test_verify_rejects_wrong_output_and_names_the_failing_case

.PHONY: demo test test-fast lint typecheck bench bench-swarm bench-transfer bench-engine bench-policy gpu-compile-check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e .
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(DEV_STAMP)

demo: $(STAMP)
	$(BIN)/swarmfab run examples/goals/kda-demo.toml
	$(BIN)/swarmfab export --out out/kda-champion

test: $(DEV_STAMP)
	$(MAKE) lint
	$(BIN)/python -m pytest -q

# the suite without the tests marked slow and those above: a few minutes on 2 cores
test-fast: $(DEV_STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(FAST_DESELECT)

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
	$(BIN)/python scripts/bench_transfer.py --seeds 3 --evaluations 12

# the inference engine vs transformers' generate on the tiny Kimi Linear, concurrency 1/8/32
bench-engine: $(DEV_STAMP)
	$(BIN)/python scripts/bench_engine.py

# every CUDA template setting (nvcc, sm_90a) and Triton kernel (GPUTarget cuda 90) compiled
# without a device; needs nvcc and Triton (the gpu extra): exit 2 says which is missing
gpu-compile-check: $(STAMP)
	$(BIN)/pip freeze | grep '^torch==' > $(VENV)/torch-pin.txt  # Triton must not replace torch
	$(BIN)/pip install --quiet -c $(VENV)/torch-pin.txt -e ".[gpu]"
	$(BIN)/python -m swarmfab.kernels.delta_gpu.compile_check

# built-in agents vs uniform random search over the same space: 3 seeds, 30 evaluations
# each, every distinct candidate built, verified and timed once (about 10 min on 2 cores)
bench-policy: $(STAMP)
	$(BIN)/swarmfab bench-policy kda --seeds 3 --max-evaluations 30

clean:
	rm -rf $(VENV) .swarmfab out .pytest_cache .mypy_cache .ruff_cache
