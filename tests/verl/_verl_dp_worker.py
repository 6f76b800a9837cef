"""One rank of the 2-process gloo test (spawned by test_verl_dp.py): SAT with gate_scope=global through verl.

Each rank builds its ActorConfig from the actor DictConfig with ``omega_conf_to_dataclass`` (as a verl worker
does), runs verl's ``ppo_loss`` on its half of the batch with dp_size=2 and the global token / sequence counts,
then on a second micro-batch that is all padding on rank 1, and saves loss, gradient, metrics and the core
trust-region bounds (over the same default group) for the parent to compare with the single-process run.
"""

from __future__ import annotations

import os


def run_rank(rank: int, port: int, actor_cfgs: dict, batch, halves, out_dir: str) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        from _verl_helpers import leaves, model_log_probs, split_batch, to_verl_td
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.utils.losses import ppo_loss

        from sat_ext.core import adaptive_trust_region
        from sat_ext.verl.config import sat_config_for
        from sat_ext.verl.loss import data_parallel_group

        results = {}
        n_tok = int(batch.padded["response_mask"].sum())
        n_seq = batch.padded["prompts"].shape[0]
        mine = split_batch(batch, halves[rank])
        for name, cfg in actor_cfgs.items():
            actor = omega_conf_to_dataclass(cfg)
            td = to_verl_td(mine, dp_size=2, batch_num_tokens=n_tok, global_batch_size=n_seq)
            theta, junk = leaves(batch)
            loss, metrics = ppo_loss(actor, {"log_probs": model_log_probs(td, theta, junk)}, td)
            loss.backward()
            # The bounds SAT used, from the core over the same group the adapter picks (WORLD here).
            rows = halves[rank]
            mask = batch.padded["response_mask"][rows].bool()
            d = (batch.extra["theta0"][rows] - batch.padded["old_log_probs"][rows]).clamp(-20, 20)
            region = adaptive_trust_region(d, mask, sat_config_for(actor, "sat"), group=data_parallel_group())

            # Second micro-batch: rank 1 has only padding (all response tokens masked out), rank 0 has tokens.
            empty = split_batch(batch, halves[rank])
            if rank == 1:
                empty.padded["response_mask"] = torch.zeros_like(empty.padded["response_mask"])
            td2 = to_verl_td(empty, dp_size=2, batch_num_tokens=n_tok, global_batch_size=n_seq)
            theta2, junk2 = leaves(batch)
            loss2, metrics2 = ppo_loss(actor, {"log_probs": model_log_probs(td2, theta2, junk2)}, td2)
            loss2.backward()
            results[name] = dict(
                loss=loss.detach(),
                grad=theta.grad.clone(),
                metrics={k: v.values for k, v in metrics.items()},
                lo=region.lo,
                hi=region.hi,
                q=region.q,
                loss2=loss2.detach(),
                grad2=theta2.grad.clone(),
                metrics2={k: v.values for k, v in metrics2.items()},
            )
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()
