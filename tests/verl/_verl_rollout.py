"""A stand-in for verl's rollout side (AgentLoopWorkerTQ + rollout servers) against a real TransferQueue.

It writes to TransferQueue what verl 0.9.1's ``AgentLoopWorkerTQ`` writes (prompt status ``running`` then
``finished`` / ``failure``; one trajectory per session with ``response_len``, ``global_steps``,
``min_global_steps``, ``max_global_steps`` tags), with long-tailed generation times, from a Ray actor (as verl's
agent loop workers are). A weight broadcast (``set_version``) does not interrupt a request: a request running
across it finishes with ``max_global_steps`` = the new version (verl's partial rollout). The trainer side is
:func:`drive`, which calls the replay buffer in the order verl's V1 ``fit`` does (warm-up prompts, then per
global step: submit ``train_batch_size`` prompts, ``sample`` once per local update, the broadcast). What is
not real here: generation itself and verl's trainer loop (they need GPUs).
"""

from __future__ import annotations

import math
import random
import threading
import time
import uuid
from dataclasses import dataclass, field

import ray
import transfer_queue as tq


@ray.remote(num_cpus=0)
class Rollout:
    """``slots`` concurrent requests; each prompt group of ``n`` sessions takes a log-normal time, and every
    ``straggler_every``-th group started (0: none) 40 times the median (a long answer that always crosses steps)."""

    def __init__(
        self,
        slots: int,
        n: int,
        seed: int,
        median_s: float,
        sigma: float,
        fail_rate: float = 0.0,
        straggler_every: int = 0,
    ):
        tq.init()  # attaches to the driver's TransferQueue
        self.slots, self.n, self.median_s, self.sigma, self.fail_rate = slots, n, median_s, sigma, fail_rate
        self.straggler_every, self.started = straggler_every, 0
        self.rng = random.Random(seed)
        self.version = 0
        self.pending: list[tuple[str, int]] = []
        self.running: list[tuple[float, str, int, int, int]] = []  # (finish, uid, step, start version, length)
        self.lock = threading.Lock()
        self.idle_spells = 0  # the times it ran out of work (waiting for new prompts: weights, in interval mode)
        self.writing = 0  # finished requests whose TransferQueue writes are not done yet
        self.stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def submit(self, uids: list[str], step: int) -> None:
        with self.lock:
            self.pending.extend((uid, step) for uid in uids)

    def set_version(self, version: int) -> None:
        with self.lock:
            self.version = version

    def busy(self) -> int:
        """Requests not yet visible as finished in TransferQueue (pending, running, or being written)."""
        with self.lock:
            return len(self.pending) + len(self.running) + self.writing

    def idle_count(self) -> int:
        with self.lock:
            return self.idle_spells

    def close(self) -> None:
        self.stop = True
        self.thread.join()

    def _loop(self) -> None:
        while not self.stop:
            now = time.monotonic()
            with self.lock:
                starting = []
                while self.pending and len(self.running) + len(starting) < self.slots:
                    uid, step = self.pending.pop(0)
                    seconds = min(20 * self.median_s, self.rng.lognormvariate(math.log(self.median_s), self.sigma))
                    self.started += 1
                    if self.straggler_every and self.started % self.straggler_every == 0:
                        seconds = 40 * self.median_s
                    starting.append((now + seconds, uid, step, self.version, max(1, int(seconds * 1e4))))
                self.running.extend(starting)
                done = [r for r in self.running if r[0] <= now]
                self.running = [r for r in self.running if r[0] > now]
                if done and not self.running and not self.pending:
                    self.idle_spells += 1
                version = self.version
                fails = [self.rng.random() < self.fail_rate for _ in done]
                self.writing += len(done)
            for _, uid, _, _, _ in starting:
                tq.kv_put(key=uid, partition_id="train", tag={"status": "running"})
            for (_, uid, step, start, length), failed in zip(done, fails, strict=True):
                if not failed:
                    keys = [f"{uid}_{i}_0" for i in range(self.n)]
                    tag = {
                        "status": "success",
                        "response_len": length,
                        "global_steps": step,
                        "min_global_steps": start,
                        "max_global_steps": version,
                    }
                    tq.kv_batch_put(keys=keys, partition_id="train", tags=[dict(tag) for _ in keys])
                tq.kv_put(key=uid, partition_id="train", tag={"status": "failure" if failed else "finished"})
            with self.lock:
                self.writing -= len(done)
            time.sleep(0.001)


@dataclass
class Consumed:
    """One local update's batch: where it was taken and its trajectories' tags."""

    global_step: int
    local: int
    tags: list[dict]
    uids: list[str]


@dataclass
class DriveResult:
    consumed: list[Consumed] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)
    submitted: int = 0
    refills: set[str] = field(default_factory=set)
    dispatched: list[str] = field(default_factory=list)  # every prompt, in the order it reached the rollout

    def fifo_violations(self) -> int:
        """Batches of one submission that took a group dispatched before one taken earlier (refills aside)."""
        position = {uid: i for i, uid in enumerate(self.dispatched)}
        taken: dict[int, int] = {}
        bad = 0
        for c in self.consumed:
            for step in {t["global_steps"] for t in c.tags}:
                uids = [u for u, t in zip(c.uids, c.tags, strict=True) if t["global_steps"] == step]
                order = [position[u] for u in uids if u not in self.refills]
                if order and step in taken and min(order) < taken[step]:
                    bad += 1
                if order:
                    taken[step] = max([*order, taken.get(step, -1)])
        return bad


def drive(
    sampler,
    rollout,
    global_steps: int,
    sync_every: int,
    batch_size: int,
    warmup_prompts: int,
    drain: bool,
    train_s: float = 0.0,
    train_until_idle: bool = False,
) -> DriveResult:
    """verl V1 ``fit``'s calls on the replay buffer, with ``rollout`` generating and each local update taking
    ``train_s`` seconds (the trainer's work, slept); with ``train_until_idle`` a local update also lasts until the
    rollout has nothing left to generate: generation faster than training by construction, whatever the load."""
    out = DriveResult()
    step = [1]

    def submit(count: int, refill: bool = True) -> int:
        uids = [str(uuid.uuid4()) for _ in range(count)]
        if refill:
            out.refills.update(uids)
        tags = [{"is_prompt": True, "status": "pending", "global_steps": step[0]} for _ in uids]
        tq.kv_batch_put(keys=uids, partition_id="train", tags=tags)
        sampler.note_dispatched(uids)  # what SATSeparateAsyncTrainer.submit_batch_to_rollout does
        ray.get(rollout.submit.remote(uids, step[0]))
        out.dispatched.extend(uids)
        out.submitted += count
        return count

    sampler.refill_fn = submit
    if warmup_prompts:
        submit(warmup_prompts, refill=False)
    for t in range(1, global_steps + 1):
        step[0] = t
        submit(sync_every * batch_size, refill=False)
        for local in range(sync_every):
            batch, metrics = sampler.sample(global_steps=t, partition_id="train", batch_size=batch_size)
            out.consumed.append(Consumed(t, local, list(batch.tags), [k.split("_")[0] for k in batch.keys]))
            if any(k.startswith("lag/") for k in metrics):
                out.metrics.append(metrics)
            tq.kv_clear(keys=batch.keys, partition_id="train")
            time.sleep(train_s)
            while train_until_idle and ray.get(rollout.busy.remote()):
                time.sleep(0.005)
        if drain:
            sampler.drain(t)
        ray.get(rollout.set_version.remote(t))
    return out
