# The one entry point. Every target bootstraps .venv itself (see `setup`).
SHELL := /bin/bash
PY := .venv/bin/python
STAMP := .venv/.installed
export PYTHONPATH := $(CURDIR)
export JAX_COMPILATION_CACHE_DIR ?= $(CURDIR)/.cache/jax
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS ?= 0
export MPLBACKEND ?= Agg
# XLA's CPU loader logs a false SIGILL alarm per program loaded from the cache above (train/__init__.py says why)
export TF_CPP_MIN_LOG_LEVEL ?= 3

MOTION ?= jump
# ALGO, PRESET and SEED are passed to train only when given, so a motion's recipe (train/recipes.yaml) can set
# them; unset, train.cli's defaults apply (bcg, cpu, 0)
ALGO ?=
PRESET ?=
SEED ?=
ROBOT ?= sim
NET_IF ?=
RUN ?=
POLICY ?=
ARGS ?=
MINUTES ?= 60
# The robot computer's jax-free install (make setup-deploy); `make deploy` / `make soak` run from it when it
# is the only venv here (the robot), or when asked: make deploy VENV=.venv-deploy
DEPLOY_VENV := .venv-deploy
VENV ?= $(if $(and $(wildcard $(DEPLOY_VENV)/.installed),$(if $(wildcard $(STAMP)),,yes)),$(DEPLOY_VENV),.venv)
PYTHON ?= python3

.PHONY: setup setup-deploy lint-imports test test-fast test-slow docs docs-tables gradients-sigmoid gradients-sigmoid-h8 step-jacobians stiffness-transfer calibration-loop motion-table estimator-accuracy landing-search forward-jump-search forward-jump-far toe-jump-search contact-figure bridge-creep train export eval sim deploy soak calibrate bench clean lo-multicast link-faults gradients-touchdown bundle-drift gradients-jump impulse-training tracking-policies tracking eval-inputs

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	@command -v python3 >/dev/null || { echo "python3 (>=3.11) is required"; exit 1; }
	@python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "python3 >= 3.11 is required (the pinned numpy/jax/scipy/mujoco wheels); found $$(python3 -V)"; exit 1; }
	@test -d .venv || python3 -m venv .venv || { \
	  echo "python3 -m venv failed: on Debian/Ubuntu run 'apt-get install python3-venv'"; exit 1; }
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -r requirements.lock
	@echo "setup: compiling deploy's estimator, safety and policy kernels into numba's cache (once, ~40 s)"
	.venv/bin/python -c "from estimation.estimator import Estimator; Estimator(); from safety import SafetyMonitor; SafetyMonitor(); from policies.runtime import PolicyRuntime; from policies.artifact import artifact_dir, load_artifact; PolicyRuntime(load_artifact(artifact_dir('stand')))"
	@touch $(STAMP)
	@echo "setup: .venv ready"

# deploy + safety + policies + the sim bridge only (requirements-deploy.lock: no jax); the robot's install
setup-deploy: $(DEPLOY_VENV)/.installed

$(DEPLOY_VENV)/.installed: requirements-deploy.lock
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) (3.11) is required: see docs/robot-computer.md"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "$(PYTHON) >= 3.11 is required; found $$($(PYTHON) -V); e.g. make setup-deploy PYTHON=python3.11"; exit 1; }
	@test -d $(DEPLOY_VENV) || $(PYTHON) -m venv $(DEPLOY_VENV) || { \
	  echo "$(PYTHON) -m venv failed: on Debian/Ubuntu run 'apt-get install python3-venv'"; exit 1; }
	$(DEPLOY_VENV)/bin/pip install -q -r requirements-deploy.lock
	@echo "setup-deploy: compiling the estimator, safety and policy kernels into numba's cache (once; ~40 s here, more on the Orin)"
	$(DEPLOY_VENV)/bin/python -c "from estimation.estimator import Estimator; Estimator(); from safety import SafetyMonitor; SafetyMonitor(); from policies.runtime import PolicyRuntime; from policies.artifact import artifact_dir, load_artifact; PolicyRuntime(load_artifact(artifact_dir('stand')))"
	@touch $@
	@echo "setup-deploy: $(DEPLOY_VENV) ready (no jax)"

# DDS on loopback needs a multicast-capable lo (cyclonedds discovery); needs root, harmless if set.
lo-multicast:
	@ip link show lo | grep -q MULTICAST || ip link set lo multicast on 2>/dev/null || \
	  echo "warning: lo is not multicast-capable; run 'sudo ip link set lo multicast on' for DDS tests"

# The full suite (what CI runs): everything but the `slow` trainings, in two passes. First the compile- and
# compute-bound tests on TEST_WORKERS pytest-xdist workers, a test file per worker (a module's shared compiles stay
# shared); then the real-time and soak runs on their own, so their deadlines are not shared with a compile, and the
# downloads (`network`: beside the compiles their clip builds lengthened the first pass, docs/development.md).
# A pass that selects nothing (ARGS naming one file) is not a failure; both selecting nothing is (pytest's 5).
TEST_WORKERS ?= 2
PARALLEL_MARKERS := not (realtime or soak or network or slow)
SERIAL_MARKERS := (realtime or soak or network) and not slow
test: setup lo-multicast lint-imports
	@p=0; $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "$(PARALLEL_MARKERS)" $(ARGS) || p=$$?; \
	s=0; $(PY) -m pytest -q -m "$(SERIAL_MARKERS)" $(ARGS) || s=$$?; \
	echo "make test: parallel pass exit $$p, serial pass exit $$s (0 passed, 5 nothing selected)"; \
	{ [ $$p = 0 ] || [ $$p = 5 ]; } && { [ $$s = 0 ] || [ $$s = 5 ]; } && [ $$p$$s != 55 ]

# The contributor's loop: unit and contract tests, no JAX compiles (but the one jitted env-vs-deploy observation
# contract, marked `fast`), no real-time DDS runs, no downloads, no soaks (markers: pyproject.toml).
FAST_MARKERS := fast or not (jax or realtime or network or soak or slow or dds)
test-fast: setup lint-imports
	$(PY) -m pytest -q -m "$(FAST_MARKERS)" $(ARGS)

# The import contracts of pyproject.toml ([tool.importlinter]): layering, no jax outside train/.
lint-imports: setup
	.venv/bin/lint-imports pyproject.toml

test-slow: setup lo-multicast
	$(PY) -m pytest -q -m slow $(ARGS)

train: setup
	$(PY) -m train.cli --motion $(MOTION) $(if $(ALGO),--algo $(ALGO)) $(if $(PRESET),--preset $(PRESET)) $(if $(SEED),--seed $(SEED)) $(if $(CALIB),--calibration $(CALIB)) $(ARGS)

export: setup
	@test -n "$(RUN)" || { echo "usage: make export RUN=runs/<motion>/<stamp>"; exit 2; }
	$(PY) -m train.export --run $(RUN) $(ARGS)

eval: setup
	$(PY) -m eval $(if $(POLICY),--policy $(POLICY),--motion $(MOTION)) $(if $(CALIB),--calibration $(CALIB)) $(ARGS)

sim: setup lo-multicast
	$(PY) -m sim $(ARGS)

deploy: $(VENV)/.installed lo-multicast
	$(VENV)/bin/python -m deploy.cli --robot $(ROBOT) --motion $(MOTION) $(if $(POLICY),--policy $(POLICY)) $(if $(NET_IF),--net-if $(NET_IF)) $(ARGS)

# results/eval_inputs.json: every committed policy through make eval on the deploy tick (estimator + safety gate) and
# on the true state, side by side (~7 min)
eval-inputs: setup
	$(PY) -m experiments.eval_inputs $(ARGS)

# One row of results/tracking.json: a tracking policy (ours or holosoma's PPO / FastSAC) on its clip's segment in C MuJoCo
# (ARGS="--clip dance --policy ours|ppo|fastsac")
tracking: setup
	$(PY) -m experiments.tracking $(ARGS)

# holosoma's two G1 dance models through make deploy ROBOT=sim (70 s each, one after another): results/tracking_policies.json
tracking-policies: $(VENV)/.installed lo-multicast
	$(VENV)/bin/python -m experiments.tracking_policies $(ARGS)

# the loop against the sim bridge in real time for MINUTES, pushes and a scripted remote: runs/soak/<stamp>/soak.json
soak: $(VENV)/.installed lo-multicast
	$(VENV)/bin/python -m deploy.soak --minutes $(MINUTES) $(ARGS)

calibrate: setup lo-multicast
	$(PY) -m calibration.cli --robot $(ROBOT) $(if $(NET_IF),--net-if $(NET_IF)) $(ARGS)

# The seed study's contact-stiffness experiment (docs/experiments.md): trainings one after another (~1 h on a 2-core CPU), then eval;
# writes results/stiffness_transfer.json and results/bcg_vs_shac.json (rows already there are kept).
# results/gradients_sigmoid_h32.json and _h8.json (docs/experiments.md: gradient quality on the sigmoid contact)
gradients-sigmoid: setup
	$(PY) -m bench.gradients --contact sigmoid --horizon 32 --seeds 6 --ref-seeds 0 --no-all --stiffness k50 k300 --out results/gradients_sigmoid_h32.json $(ARGS)

gradients-sigmoid-h8: setup
	$(PY) -m bench.gradients --contact sigmoid --horizon 8 --seeds 6 --ref-seeds 0 --no-all --stiffness k50 k100 k300 --out results/gradients_sigmoid_h8.json $(ARGS)

# results/step_jacobians.json: per-step Jacobian norms of the closed loop around touch-down, bundled and not (~15 min)
step-jacobians: setup
	$(PY) -m bench.step_jacobians --horizon 32 --envs 4 --out results/step_jacobians.json $(ARGS)

# results/gradients_touchdown.json (docs "Experiments"): plain vs BCG gradients across touch-down on the
# impulse contact's modes, MJX's contact and the penalty spring (landing from flight, 64 envs x 12 seeds per
# setting; hours on this CPU: narrow it with ARGS, e.g. ARGS="--contacts mjx --horizons 32 --local 0"). The impulse
# modes at 32 steps hold ~19 GB for 64 envs: on a 24 GB machine use ARGS="--contacts soft --horizons 32 --envs 32 --seeds 24"
gradients-touchdown: setup
	$(PY) -m bench.gradients_touchdown --out results/gradients_touchdown.json $(ARGS)

# results/bundle_drift.json (docs "Experiments"): how far the seed's bundle moves the rollout it differentiates
bundle-drift: setup
	$(PY) -m bench.bundle_drift --out results/bundle_drift.json $(ARGS)

# results/gradients_jump.json (docs "Experiments"): a jump training's actor gradient over the whole jump, plain vs the
# seed's bundle, e.g. CHECKPOINT=runs/jump/<stamp>/checkpoints/latest.npz NAME=trained ARGS="--modes hard soft --horizon 16"
gradients-jump: setup
	@test -n "$(CHECKPOINT)" -a -n "$(NAME)" || { echo "usage: make gradients-jump CHECKPOINT=runs/jump/<stamp>/checkpoints/<name>.npz NAME=<label>"; exit 2; }
	$(PY) -m bench.gradients_jump --checkpoint $(CHECKPOINT) --name $(NAME) --out results/gradients_jump.json $(ARGS)

# results/impulse_training.json + docs/impulse_training.png: a finished jump training on the impulse contact
# as a row, e.g. ARGS="--run runs/jump/<stamp> --name bcg_soft300_s0 --artifact <its export dir> --plot"
impulse-training: setup
	$(PY) -m experiments.impulse_training $(ARGS)

stiffness-transfer: setup
	$(PY) -m experiments.stiffness $(ARGS)

# The sim-to-real proxy (docs/calibration.md): calibrate the bridge with hidden perturbations, eval and dry-run the
# nominal and the calibrated hop on it (no training here); writes results/calibration_loop.json (steps kept).
calibration-loop: setup lo-multicast
	$(PY) -m experiments.calibration_loop $(ARGS)

# Every policies/g1/<motion>/ through eval (20 episodes, seed 0) and one real-time dry run on the
# sim bridge (DDS domain 180), with its provenance; writes results/motions.json (rows kept while the ONNX is unchanged)
# and prints the markdown table. A new motion: make motion-table ARGS="--motions <name>"
motion-table: setup lo-multicast
	$(PY) -m experiments.motion_table $(ARGS)

# results/landing_search.json (docs/motions.md: jump_swing's landing keyframes)
landing-search: setup
	$(PY) -m experiments.landing_search $(ARGS)

# results/forward_jump_search.json (docs/motions.md: the forward jump search from the draft);
# results/forward_jump_search_tau.json: ARGS="--start toe --tau-max 0.75 --rounds 7 --out results/forward_jump_search_tau.json"
# (motions/forward_jump_toes.yaml)
forward-jump-search: setup
	$(PY) -m experiments.forward_jump_search $(ARGS)

# results/forward_jump_search_far.json (docs/motions.md: motions/forward_jump.yaml):
# forward_jump_toes's keyframes with the flight's travel raised a centimetre a step, then polished (~8 min)
forward-jump-far: setup
	$(PY) -m experiments.forward_jump_search --start motions/forward_jump_toes.yaml --travel-steps 0.26 0.27 0.28 \
		--tau-max 0.75 --travel-min 0.48 --rounds 5 --evals 3000 --out results/forward_jump_search_far.json $(ARGS)

# results/toe_jump_search.json (docs/motions.md: jump's keyframes; ARGS="--write motions/jump.yaml" writes them)
toe-jump-search: setup
	$(PY) -m experiments.toe_jump_search $(ARGS)

# results/estimator.json (docs/deploy.md: the estimator against ground truth with sensor noise; ~2 min)
estimator-accuracy: setup
	$(PY) -m bench.estimator --out results/estimator.json $(ARGS)

# results/contact_models.json + docs/contact_models.png (docs/training.md: contact models)
contact-figure: setup
	$(PY) -m bench.contact_figure $(ARGS)

# results/bridge_creep.json (docs/experiments.md: creep of a standing robot per contact setting)
bridge-creep: setup
	$(PY) -m sim.creep $(ARGS)

# results/link_faults.json (docs/link_faults.md): `make deploy ROBOT=g1 NET_IF=<veth>` against the sim bridge at
# 192.168.123.161 in another network namespace, one run per link fault (loss, bursts, a bandwidth cap, the link
# down, delay, jitter); ~10 min; root and nftables (apt-get install nftables). One fault: ARGS="--faults burst100"
link-faults: setup
	$(PY) -m experiments.link_faults $(ARGS)

# The documentation site (mkdocs.yml, docs/): strict, so a broken link or a page missing from the nav fails.
docs: setup
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir site $(ARGS)

# Rewrite every results table in README.md and docs/*.md from results/*.json (docs/tables.py's registry).
docs-tables: setup
	$(PY) docs/tables.py $(ARGS)

bench: setup lo-multicast
	$(PY) -m bench.run $(ARGS)

clean:
	rm -rf .venv .venv-deploy .cache .pytest_cache
