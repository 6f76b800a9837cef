#!/usr/bin/env bash
# SAT / SAT-GSPO on Qwen3-30B-A3B-Base with OpenRLHF 0.11.2 (DeepSpeed ZeRO-3 trainer, vLLM rollouts), the
# closest OpenRLHF equivalent of examples/verl_aime_qwen3_30b (which has R3; OpenRLHF 0.11.2 has no routing
# replay, so there is no R3 variant here).
#
#   bash examples/openrlhf_aime_qwen3_30b/run.sh VARIANT [LAG] [extra OpenRLHF / --sat.* flags ...]
#
# VARIANT: Table 1's rows that OpenRLHF 0.11.2 can express (README: which rows it cannot, and why):
#          sat_grpo (SAT-GRPO; `sat` is the same), sat_gspo (SAT-GSPO), and OpenRLHF's own losses as the
#          baselines grpo, grpo_tis (GRPO w/ TIS) and gspo
# LAG:     1 (default) or 8: weights are broadcast to vLLM after every 1 or 8 optimizer steps (asynchronous,
#          sat_ext's lag modes: --lag.mode bounded --lag.max_lag 1 / --lag.mode interval --lag.interval 8)
# Extra flags are appended after the script's (argparse: the last value of a flag wins).
#
# Environment (all optional):
#   SAT_MODEL_PATH   Qwen/Qwen3-30B-A3B-Base, local copy  (default ~/models/Qwen3-30B-A3B-Base)
#   SAT_DATA_DIR     output of examples/data/prepare_aime_dapo.py; reads $SAT_DATA_DIR/openrlhf/*.jsonl
#                    (default ~/data/sat_aime)
#   SAT_CKPT_DIR     checkpoints and logs                 (default ~/ckpt/sat_aime_openrlhf)
#   ACTOR_NNODES (4), VLLM_ENGINES (8), VLLM_TP (4), GPUS_PER_NODE (8)
#   NUM_EPISODES     passes over the prompt set (default: enough for the paper's 544 optimizer steps)
#   PYTHON           interpreter (default python3)
#   SAT_DRY_RUN=1    print the command, one argument per line, instead of running it
#
# Start a Ray cluster first (ray start --head / --address=...) with ACTOR_NNODES*GPUS_PER_NODE +
# VLLM_ENGINES*VLLM_TP GPUs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

usage() { sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then usage; exit 0; fi

VARIANT="$1"; shift
LAG=1
if [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]]; then LAG="$1"; shift; fi

# Correction of the trainer/rollout mismatch for OpenRLHF's `ppo` loss (its ratio is against the trainer's own
# recomputed log-probs; these weight each token by old/rollout): ICEPOP-style mask at OpenRLHF's default band
# (the plain GRPO row), or TIS (Table 1's "w/ TIS": the IS weight truncated at 2).
ICEPOP=(--algo.advantage.is_correction_mode mask --algo.advantage.is_correction_threshold 0.5 5.0)
TIS=(--algo.advantage.is_correction_mode clip --algo.advantage.is_correction_threshold 2.0)
SAT_FLAGS=(--sat.quantile 0.9 --sat.quantile_rule inverse_cdf --sat.gate_scope micro --sat.kernel hill
           --sat.exponent 2.0 --sat.c_min 0.0 --sat.nonfinite mask)
case "${VARIANT}" in
    sat|sat_grpo)
              LOSS=(--actor.policy_loss_type sat --actor.eps_clip_low_high 0.2 0.2 --actor.dual_clip 3.0
                    --actor.loss_agg_mode token-mean "${SAT_FLAGS[@]}") ;;
    sat_gspo) LOSS=(--actor.policy_loss_type sat_gspo --actor.eps_clip_low_high 0.2 0.2
                    --actor.loss_agg_mode seq-mean-token-mean "${SAT_FLAGS[@]}" --sat.gspo_gate_level broadcast) ;;
    gspo)     LOSS=(--actor.policy_loss_type gspo --actor.eps_clip_low_high 0.2 0.2
                    --actor.loss_agg_mode seq-mean-token-mean) ;;
    grpo)     LOSS=(--actor.policy_loss_type ppo --actor.eps_clip_low_high 0.2 0.2 --actor.dual_clip 3.0
                    --actor.loss_agg_mode token-mean "${ICEPOP[@]}") ;;
    grpo_tis) LOSS=(--actor.policy_loss_type ppo --actor.eps_clip_low_high 0.2 0.2 --actor.dual_clip 3.0
                    --actor.loss_agg_mode token-mean "${TIS[@]}") ;;
    *) echo "run.sh: unknown variant '${VARIANT}' (grpo, grpo_tis, gspo, sat_grpo (= sat), sat_gspo)" >&2; exit 2 ;;
esac

PROMPTS_PER_STEP=256   # the paper: 256 prompts x 16 samples per optimizer step
SAMPLES=16
# asynchronous training with sat_ext's lag modes (docs/openrlhf_lag.md); one rollout batch of 256 prompts
# = one trainer step (OpenRLHF's global step) = one optimizer step (--train.batch_size = the batch's samples)
case "${LAG}" in
    # lag 1: a broadcast after every step; bounded at 1 (the launcher sets --train.async_queue_size 1: the
    #        next batch is generated while this one trains, no trained sample is more than 1 sync old)
    # lag 8: a broadcast after steps 8, 16, ... only; no prefetch, so the 8 batches of a window are generated
    #        by the weights of its start: data 0, 1, ..., 7 steps old (the verl example's interval 8)
    1) EVAL_STEPS=5; SAVE_STEPS=50
       LAG_FLAGS=(--train.async_enable --lag.mode bounded --lag.max_lag 1) ;;
    8) EVAL_STEPS=8; SAVE_STEPS=48   # evaluate after each broadcast; save on one (exact lags on resume)
       LAG_FLAGS=(--train.async_enable --lag.mode interval --lag.interval 8 --lag.prefetch 0) ;;
    *) echo "run.sh: LAG must be 1 or 8, got '${LAG}'" >&2; exit 2 ;;
esac
ROLLOUT_BATCH=${PROMPTS_PER_STEP}
TRAIN_BATCH=$((PROMPTS_PER_STEP * SAMPLES))   # samples per optimizer step

MODEL="${SAT_MODEL_PATH:-${HOME}/models/Qwen3-30B-A3B-Base}"
DATA="${SAT_DATA_DIR:-${HOME}/data/sat_aime}/openrlhf"
CKPT="${SAT_CKPT_DIR:-${HOME}/ckpt/sat_aime_openrlhf}/${VARIANT}_lag${LAG}"
ACTOR_NNODES="${ACTOR_NNODES:-4}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
VLLM_ENGINES="${VLLM_ENGINES:-8}"
VLLM_TP="${VLLM_TP:-4}"

# OpenRLHF runs whole episodes (passes over the prompts) and has no step cap: pick the number of episodes
# that first reaches the paper's 544 optimizer steps (544 x 256 prompts).
if [[ -z "${NUM_EPISODES:-}" ]]; then
    if [[ -f "${DATA}/train.jsonl" ]]; then
        N_PROMPTS=$(wc -l < "${DATA}/train.jsonl")
        NUM_EPISODES=$(( (544 * PROMPTS_PER_STEP + N_PROMPTS - 1) / N_PROMPTS ))
    else
        NUM_EPISODES=5
    fi
fi

CMD=("${PYTHON:-python3}" -m sat_ext.openrlhf.train_ppo_ray
    # model and placement: DeepSpeed actor on ACTOR_NNODES nodes, vLLM engines on their own GPUs
    --actor.model_name_or_path "${MODEL}"
    --actor.num_nodes "${ACTOR_NNODES}" --actor.num_gpus_per_node "${GPUS_PER_NODE}"
    --vllm.num_engines "${VLLM_ENGINES}" --vllm.tensor_parallel_size "${VLLM_TP}"
    --vllm.gpu_memory_utilization 0.85 --vllm.enable_prefix_caching
    # asynchronous training, lag bounded at 1 / weights broadcast every 8 steps; lag/* metrics in the logs
    "${LAG_FLAGS[@]}"
    # data: prepare_aime_dapo.py's OpenRLHF files (DAPO prompt template, 0/1 rule reward)
    --data.prompt_dataset "${DATA}/train.jsonl" --data.input_key prompt --data.label_key label
    --data.apply_chat_template
    --reward.remote_url "${HERE}/math_reward.py"
    # AIME24 avg@8 (eval_aime2024_pass1) every 5 optimizer steps (lag 1) / every broadcast = 8 steps (lag 8)
    --eval.dataset "${DATA}/aime2024.jsonl" --eval.steps "${EVAL_STEPS}"
    --eval.n_samples_per_prompt 8 --eval.temperature 1.0
    # GRPO advantages, no critic; the paper's KL loss: low-variance KL (k3) to the base model at 1e-3, with the
    # reference model on the actor's GPUs; no entropy bonus
    --algo.advantage.estimator group_norm
    --algo.kl.use_loss --algo.kl.estimator k3 --algo.kl.init_coef 1e-3
    --ref.num_nodes "${ACTOR_NNODES}" --ref.num_gpus_per_node "${GPUS_PER_NODE}" --train.colocate_actor_ref
    --actor.entropy_coef 0
    # SAT needs vLLM's rollout log-probs; OpenRLHF 0.11.2 requests them only with this flag
    --algo.advantage.is_correction_level token
    # the paper's batch and sampling (App. F): 256 prompts x 16, temperature 1.0, top-p 1.0, 32k responses
    --rollout.batch_size "${ROLLOUT_BATCH}" --rollout.n_samples_per_prompt "${SAMPLES}"
    --rollout.temperature 1.0 --rollout.top_p 1.0
    --rollout.max_new_tokens 32768 --data.max_len 34816
    --rollout.micro_batch_size 1
    --train.batch_size "${TRAIN_BATCH}" --train.micro_batch_size 1 --train.max_epochs 1
    --train.num_episodes "${NUM_EPISODES}"
    --train.dynamic_batch_enable --train.max_tokens_per_gpu 36864 --ds.packing_samples
    # memory: ZeRO-3 over the actor GPUs, ring attention over pairs of GPUs for the 34k-token sequences
    --ds.zero_stage 3 --ds.param_dtype bf16 --actor.gradient_checkpointing_enable --ds.ring_attn_size 2
    --ds.attn_implementation flash_attention_2
    # the paper's optimizer (App. F): Adam beta1 0.9, beta2 0.98, constant lr 1e-6, no warm-up or decay
    # (AdamW with weight decay 0 is Adam); grad clip 1.0
    --actor.adam.lr 1e-6 --actor.adam.betas 0.9 0.98 --actor.adam.weight_decay 0.0 --actor.lr_scheduler constant
    --actor.lr_warmup_ratio 0 --actor.max_norm 1.0
    "${LOSS[@]}"
    --ckpt.path "${CKPT}/ds" --ckpt.output_dir "${CKPT}/hf" --ckpt.save_steps "${SAVE_STEPS}" --ckpt.max_num 2
    --logger.tensorboard_dir "${CKPT}/tb"
    "$@")

if [[ "${SAT_DRY_RUN:-0}" == "1" ]]; then
    printf '%s\n' "${CMD[@]}"
    exit 0
fi
exec "${CMD[@]}"
