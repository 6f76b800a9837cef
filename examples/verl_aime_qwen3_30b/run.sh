#!/usr/bin/env bash
# Launch one variant of the Qwen3-30B-A3B-Base / DAPO-Math / AIME24 example with verl 0.9.1 on one node of
# 8 GPUs (GPUs 0-3 train, 4-7 roll out: the paper's App. F).
#
#   bash run.sh VARIANT [hydra overrides and options, in any order ...]
#   bash run.sh --list
#
# VARIANT is a file name in config/ without .yaml: one per row of the paper's Table 1 and lag, e.g.
# sat_gspo_r3_lag1, sat_gspo_r3_lag8, grpo_tis_r3_lag1, dppo_tv_lag8 (--list shows all 26). Extra arguments
# go to Hydra (overrides first, then options), e.g. `trainer.logger=[console,wandb]`, `--cfg job` to print the composed
# config and exit without starting anything, or `denominator=rollout` for App. E.6's rollout log-prob
# denominator on a GRPO / GSPO / SAT variant (the run is then named VARIANT_rollout_lp).
#
# Environment (all optional):
#   SAT_MODEL_PATH   local Qwen/Qwen3-30B-A3B-Base        (default ~/models/Qwen3-30B-A3B-Base)
#   SAT_DATA_DIR     output of the data script (prepare_aime_dapo.py; default ~/data/sat_aime)
#   SAT_CKPT_DIR     checkpoint root                      (default ~/ckpt/sat_aime)
#   SAT_LOG_DIR      verl's file-logger root: <it>/sat_aime_qwen3_30b/<experiment>.jsonl (default ~/ckpt/sat_aime/logs)
#   PYTHON           interpreter (default python3)
#   SAT_DRY_RUN=1    print the command, one argument per line, instead of running it
#
# Start Ray on the node first (`ray start --head`); verl's driver joins it.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONFIG_DIR="${HERE}/config"

if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
    sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi
if [[ "$1" == "--list" ]]; then
    # variants: the top-level configs that no other top-level config names as a plain default (a base)
    BASES=" $(sed -n 's/^  - \([A-Za-z0-9_]*\)$/\1/p' "${CONFIG_DIR}"/*.yaml | sort -u | tr '\n' ' ') "
    for f in "${CONFIG_DIR}"/*.yaml; do
        name="$(basename "${f}" .yaml)"
        [[ "${BASES}" == *" ${name} "* ]] || echo "${name}"
    done
    exit 0
fi

VARIANT="$1"
shift
if [[ ! -f "${CONFIG_DIR}/${VARIANT}.yaml" ]]; then
    echo "run.sh: unknown variant '${VARIANT}' (no ${CONFIG_DIR}/${VARIANT}.yaml); try --list" >&2
    exit 2
fi

# App. E.6's switch keeps the variant's name apart from its paper-denominator twin (checkpoints, logs),
# unless the caller names the run.
OVERRIDES=()
if [[ " $* " == *" denominator=rollout "* && " $* " != *"trainer.experiment_name="* ]]; then
    OVERRIDES+=("trainer.experiment_name=${VARIANT}_rollout_lp")
fi

# verl's file logger writes $VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl in the TaskRunner (a Ray
# worker), so the root travels in Ray's runtime_env, as an absolute path (for sat-ext check-run).
LOG_DIR="${SAT_LOG_DIR:-${HOME}/ckpt/sat_aime/logs}"
mkdir -p "${LOG_DIR}"
LOG_DIR="$(cd "${LOG_DIR}" && pwd)"
OVERRIDES+=("+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_ROOT=${LOG_DIR}")

# Make a failed SAT registration loud in every verl process (verl logs entry-point failures at DEBUG only);
# the policy_loss._target_ of the SAT variants imports sat_ext.verl as well.
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-sat_ext.verl.plugin}"

# Hydra takes the overrides as one run before its options: sat_ext reorders the arguments, so overrides and
# options (--cfg job, ...) can be given in any order.
PY="${PYTHON:-python3}"
mapfile -d '' ARGS < <("${PY}" -c 'import sys; from sat_ext.example_configs import hydra_argv
print("\0".join(hydra_argv(sys.argv[1:])), end="")' "$@" "${OVERRIDES[@]}")
wait $! || { echo "run.sh: ${PY} cannot import sat_ext (set PYTHON to the environment that has it)" >&2; exit 2; }
CMD=("${PY}" -m sat_ext.verl.main_ppo --config-path "${CONFIG_DIR}" --config-name "${VARIANT}"
     "${ARGS[@]+"${ARGS[@]}"}")

if [[ "${SAT_DRY_RUN:-0}" == "1" ]]; then
    printf '%s\n' "${CMD[@]}"
    exit 0
fi
echo "run.sh: run log -> ${LOG_DIR}/sat_aime_qwen3_30b/<experiment>.jsonl (check: sat-ext check-run <it>)" >&2
exec "${CMD[@]}"
