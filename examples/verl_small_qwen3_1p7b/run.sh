#!/usr/bin/env bash
# Launch one variant of the small recipe (Qwen3-1.7B-Base, DAPO-Math, AIME24; one node of 8 GPUs) with verl 0.9.1.
#
#   bash examples/verl_small_qwen3_1p7b/run.sh VARIANT [hydra overrides and options, in any order ...]
#   bash examples/verl_small_qwen3_1p7b/run.sh --list
#
# VARIANT is a file name in config/ without .yaml: grpo_lag1, gspo_lag1, sat_grpo_lag1, sat_gspo_lag1 and
# their _lag8 twins. Extra arguments go to Hydra, overrides first (e.g. `trainer.logger=[console,file,wandb]`, or
# `--cfg job` to print the composed config and exit).
#
# Environment (all optional):
#   SAT_MODEL_PATH   local Qwen/Qwen3-1.7B-Base               (default ~/models/Qwen3-1.7B-Base)
#   SAT_DATA_DIR     output of examples/data/prepare_aime_dapo.py (default ~/data/sat_aime)
#   SAT_CKPT_DIR     checkpoint root                          (default ~/ckpt/sat_small)
#   SAT_LOG_DIR      root of verl's file logger: the run log is $SAT_LOG_DIR/sat_small_qwen3_1p7b/VARIANT.jsonl
#                    (default ~/ckpt/sat_small/logs); check it with: python -m sat_ext.check_run <that file>
#   PYTHON           interpreter (default python3)
#   SAT_DRY_RUN=1    print the command, one argument per line, instead of running it
#
# One node: `ray start --head --num-gpus 8` first (or let verl start a local Ray); GPUs 0-3 train, 4-7 roll out.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONFIG_DIR="${HERE}/config"

if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
    sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi
if [[ "$1" == "--list" ]]; then
    for f in "${CONFIG_DIR}"/*_lag*.yaml; do basename "${f}" .yaml; done
    exit 0
fi

VARIANT="$1"
shift
if [[ ! -f "${CONFIG_DIR}/${VARIANT}.yaml" ]]; then
    echo "run.sh: unknown variant '${VARIANT}' (no ${CONFIG_DIR}/${VARIANT}.yaml); try --list" >&2
    exit 2
fi

# verl's file logger writes $VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl in the TaskRunner (a Ray
# worker), so the root travels in Ray's runtime_env, as an absolute path.
LOG_DIR="${SAT_LOG_DIR:-${HOME}/ckpt/sat_small/logs}"
mkdir -p "${LOG_DIR}"
LOG_DIR="$(cd "${LOG_DIR}" && pwd)"

export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-sat_ext.verl.plugin}"

# Hydra takes the overrides as one run before its options: sat_ext reorders the arguments, so overrides and
# options (--cfg job, ...) can be given in any order.
PY="${PYTHON:-python3}"
mapfile -d '' ARGS < <("${PY}" -c 'import sys; from sat_ext.example_configs import hydra_argv
print("\0".join(hydra_argv(sys.argv[1:])), end="")' \
    "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_ROOT=${LOG_DIR}" "$@")
wait $! || { echo "run.sh: ${PY} cannot import sat_ext (set PYTHON to the environment that has it)" >&2; exit 2; }
CMD=("${PY}" -m sat_ext.verl.main_ppo --config-path "${CONFIG_DIR}" --config-name "${VARIANT}" "${ARGS[@]}")

if [[ "${SAT_DRY_RUN:-0}" == "1" ]]; then
    printf '%s\n' "${CMD[@]}"
    exit 0
fi
echo "run.sh: run log -> ${LOG_DIR}/sat_small_qwen3_1p7b/${VARIANT}.jsonl (check: python -m sat_ext.check_run <it>)" >&2
exec "${CMD[@]}"
