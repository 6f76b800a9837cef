#!/usr/bin/env bash
# Launch one variant of the Qwen3-30B-A3B-Base / DAPO-Math / AIME24 example with verl 0.9.1.
#
#   bash examples/verl_aime_qwen3_30b/run.sh VARIANT [hydra overrides ...]
#   bash examples/verl_aime_qwen3_30b/run.sh --list
#
# VARIANT is a file name in config/ without .yaml, e.g. sat_gspo_r3_lag1, sat_gspo_r3_lag8, sat_grpo_r3_lag1,
# grpo_lag1, gspo_lag1, gspo_r3_lag1, dppo_tv_lag1 (every method also has a _lag8 twin). Extra arguments are
# passed to Hydra unchanged, e.g. `trainer.logger=[console,wandb]`, `actor_rollout_ref.rollout.n=8`, or
# `--cfg job` to print the composed config and exit without starting anything.
#
# Environment (all optional):
#   SAT_MODEL_PATH   local Qwen/Qwen3-30B-A3B-Base        (default ~/models/Qwen3-30B-A3B-Base)
#   SAT_DATA_DIR     output of examples/data/prepare_aime_dapo.py (default ~/data/sat_aime)
#   SAT_CKPT_DIR     checkpoint root                      (default ~/ckpt/sat_aime)
#   TRAIN_NNODES / ROLLOUT_NNODES / GPUS_PER_NODE   cluster shape (defaults in config: 4 / 4 / 8)
#   PYTHON           interpreter (default python3)
#   SAT_DRY_RUN=1    print the command, one argument per line, instead of running it
#
# Start a Ray cluster spanning TRAIN_NNODES + ROLLOUT_NNODES nodes first (`ray start --head` on this node,
# `ray start --address=...` on the others); verl's driver joins it.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONFIG_DIR="${HERE}/config"

if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
    sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
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

OVERRIDES=()
[[ -n "${TRAIN_NNODES:-}" ]] && OVERRIDES+=("trainer.nnodes=${TRAIN_NNODES}")
[[ -n "${ROLLOUT_NNODES:-}" ]] && OVERRIDES+=("actor_rollout_ref.rollout.nnodes=${ROLLOUT_NNODES}")
if [[ -n "${GPUS_PER_NODE:-}" ]]; then
    OVERRIDES+=("trainer.n_gpus_per_node=${GPUS_PER_NODE}" "actor_rollout_ref.rollout.n_gpus_per_node=${GPUS_PER_NODE}")
fi

# Make a failed SAT registration loud in every verl process (verl logs entry-point failures at DEBUG only);
# the policy_loss._target_ of the SAT variants imports sat_ext.verl as well.
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-sat_ext.verl.plugin}"

CMD=("${PYTHON:-python3}" -m sat_ext.verl.main_ppo --config-path "${CONFIG_DIR}" --config-name "${VARIANT}")
CMD+=("${OVERRIDES[@]+"${OVERRIDES[@]}"}" "$@")

if [[ "${SAT_DRY_RUN:-0}" == "1" ]]; then
    printf '%s\n' "${CMD[@]}"
    exit 0
fi
exec "${CMD[@]}"
