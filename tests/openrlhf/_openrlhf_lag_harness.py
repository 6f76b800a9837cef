"""Runs sat_ext's OpenRLHF lag modes for test_openrlhf_lag.py on CPU; writes one JSON result.

``python _openrlhf_lag_harness.py OUT.json`` runs in a fresh process: OpenRLHF's trainer stack needs the
import-time stand-ins of _openrlhf_stubs.py (vllm, deepspeed, flash_attn), which must not leak into pytest's
process. Everything else is real: OpenRLHF 0.11.2's CLI, parser, validation, ``GenerateSamplesActor``,
``TrainingActor``, ``PPOTrainerAsync``, ``SamplesGenerator``, ``RemoteExperienceMaker``, ``VLLMLock``, the Ray
queues and token pool, a tokenizer and a prompt dataset loaded by OpenRLHF's own code, and Ray itself.

Stand-ins, all at the engine boundary:
- ``vllm.SamplingParams`` is a record of its keyword arguments (the stubs' one raises when called);
- ``Engine`` stands in for OpenRLHF's vLLM engine actor (``LLMRayActor``): the two methods SamplesGenerator
  calls (``get_num_unfinished_requests``, ``generate_responses``), answering with fixed token ids after a
  delay, plus ``broadcast``, which counts weight syncs: each response carries the count at generation in
  ``extra_logs["engine_weights"]`` (which OpenRLHF copies into ``info``), the ground truth for the tags;
- ``StandInActorGroup`` stands in for the DeepSpeed policy actors' ``RayActorGroup``: ``forward`` returns
  zero log-probs, ``append`` records what the trainer trains on (after a delay, the "training time"),
  ``fit`` returns a status, ``broadcast_to_vllm`` calls ``Engine.broadcast``, ``save_checkpoint`` keeps the
  client states in a file as DeepSpeed's checkpoint does and ``get_checkpoint_states`` reads them back.

Part 1, CLI: each case (and each launcher command in docs/openrlhf_lag.md) runs OpenRLHF's
``openrlhf.cli.train_ppo_ray`` through the launcher and stops where that module calls ``train(args)`` (one more
extension, last in line, records the final args and the ``PPOTrainerAsync`` class ``train()`` would start).

Part 2, loops: for each scenario, the lag subclasses of ``GenerateSamplesActor`` and ``TrainingActor``
are constructed (their real ``__init__``) in this process with ``PPOTrainerAsync.__init__``'s set-up (real
queue, token pool and lock actors, the clock actor) and their real ``fit`` loops run in two threads. To start
fewer Ray processes, the scenarios run one after the other and share one lock and one queue pair of capacity
``MAX_QUEUE``, the token pool refilled with the scenario's Q tokens: OpenRLHF's protocol never holds more items
than there are tokens, so the extra capacity is never used. The scenarios in ``RESUMED`` save a checkpoint after
every step, and a fresh trainer then resumes from the last one (OpenRLHF's ``init_checkpoint_states``).

Part 3, Ray workers: the ``PPOTrainerAsync`` class recorded in part 1 is started the way OpenRLHF's
``train()`` starts it (``PPOTrainer.remote(...)``, ``get_max_steps``, ``fit``); in its worker it creates
the generator and trainer actors, each in its own worker process.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _openrlhf_stubs  # noqa: E402

EOS = 1
WORDS = ["<pad>", "<eos>"] + [f"w{i}" for i in range(40)]
N_PROMPTS = 16
# Deadlock limits, far above the quiet times (each scenario's loops 1-8 s, the Ray run's fit() about 30 s on the
# 2-core CPU machine): the harness overlaps the rest of the suite, which on a slower host slowed
# the fit past an earlier 180 s limit (and one scenario's loops past 120 s, with four busy processes beside it).
LOOPS_TIMEOUT_S = 300.0
FIT_TIMEOUT_S = 600


class SamplingParams:
    """Stand-in for ``vllm.SamplingParams``: keeps its keyword arguments."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


def _clock_state(clock) -> dict:
    """The LagClock actor's state, read inside the actor (Ray's ``__ray_call__``)."""
    import ray

    def state(c):
        return {
            "version": c.version,
            "next_step": c.next_step,
            "done_upto": c.done_upto,
            "closed": c.closed,
            "requeued": len(c.requeued),
        }

    return ray.get(clock.__ray_call__.remote(state), timeout=10)


def worker_setup():
    """Ray's worker_process_setup_hook (and this process's set-up): the stand-ins above, before any import."""
    _openrlhf_stubs.install()
    vllm = sys.modules.get("vllm")
    if vllm is not None and getattr(vllm, "__path__", None) == []:  # the stubs' module, not a real vLLM
        vllm.SamplingParams = SamplingParams


class Engine:
    """Stand-in for OpenRLHF's vLLM engine actor; see the module docstring."""

    def __init__(self, delay=0.0):
        self.delay = delay
        self.weights = 0

    def get_num_unfinished_requests(self):
        return 0

    def broadcast(self):
        self.weights += 1
        return self.weights

    def generate_responses(self, prompt, label, sampling_params, max_length, hf_tokenizer, num_samples, images=None):
        time.sleep(self.delay)
        weights = self.weights
        ids = hf_tokenizer(prompt)["input_ids"]
        out = []
        for j in range(num_samples):
            response = [2 + (len(ids) + j + weights) % 40 for _ in range(3)] + [EOS]
            tokens = ids + response
            out.append(
                {
                    "prompt": prompt,
                    "label": label,
                    "observation_tokens": tokens,
                    "action_ranges": [(len(ids), len(tokens))],
                    "reward": float(j % 2),
                    "scores": float(j % 2),
                    "rollout_log_probs": None,
                    "truncated": False,
                    "extra_logs": {"engine_weights": weights},
                    "images": images,
                }
            )
        return out


class _Local:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        import ray

        return ray.put(self.fn(*args, **kwargs))


class LocalEngine:
    """``Engine`` in this process, with Ray's calling convention (``.remote`` returns an object ref)."""

    def __init__(self, delay):
        self.engine = Engine(delay)
        for name in ("get_num_unfinished_requests", "broadcast", "generate_responses"):
            setattr(self, name, _Local(getattr(self.engine, name)))


class StandInActorGroup:
    """Stand-in for the DeepSpeed policy actors' ``RayActorGroup``; see the module docstring."""

    def __init__(self, engine, delay, ckpt_dir=None):
        self.engine, self.delay = engine, delay
        self.ckpt_dir = ckpt_dir  # OpenRLHF's <--ckpt.path>/_actor; None: checkpoints are not kept
        self.broadcasts = 0
        self.trained = []

    def _save_checkpoint(self, tag, client_states):
        """DeepSpeed's ``save_checkpoint(client_state=...)`` as the policy actors call it: the client states in
        the tag's folder, the tag in ``latest``."""
        import torch

        if self.ckpt_dir is None:
            return
        os.makedirs(os.path.join(self.ckpt_dir, tag), exist_ok=True)
        torch.save(client_states, os.path.join(self.ckpt_dir, tag, "client_states.pt"))
        with open(os.path.join(self.ckpt_dir, "latest"), "w") as f:
            f.write(tag)

    def _checkpoint_states(self):
        """What a policy actor loaded at start (``load_ckpt``) and returns from ``get_checkpoint_states``."""
        import torch

        with open(os.path.join(self.ckpt_dir, "latest")) as f:
            tag = f.read()
        return torch.load(os.path.join(self.ckpt_dir, tag, "client_states.pt"), weights_only=False)

    def async_run_method_batch(self, method_name, **kwargs):
        import ray
        import torch

        if method_name == "forward":
            return [ray.put([torch.zeros(mask.shape) for mask in kwargs["action_mask"]])]
        if method_name == "append":
            time.sleep(self.delay)
            samples = []
            for e in kwargs["experience"]:
                for v, w, p in zip(e.info["policy_version"].tolist(), e.info["engine_weights"].tolist(), e.prompts):
                    samples.append([int(v), int(w), p])
            self.trained.append({"broadcasts": self.broadcasts, "samples": samples})
            return []
        raise ValueError(f"stand-in actor group: unexpected batch method {method_name}")

    def async_run_method(self, method_name, **kwargs):
        import ray

        if method_name == "fit":
            return [ray.put({"policy_loss": 0.0})]
        if method_name == "broadcast_to_vllm":
            self.broadcasts += 1
            return [self.engine.broadcast.remote()]
        if method_name == "save_checkpoint":
            self._save_checkpoint(kwargs["tag"], kwargs["client_states"])
            return []
        if method_name == "get_checkpoint_states":
            return [ray.put(self._checkpoint_states())]
        if method_name == "empty_cache":
            return []
        raise ValueError(f"stand-in actor group: unexpected method {method_name}")


# ------------------------------------------------------------------------------------------------ data, CLI


def make_data(workdir):
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokdir = os.path.join(workdir, "tokenizer")
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>").save_pretrained(tokdir)
    paths = {"tokenizer": tokdir}
    for name, n in (("prompts", N_PROMPTS), ("eval", 2)):
        paths[name] = os.path.join(workdir, f"{name}.jsonl")
        with open(paths[name], "w") as f:
            for i in range(n):
                f.write(json.dumps({"prompt": f"w{i % 38} w{(i + 1) % 38} w{(i * 7) % 38}", "label": str(i)}) + "\n")
    return paths


def base_args(paths):
    return [
        "--actor.model_name_or_path",
        paths["tokenizer"],
        "--data.prompt_dataset",
        paths["prompts"],
        "--data.input_key",
        "prompt",
        "--data.label_key",
        "label",
        "--reward.remote_url",
        "http://127.0.0.1:5000/get_reward",
        "--algo.advantage.estimator",
        "group_norm",
        "--algo.kl.init_coef",
        "0",
        "--rollout.n_samples_per_prompt",
        "2",
        "--rollout.batch_size",
        "2",
        "--rollout.micro_batch_size",
        "2",
        "--rollout.max_new_tokens",
        "8",
        "--data.max_len",
        "64",
        "--train.batch_size",
        "4",
        "--train.micro_batch_size",
        "2",
        "--actor.num_gpus_per_node",
        "1",
        "--vllm.num_engines",
        "1",
    ]


def cli_cases(paths):
    base = base_args(paths)
    a = base + ["--train.async_enable"]
    evaluation = ["--eval.dataset", paths["eval"], "--eval.steps", "2"]
    return {
        "no_lag": a,
        "off": a + ["--lag.mode", "off"],
        "off_hist": a + ["--lag.hist_edges", "0", "1", "4"],
        "bounded2": a + ["--lag.mode", "bounded", "--lag.max_lag", "2"],
        "bounded2_q1": a + ["--lag.mode", "bounded", "--lag.max_lag", "2", "--train.async_queue_size", "1"],
        "bounded1": a + ["--lag.mode", "bounded", "--lag.max_lag", "1"],
        "bounded1_drop": a + ["--lag.mode", "bounded", "--lag.max_lag", "1", "--lag.over_bound", "drop"],
        "bounded1_regen": a + ["--lag.mode", "bounded", "--lag.max_lag", "1", "--lag.over_bound", "regenerate"],
        "interval3": a + ["--lag.mode", "interval", "--lag.interval", "3"],
        "interval2_p1_eval": a + ["--lag.mode", "interval", "--lag.interval", "2", "--lag.prefetch", "1"] + evaluation,
        "interval2_p2": a + ["--lag.mode", "interval", "--lag.interval", "2", "--lag.prefetch", "2"],
        "interval_partial_p0": a + ["--lag.mode", "interval", "--lag.interval", "2", "--train.partial_rollout_enable"],
        "bounded1_drop_oversampling": a
        + [
            "--lag.mode",
            "bounded",
            "--lag.max_lag",
            "1",
            "--lag.over_bound",
            "drop",
            "--rollout.vllm_generate_batch_size",
            "3",
        ],
        "sat_and_bounded": a
        + [
            "--lag.mode",
            "bounded",
            "--lag.max_lag",
            "1",
            "--actor.policy_loss_type",
            "sat_gspo",
            "--algo.advantage.is_correction_level",
            "token",
        ],
        # refused
        "bad_mode": a + ["--lag.mode", "fast"],
        "bad_max_lag": a + ["--lag.mode", "bounded", "--lag.max_lag", "-1"],
        "bounded_without_max_lag": a + ["--lag.mode", "bounded"],
        "max_lag_without_mode": a + ["--lag.max_lag", "2"],
        "bad_interval": a + ["--lag.mode", "interval", "--lag.interval", "0"],
        "interval_with_max_lag": a + ["--lag.mode", "interval", "--lag.interval", "2", "--lag.max_lag", "1"],
        "over_bound_in_interval": a + ["--lag.mode", "interval", "--lag.interval", "2", "--lag.over_bound", "drop"],
        "bad_hist_edges": a + ["--lag.hist_edges", "0", "2", "1"],
        "bounded_without_async": base + ["--lag.mode", "bounded", "--lag.max_lag", "1"],
        "interval_without_async": base + ["--lag.mode", "interval", "--lag.interval", "4"],
        "off_without_async": base + ["--lag.mode", "off"],
        "without_vllm": a + ["--lag.mode", "off", "--vllm.num_engines", "0"],
        "bounded0": a + ["--lag.mode", "bounded", "--lag.max_lag", "0"],
        "bounded_partial": a + ["--lag.mode", "bounded", "--lag.max_lag", "2", "--train.partial_rollout_enable"],
        "bounded_oversampling": a
        + ["--lag.mode", "bounded", "--lag.max_lag", "2", "--rollout.vllm_generate_batch_size", "4"],
        "bounded_queue_over_bound": a
        + ["--lag.mode", "bounded", "--lag.max_lag", "2", "--train.async_queue_size", "3"],
        "interval_oversampling": a
        + ["--lag.mode", "interval", "--lag.interval", "2", "--rollout.vllm_generate_batch_size", "4"],
        "interval_partial_p1": a
        + ["--lag.mode", "interval", "--lag.interval", "2", "--lag.prefetch", "1", "--train.partial_rollout_enable"],
        "interval_queue_too_small": a
        + ["--lag.mode", "interval", "--lag.interval", "2", "--lag.prefetch", "1", "--train.async_queue_size", "1"]
        + evaluation,
        "help": ["--help"],
    }


def docs_commands():
    """The argv of each launcher command in docs/openrlhf_lag.md."""
    import re
    import shlex

    with open(os.path.join(HERE, "..", "..", "docs", "openrlhf_lag.md")) as f:
        doc = f.read()
    commands = re.findall(r"```bash\n(python -m sat_ext\.openrlhf\.train_ppo_ray .*?)```", doc, flags=re.S)
    return [shlex.split(c.replace("\\\n", " "))[3:] for c in commands]


class Stop(Exception):
    """Raised where OpenRLHF's CLI would start training."""


def _plain(x):
    from types import SimpleNamespace

    if isinstance(x, SimpleNamespace):
        return {k: _plain(v) for k, v in vars(x).items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if x == float("inf"):
        return "inf"
    return x


def _record(args):
    """What the CLI's train(args) would get: the args, and the PPOTrainerAsync class it would start."""
    from openrlhf.trainer import ppo_trainer_async

    raise Stop(args, ppo_trainer_async.PPOTrainerAsync)


def all_cli_cases(paths):
    cases = cli_cases(paths)
    cases["no_lag_vanilla"] = cases["no_lag"]  # the launcher with no extension: OpenRLHF's CLI alone
    for i, argv in enumerate(docs_commands()):
        cases[f"docs_{i}"] = argv
    return cases


def run_cli_cases(cases):
    import contextlib
    import io

    from sat_ext.openrlhf import train_ppo_ray as launcher

    record = launcher.Extension("record", (), lambda parser: None, _record, lambda: None)
    results, parsed = {}, {}
    for name, argv in cases.items():
        out, err = io.StringIO(), io.StringIO()
        result = {}
        extensions = (record,) if name.endswith("_vanilla") else (*launcher.EXTENSIONS, record)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                launcher.main(argv, extensions=extensions)
            result["outcome"] = "returned"
        except Stop as stop:
            args, trainer_cls = stop.args
            result.update(outcome="train", args=_plain(args), trainer_class=trainer_cls.__ray_actor_class__.__name__)
            parsed[name] = args
        except SystemExit as e:
            result.update(outcome="exit", code=e.code)
        result.update(stdout=out.getvalue()[-3000:], stderr=err.getvalue()[-3000:])
        results[name] = result
    return results, parsed


# ------------------------------------------------------------------------------------------------ loops


def generate_kwargs(args):
    """The generate kwargs OpenRLHF's train() passes to PPOTrainer.remote."""
    return dict(
        do_sample=True,
        max_len=args.data.max_len,
        max_new_tokens=args.rollout.max_new_tokens,
        temperature=args.rollout.temperature,
        top_p=args.rollout.top_p,
    )


def _lag_logs(logs):
    return [
        {
            "step": step,
            **{k: v for k, v in status.items() if k.startswith("lag/")},
            "keys": sorted(k for k in status if k.startswith("lag/")),
        }
        for step, status in logs
    ]


def _recorder(trainer, logs, evals):
    """Record what TrainingActor.fit hands to OpenRLHF's loggers (steps) and to its best-checkpoint logic (evals)."""
    save_logs, save_best = trainer.save_logs_and_checkpoints, trainer.save_best_checkpoint

    def save_logs_and_checkpoints(global_step, logs_dict=None, client_states=None):
        logs.append((global_step, dict(logs_dict or {})))
        return save_logs(global_step, logs_dict, client_states)

    def save_best_checkpoint(eval_metrics, global_step, client_states=None):
        evals.append({"step": global_step, "metrics": dict(eval_metrics)})
        return save_best(eval_metrics, global_step, client_states)

    trainer.save_logs_and_checkpoints = save_logs_and_checkpoints
    trainer.save_best_checkpoint = save_best_checkpoint


MAX_QUEUE = 3


class SharedActors:
    """One VLLMLock and one queue pair for the scenarios, which run one at a time."""

    def __init__(self):
        from openrlhf.trainer.ppo_trainer_async import VLLMLock
        from ray.util.queue import Queue

        self.lock = VLLMLock.remote()
        self.rollout_queue, self.rollout_slots = Queue(maxsize=MAX_QUEUE), Queue(maxsize=MAX_QUEUE)

    def reset(self, q):
        """PPOTrainerAsync.__init__'s state: an empty queue, a token pool of q zeros."""
        assert q <= MAX_QUEUE
        for queue in (self.rollout_queue, self.rollout_slots):
            while not queue.empty():
                queue.get()
        for _ in range(q):
            self.rollout_slots.put(0, block=True)


def _trainer_setup(args, shared, clock):
    """PPOTrainerAsync.__init__'s set-up (openrlhf/trainer/ppo_trainer_async.py:281-302) and its clock: the
    strategy and the actor handles."""
    from openrlhf.utils import get_strategy

    strategy = get_strategy(args)
    if args.eval.steps == -1:
        args.eval.steps = float("inf")
    if args.ckpt.save_steps == -1:
        args.ckpt.save_steps = float("inf")
    handles = dict(
        vllm_lock=shared.lock, rollout_queue=shared.rollout_queue, rollout_slots=shared.rollout_slots, lag_clock=clock
    )
    return strategy, handles


def _ckpt_dir(args):
    """Where the policy actors keep their checkpoints (``<--ckpt.path>/_actor``), for a run that saves them."""
    saves = args.ckpt.save_steps != float("inf") or args.ckpt.load_enable
    return os.path.join(args.ckpt.path, "_actor") if saves else None


def _training_actor(args, strategy, group, engine, handles):
    """The lag subclass of TrainingActor, built by its real ``__init__`` in this process."""
    from sat_ext.openrlhf.lag import lag_actor_classes

    trainer_cls = lag_actor_classes().trainer.__ray_actor_class__
    return trainer_cls(args.actor.model_name_or_path, strategy, group, None, None, None, [engine], **handles)


def _start_loops(args, shared, clock, gen_delay, train_delay):
    """The generator and trainer of the lag subclasses, and what they talk to, before their loops start."""
    from sat_ext.openrlhf.lag import lag_actor_classes

    strategy, handles = _trainer_setup(args, shared, clock)
    shared.reset(args.train.async_queue_size)
    engine = LocalEngine(gen_delay)
    group = StandInActorGroup(engine, train_delay, _ckpt_dir(args))
    generator_cls = lag_actor_classes().generator.__ray_actor_class__
    pretrain = args.actor.model_name_or_path
    generator = generator_cls(pretrain, strategy, [engine], **handles, **generate_kwargs(args))
    trainer = _training_actor(args, strategy, group, engine, handles)
    return generator, trainer, group, engine


def run_loops(args, shared, clock, gen_delay, train_delay, timeout=LOOPS_TIMEOUT_S):
    """The real generator and trainer loops of the lag subclasses, in two threads of this process."""
    import threading

    generator, trainer, group, engine = _start_loops(args, shared, clock, gen_delay, train_delay)
    logs, evals, errors = [], [], []
    _recorder(trainer, logs, evals)

    def run(fn, *a):
        try:
            fn(*a)
        except BaseException as e:  # noqa: BLE001 (reported to the test)
            import traceback

            errors.append(f"{fn.__qualname__}: {e!r}\n{traceback.format_exc()}")

    t0 = time.time()
    threads = [
        threading.Thread(target=run, args=(generator.fit, 0, 0), daemon=True),
        threading.Thread(target=run, args=(trainer.fit, 0), daemon=True),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(1.0, timeout - (time.time() - t0)))
    if any(t.is_alive() for t in threads):
        errors.append(
            f"the loops did not finish within {timeout} s (deadlock?, load average {os.getloadavg()}): "
            f"{_clock_state(clock)}"
        )
    return {
        "logs": _lag_logs(logs),
        "evals": evals,
        "trained": group.trained,
        "errors": errors,
        "seconds": time.time() - t0,
        "clock": _clock_state(clock),
        "engine_weights": engine.engine.weights,
        "queue_size": q if (q := args.train.async_queue_size) else q,
        "prompts": N_PROMPTS,
        "lag_state": trainer.lag_metrics.state_dict(),
    }


def resume_from_checkpoint(args, shared, clock):
    """A fresh lag TrainingActor (real ``__init__``) resuming from the run's last checkpoint: OpenRLHF's
    ``init_checkpoint_states`` (as ``PPOTrainerAsync.fit`` calls it), reading the client states the run saved."""
    args.ckpt.load_enable = True
    strategy, handles = _trainer_setup(args, shared, clock)
    engine = LocalEngine(0.0)
    group = StandInActorGroup(engine, 0.0, _ckpt_dir(args))
    trainer = _training_actor(args, strategy, group, engine, handles)
    states = trainer.init_checkpoint_states()
    return {"global_step": states["global_step"], "lag_state": trainer.lag_metrics.state_dict()}


SCENARIOS = {
    # name: (CLI case, forced --train.async_queue_size or None, generation delay per prompt, training delay)
    "bounded2": ("bounded2", None, 0.005, 0.12),
    "bounded1_drop_q3": ("bounded1_drop", 3, 0.005, 0.12),
    "bounded1_regenerate_q3": ("bounded1_regen", 3, 0.005, 0.12),
    "interval3": ("interval3", None, 0.01, 0.05),
    "off_slow_rollout": ("off", 2, 0.1, 0.02),
}
# these save a checkpoint after every step; a fresh trainer then resumes from the last one ("resumed")
RESUMED = ("bounded1_drop_q3", "bounded1_regenerate_q3")


def run_scenarios(parsed, workdir):
    import copy
    import traceback

    from sat_ext.openrlhf.lag import lag_actor_classes, lag_config

    shared = SharedActors()
    clocks = {}  # what LagPPOTrainerAsync.__init__ creates; all at once, so that their processes start together
    for name, (case, *_) in SCENARIOS.items():
        cfg = lag_config(parsed[case])
        clocks[name] = lag_actor_classes().clock.remote(cfg.mode, cfg.sync_every, cfg.prefetch)
    results = {}
    for name, (case, forced_q, gen_delay, train_delay) in SCENARIOS.items():
        args = copy.deepcopy(parsed[case])
        if forced_q is not None:  # past the launcher's check: the trainer's own bound must hold
            args.train.async_queue_size = forced_q
        if name in RESUMED:
            args.ckpt.path, args.ckpt.save_steps = os.path.join(workdir, "ckpt", name), 1
        try:
            results[name] = run_loops(args, shared, clocks[name], gen_delay, train_delay)
            if name in RESUMED:
                results[name]["resumed"] = resume_from_checkpoint(args, shared, clocks[name])
        except BaseException as e:  # noqa: BLE001
            results[name] = {"errors": [f"{e!r}\n{traceback.format_exc()}"]}
        if results[name]["errors"]:  # the shared actors may be in any state: stop here
            break
    return results


# ------------------------------------------------------------------------------------------------ Ray workers


def _actor_report(self):
    return {"pid": os.getpid(), "mro": [f"{c.__module__}.{c.__name__}" for c in type(self).__mro__]}


def _orchestrator_report(self):
    report = _actor_report(self)
    report["generator"], report["trainer"] = self.generator_actor, self.trainer_actor
    return report


def _install_recorder(self):
    self._test_logs, self._test_evals = [], []
    _recorder(self, self._test_logs, self._test_evals)
    return True


def _trainer_result(self):
    return {"logs": _lag_logs(self._test_logs), "evals": self._test_evals, "trained": self.actor_model_group.trained}


def start_full_run(args):
    """Start what OpenRLHF's train() starts for the trainer (cli/train_ppo_ray.py:145-170); returns handles."""
    import ray
    from openrlhf.trainer import ppo_trainer_async
    from openrlhf.utils import get_strategy

    engine = ray.remote(num_cpus=0)(Engine).remote(0.01)
    PPOTrainer = ppo_trainer_async.PPOTrainerAsync  # what train() imports when --train.async_enable
    trainer = PPOTrainer.remote(
        args.actor.model_name_or_path,
        get_strategy(args),
        StandInActorGroup(engine, 0.05),
        None,
        None,
        None,
        [engine],
        **generate_kwargs(args),
    )
    return {"engine": engine, "trainer": trainer, "class": PPOTrainer.__ray_actor_class__.__name__}


def finish_full_run(run):
    import ray

    t0 = time.time()
    trainer = run["trainer"]
    max_steps = ray.get(trainer.get_max_steps.remote(), timeout=300)
    report = ray.get(trainer.__ray_call__.remote(_orchestrator_report), timeout=60)
    generator, training = report.pop("generator"), report.pop("trainer")
    ray.get(training.__ray_call__.remote(_install_recorder), timeout=300)
    try:
        ray.get(trainer.fit.remote(), timeout=FIT_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError as e:
        raise RuntimeError(
            f"the Ray run's fit() did not finish within {FIT_TIMEOUT_S} s (deadlock?, load average "
            f"{os.getloadavg()}; it takes about 30 s on a quiet 2-core machine)"
        ) from e
    result = ray.get(training.__ray_call__.remote(_trainer_result), timeout=60)
    result.update(
        max_steps=max_steps,
        orchestrator=report,
        orchestrator_class=run["class"],
        generator=ray.get(generator.__ray_call__.remote(_actor_report), timeout=60),
        trainer=ray.get(training.__ray_call__.remote(_actor_report), timeout=60),
        engine_weights=ray.get(run["engine"].__ray_call__.remote(lambda self: self.weights), timeout=60),
        driver_pid=os.getpid(),
        seconds_after_start=time.time() - t0,
        prompts=N_PROMPTS,
    )
    return result


FULL_RUN_CASE = "interval2_p1_eval"


def _import_openrlhf():
    """What the CLI cases import first (OpenRLHF's CLI module's imports, the launcher, the tokenizer libraries)."""
    import openrlhf.trainer.ppo_trainer_async  # noqa: F401
    import openrlhf.trainer.ray.ppo_actor  # noqa: F401
    import transformers  # noqa: F401

    import sat_ext.openrlhf.train_ppo_ray  # noqa: F401


def main(out_path):
    import json
    import shutil
    import tempfile
    import threading
    import traceback

    t0 = time.time()
    workdir = tempfile.mkdtemp(prefix="openrlhf_lag_")
    os.environ["HF_DATASETS_CACHE"] = os.path.join(workdir, "hf_datasets")  # load_dataset's cache stays in here
    worker_setup()
    timings = {}
    importer = threading.Thread(target=_import_openrlhf)  # overlaps ray.init's processes starting up
    importer.start()
    import ray

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={
            "env_vars": {"PYTHONPATH": HERE, "HF_DATASETS_CACHE": os.environ["HF_DATASETS_CACHE"]},
            "worker_process_setup_hook": "_openrlhf_lag_harness.worker_setup",
        },
    )
    timings["ray_init"] = time.time() - t0
    importer.join()
    paths = make_data(workdir)
    cases = all_cli_cases(paths)
    cli, parsed = run_cli_cases({FULL_RUN_CASE: cases.pop(FULL_RUN_CASE)})
    timings["imports_and_first_cli"] = time.time() - t0
    result = {"cli": cli, "timings": timings}
    if FULL_RUN_CASE not in parsed:
        result["error"] = f"{FULL_RUN_CASE} did not reach train(): {cli[FULL_RUN_CASE]['stderr'][-2000:]}"
    else:
        try:
            t1 = time.time()
            run = start_full_run(parsed[FULL_RUN_CASE])  # its workers start while the rest below runs
            more_cli, more_parsed = run_cli_cases(cases)
            cli.update(more_cli)
            parsed.update(more_parsed)
            timings["cli_rest"] = time.time() - t1
            t1 = time.time()
            missing = [s[0] for s in SCENARIOS.values() if s[0] not in parsed]
            if missing:
                raise RuntimeError(f"the CLI cases {missing} did not reach train()")
            result["loops"] = run_scenarios(parsed, workdir)
            timings["loops"] = time.time() - t1
            t1 = time.time()
            try:
                result["ray"] = finish_full_run(run)
            except BaseException as e:  # noqa: BLE001
                result["ray"] = {"error": f"{e!r}\n{traceback.format_exc()}"}
            timings["ray_run"] = time.time() - t1
        finally:
            ray.shutdown()
    shutil.rmtree(workdir, ignore_errors=True)
    timings["total"] = time.time() - t0
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    import _openrlhf_lag_harness  # the importable module, so Ray workers find its classes by reference

    _openrlhf_lag_harness.main(sys.argv[1])
