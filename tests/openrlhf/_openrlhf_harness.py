"""Runs OpenRLHF's real CLI and a real Ray policy actor for test_openrlhf_train_ppo_ray.py; writes JSON results.

``python _openrlhf_harness.py OUT.json`` runs in a fresh process, because OpenRLHF's trainer stack needs
the import-time stand-ins of _openrlhf_stubs.py (vllm, deepspeed, flash_attn), which must not leak into
pytest's own process.

Part 1, CLI: each case runs OpenRLHF's ``openrlhf.cli.train_ppo_ray`` through the launcher
(``sat_ext.openrlhf.train_ppo_ray.main``) or bare (``vanilla``), and stops where that module calls its
``train(args)``: the launcher through one more launcher extension whose check records the final args and
the actor class ``train()`` would hand to ``RayActorGroup``; the bare run by wrapping ``train`` the same way.

Part 2, Ray: the actor class recorded for the SAT case is started by OpenRLHF's own ``RayActorGroup`` in a
real Ray worker (a CPU Ray node that declares one GPU). Inside that worker, through ``__ray_call__``, its
``init_model_from_pretrained`` runs: the launcher's override, whose ``super()`` call reaches OpenRLHF's
``PolicyModelActor.init_model_from_pretrained``, replaced there (DeepSpeed cannot initialise on a CPU) by
a stand-in that does the same minus DeepSpeed: OpenRLHF's ``Actor`` around a tiny random Llama, a torch
optimizer, and OpenRLHF's real ``ActorPPOTrainer``, which builds OpenRLHF's PolicyLoss from the args. Then
one real ``ActorPPOTrainer.training_step`` runs on a small Experience. Also stood in for there: the
DeepSpeed half of ``DeepspeedStrategy`` (``CPUStrategy``: plain torch backward and step) and the two CUDA
calls ``ActorPPOTrainer.__init__`` makes (``torch.cuda.current_device``, ``torch.cuda.synchronize``).
"""

import argparse
import contextlib
import io
import json
import os
import re
import runpy
import shlex
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _openrlhf_stubs  # noqa: E402
from _openrlhf_cli import Stop, plain  # noqa: E402

_openrlhf_stubs.install()

from sat_ext.openrlhf import train_ppo_ray as launcher  # noqa: E402

BASE = [
    "--actor.model_name_or_path",
    "/models/tiny",
    "--reward.remote_url",
    "http://127.0.0.1:5000/get_reward",
    "--algo.advantage.estimator",
    "group_norm",
    "--rollout.n_samples_per_prompt",
    "4",
    "--rollout.batch_size",
    "8",
    "--rollout.micro_batch_size",
    "2",
    "--rollout.temperature",
    "0.95",
    "--train.batch_size",
    "16",
    "--train.micro_batch_size",
    "2",
    "--actor.num_gpus_per_node",
    "1",
    "--ref.num_gpus_per_node",
    "1",
    "--vllm.num_engines",
    "1",
    "--algo.kl.init_coef",
    "0",
    "--actor.eps_clip_low_high",
    "0.2",
    "0.28",
    "--algo.advantage.is_correction_level",
    "token",
]
CASES = {
    "vanilla_ppo": ("vanilla", BASE + ["--actor.policy_loss_type", "ppo"]),
    "vanilla_sat": ("vanilla", BASE + ["--actor.policy_loss_type", "sat"]),
    "ppo": ("launcher", BASE + ["--actor.policy_loss_type", "ppo"]),
    "sat": (
        "launcher",
        BASE
        + [
            "--actor.policy_loss_type",
            "sat",
            "--sat.quantile",
            "0.8",
            "--sat.kernel",
            "power",
            "--sat.gate_scope",
            "global",
            "--sat.c_min",
            "0.1",
        ],
    ),
    "sat_gspo": (
        "launcher",
        BASE
        + [
            "--actor.policy_loss_type",
            "sat_gspo",
            "--actor.eps_clip_low_high",
            "3e-4",
            "4e-4",
            "--sat.gspo_gate_level",
            "token",
        ],
    ),
    "bad_quantile": ("launcher", BASE + ["--actor.policy_loss_type", "sat", "--sat.quantile", "1.5"]),
    "bad_c_min": ("launcher", BASE + ["--actor.policy_loss_type", "sat", "--sat.c_min", "-0.5"]),
    "bad_kernel": ("launcher", BASE + ["--actor.policy_loss_type", "sat", "--sat.kernel", "gauss"]),
    "bad_float": ("launcher", BASE + ["--actor.policy_loss_type", "sat", "--sat.exponent", "two"]),
    "bad_dual_clip": ("launcher", BASE + ["--actor.policy_loss_type", "sat", "--actor.dual_clip", "0.5"]),
    "bad_eps": ("launcher", BASE + ["--actor.policy_loss_type", "sat", "--actor.eps_clip_low_high", "1.5", "0.2"]),
    "unknown_sat_flag": ("launcher", BASE + ["--actor.policy_loss_type", "sat", "--sat.qantile", "0.8"]),
    "sat_flag_without_sat": ("launcher", BASE + ["--actor.policy_loss_type", "gspo", "--sat.quantile", "0.8"]),
    "no_rollout_log_probs": (
        "launcher",
        [a for a in BASE if a not in ("--algo.advantage.is_correction_level", "token")]
        + ["--actor.policy_loss_type", "sat"],
    ),
    "no_vllm": ("launcher", BASE + ["--actor.policy_loss_type", "sat_gspo", "--vllm.num_engines", "0"]),
    "help": ("launcher", ["--help"]),
}


def _docs_example():
    """The argv of the launcher command in docs/openrlhf.md."""
    doc = open(os.path.join(HERE, "..", "..", "docs", "openrlhf.md")).read()
    (command,) = re.findall(r"```bash\n(python -m sat_ext\.openrlhf\.train_ppo_ray .*?)```", doc, flags=re.S)
    return shlex.split(command.replace("\\\n", " "))[3:]


CASES["docs_example"] = ("launcher", _docs_example())


def _record(args):
    """What the CLI's train(args) would get: the args, and the policy actor class it would start."""
    actor_cls = sys.modules["__main__"].__dict__["PolicyModelActor"]
    raise Stop(args, actor_cls)


RECORD = launcher.Extension("record", (), lambda parser: None, _record, lambda: None)


def _run_vanilla(argv):
    parse_args = argparse.ArgumentParser.parse_args

    def parse_then_record(parser, args=None, namespace=None):
        argparse.ArgumentParser.parse_args = parse_args
        parsed = parse_args(parser, args, namespace)
        sys.modules["__main__"].__dict__["train"] = _record
        return parsed

    argparse.ArgumentParser.parse_args = parse_then_record
    saved = sys.argv
    sys.argv = [launcher.OPENRLHF_CLI, *argv]
    try:
        runpy.run_module(launcher.OPENRLHF_CLI, run_name="__main__", alter_sys=True)
    finally:
        argparse.ArgumentParser.parse_args = parse_args
        sys.argv = saved


def run_cli_cases():
    results, classes = {}, {}
    for name, (how, argv) in CASES.items():
        out, err = io.StringIO(), io.StringIO()
        result = {"argv": argv}
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                if how == "vanilla":
                    _run_vanilla(argv)
                else:
                    launcher.main(argv, extensions=(*launcher.EXTENSIONS, RECORD))
            result["outcome"] = "returned"
        except Stop as stop:
            args, actor_cls = stop.args
            result.update(outcome="train", args=plain(args), actor_class=actor_cls.__ray_actor_class__.__name__)
            classes[name] = (args, actor_cls)
        except SystemExit as e:
            result.update(outcome="exit", code=e.code)
        result.update(stdout=out.getvalue(), stderr=err.getvalue())
        results[name] = result
    return results, classes


def in_worker(self, runs):
    """Runs inside the policy actor's Ray worker process (``self`` is the actor instance)."""
    import torch
    import torch.distributed as dist
    import transformers
    from openrlhf.models import Actor
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ray import ppo_actor
    from openrlhf.utils.loss_utils import get_loss_batch_info

    from sat_ext.openrlhf.loss import SATPolicyLoss

    report = {"pid": os.getpid(), "mro": [f"{c.__module__}.{c.__name__}" for c in type(self).__mro__]}
    (openrlhf_actor_cls,) = [
        c for c in type(self).__mro__ if c.__module__ == ppo_actor.__name__ and c.__name__ == "PolicyModelActor"
    ]

    class CPUStrategy:
        """DeepSpeed's part of DeepspeedStrategy, on one CPU process: plain torch backward and step."""

        ring_attn_group = None
        accumulated_gradient = 1

        def __init__(self, args):
            self.args = args

        def backward(self, loss, model, optimizer):
            loss.backward()

        def optimizer_step(self, optimizer, model, scheduler, name="model"):
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()

        def get_grad_norm(self, model):
            return 0.0

        def is_rank_0(self):
            return True

    def init_without_deepspeed(self, strategy, pretrain, max_steps=None, vllm_engines=None):
        """PolicyModelActor.init_model_from_pretrained minus DeepSpeed (model, optimizer, engine)."""
        args = strategy.args
        self.strategy = strategy
        if not dist.is_initialized():
            dist.init_process_group("gloo", rank=0, world_size=1)  # MASTER_ADDR/PORT set by OpenRLHF's actor
        torch.manual_seed(0)
        config = transformers.LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=64,
        )
        actor = Actor(transformers.LlamaForCausalLM(config), temperature=args.rollout.temperature)
        actor.packing_samples = args.ds.packing_samples  # Actor sets it only when it loads a checkpoint by name
        optimizer = torch.optim.SGD(actor.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        self.actor = actor
        self.trainer = ppo_actor.ActorPPOTrainer(
            strategy,
            actor,
            ema_model=None,
            actor_optim=optimizer,
            actor_scheduler=scheduler,
            micro_train_batch_size=args.train.micro_batch_size,
            tokenizer=None,
            eps_clip=args.actor.eps_clip,
            ema_beta=args.train.ema_beta,
            vllm_engines=vllm_engines,
        )

    openrlhf_actor_cls.init_model_from_pretrained = init_without_deepspeed
    # The two CUDA calls ActorPPOTrainer.__init__ makes: the replay buffer's target device name, and a sync.
    torch.cuda.current_device = lambda: 0
    torch.cuda.synchronize = lambda *a, **k: None

    for name, args in runs.items():
        strategy = CPUStrategy(args)
        self.init_model_from_pretrained(strategy, args.actor.model_name_or_path, 1, None)
        loss_fn = self.trainer.actor_loss_fn
        entry = {
            "loss_class": f"{type(loss_fn).__module__}.{type(loss_fn).__qualname__}",
            "training_step_wrapped": "training_step" in vars(self.trainer),
        }
        if isinstance(loss_fn, SATPolicyLoss):
            entry["sat_config"] = loss_fn.sat_config.to_dict()
            entry["token_level_loss"] = loss_fn.token_level_loss
            g = torch.Generator().manual_seed(1)
            B, P, A = 4, 5, 7
            sequences = torch.randint(1, 64, (B, P + A), generator=g)
            attention_mask = torch.ones(B, P + A, dtype=torch.long)
            action_mask = torch.ones(B, A, dtype=torch.bool)
            action_mask[0, 5:] = False
            self.trainer.actor.train()
            with torch.no_grad():
                logp = self.trainer.actor(sequences, action_mask, attention_mask=attention_mask)
            experience = Experience(
                sequences=sequences,
                attention_mask=attention_mask,
                action_mask=action_mask,
                action_log_probs=logp + 0.01 * torch.randn(B, A, generator=g),
                rollout_log_probs=(logp + 0.3 * torch.randn(B, A, generator=g)) * action_mask,
                advantages=torch.randn(B, A, generator=g),
                info={},
            )
            want = loss_fn(
                logp,
                experience.action_log_probs,
                experience.advantages,
                action_mask=action_mask,
                rollout_log_probs=experience.rollout_log_probs,
                **get_loss_batch_info(strategy, action_mask),
            )[0]
            status = self.trainer.training_step(experience, 0.0, 0, None)
            entry.update(
                expected_loss=want.item(),
                policy_loss=status["metrics"]["policy_loss"].item(),
                metrics={k: float(v) for k, v in status["metrics"].items() if k.startswith("sat_")},
                weights={k: w for k, w in status["weights"].items() if k.startswith("sat_")},
                other_metrics=sorted(k for k in status["metrics"] if not k.startswith("sat_")),
            )
            if loss_fn.sat_config.gate_scope == "global":
                try:  # the default group is the DP group only when dp_size equals its size
                    loss_fn(
                        logp,
                        experience.action_log_probs,
                        experience.advantages,
                        action_mask=action_mask,
                        rollout_log_probs=experience.rollout_log_probs,
                        dp_size=2,
                    )
                except ValueError as e:
                    entry["dp_group_error"] = str(e)
        report[name] = entry
    return report


def run_ray(classes):
    import ray
    from openrlhf.trainer.ray.launcher import RayActorGroup

    actor_cls = classes["sat"][1]
    runs = {"ppo": classes["ppo"][0], "sat": classes["sat"][0], "sat_gspo": classes["sat_gspo"][0]}
    ray.init(
        address="local",
        num_cpus=2,
        num_gpus=1,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": HERE}, "worker_process_setup_hook": "_openrlhf_stubs.install"},
    )
    try:
        group = RayActorGroup(1, 1, actor_cls, pg=None, num_gpus_per_actor=1)
        (handle,) = group._actor_handlers
        report = ray.get(handle.__ray_call__.remote(in_worker, runs), timeout=240)
    finally:
        ray.shutdown()
    report["driver_pid"] = os.getpid()
    return report


def main(out_path):
    t0 = time.time()
    cli, classes = run_cli_cases()
    t1 = time.time()
    ray_report = run_ray(classes) if "sat" in classes else {"skipped": "the sat case did not reach train()"}
    with open(out_path, "w") as f:
        json.dump({"cli": cli, "ray": ray_report, "seconds": {"cli": t1 - t0, "ray": time.time() - t1}}, f)


if __name__ == "__main__":
    main(sys.argv[1])
