"""The controller actor with real Ray: producer and trainer processes, a killed producer, a restart."""

from __future__ import annotations

import random
import sys
import time

import pytest

ray = pytest.importorskip("ray")

from sat_ext.lag import LagConfig, VersionSpan, load_state  # noqa: E402
from sat_ext.lag.ray_actors import LagControllerActor, run_producer  # noqa: E402
from sat_ext.lag.schedule import scheduled_lag  # noqa: E402

# Ray workers cannot import this test module by name: ship its functions and classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@ray.remote(max_concurrency=2)
class Producer:
    """Generates by sleeping; samples span the versions seen between claim and submit (partial rollout)."""

    def __init__(
        self,
        controller,
        seed: int,
        gen_s: tuple[float, float],
        straggler_prob: float = 0.0,
        stall_after: int | None = None,
    ):
        self.controller = controller
        self.seed = seed
        self.rng = random.Random(seed)
        self.gen_s = gen_s
        self.straggler_prob = straggler_prob
        self.stall_after = stall_after  # generate this many samples, then hang on the next one
        self.current = None
        self.generated: list[int] = []

    def _generate(self, claim):
        self.current = claim
        duration = self.rng.uniform(*self.gen_s)
        if self.rng.random() < self.straggler_prob:
            duration *= 10
        if self.stall_after is not None and len(self.generated) >= self.stall_after:
            duration = 600.0
        time.sleep(duration)
        newest = ray.get(self.controller.version.remote())
        self.generated.append(claim.sample_id)
        return (("sample", claim.sample_id), self.seed), VersionSpan(claim.version, newest)

    def run(self, renew_every_s: float | None = None) -> int:
        return run_producer(self.controller, self._generate, renew_every_s=renew_every_s)

    def progress(self):
        """(ids generated and submitted or being submitted, the claim being generated now)."""
        return list(self.generated), self.current


def train(controller, steps: int, seed: int, train_s: tuple[float, float]):
    """Consume ``steps`` batches, syncing when due; returns (step, sample_id, lag, lag_steps) rows and metrics."""
    rng = random.Random(seed)
    rows, metrics = [], []
    for _ in range(steps):
        step = ray.get(controller.state_dict.remote())["steps_done"] + 1
        batch = ray.get(controller.take.remote(60.0))
        assert batch, "the trainer got no batch"
        rows.extend((step, s.sample_id, s.lag, s.lag_steps) for s in batch)
        time.sleep(rng.uniform(*train_s))
        if ray.get(controller.complete_step.remote()):
            assert ray.get(controller.wait_sync_allowed.remote(60.0))
            ray.get(controller.record_sync.remote())
        metrics.append(ray.get(controller.pop_metrics.remote()))
    return rows, metrics


# The trainer process of the long run; the other tests train in the driver process.
Trainer = ray.remote(train)


def _drain(controller) -> list[int]:
    """Close the run and take what is left (producers then finish); returns the ids taken while draining."""
    ray.get(controller.close.remote())
    ids = []
    while True:
        batch = ray.get(controller.take.remote(30.0))
        assert batch is not None, "drain timed out"
        if not batch:
            break
        ids.extend(s.sample_id for s in batch)
        if ray.get(controller.complete_step.remote()):
            ray.get(controller.record_sync.remote())
    return ids


def test_long_randomized_bounded_run_never_exceeds_the_bound(ray_session):
    cfg = LagConfig(mode="bounded", max_lag=1, batch_size=4, over_bound="drop", lease_s=10.0)
    controller = LagControllerActor.remote(cfg.to_dict())
    producers = [
        Producer.remote(controller, seed=1, gen_s=(0.005, 0.03), straggler_prob=0.15),
        Producer.remote(controller, seed=2, gen_s=(0.005, 0.03), straggler_prob=0.15),
        Producer.remote(controller, seed=3, gen_s=(0.1, 0.3)),  # the slow producer
    ]
    runs = [p.run.remote() for p in producers]
    rows, metrics = ray.get(Trainer.remote(controller, 60, seed=4, train_s=(0.01, 0.06)), timeout=120)
    _drain(controller)
    accepted = sum(ray.get(runs, timeout=30))

    assert max(lag for *_, lag, _ in rows) <= 1
    ids = [sid for _, sid, _, _ in rows]
    assert len(ids) == len(set(ids)) == 60 * 4
    keys = set(metrics[0])
    assert all(set(m) == keys for m in metrics)
    assert sum(m["lag/producer_idle_s"] for m in metrics) > 0  # admission held producers back
    stats = ray.get(controller.stats.remote())
    dropped = metrics[-1]["lag/dropped_total"]
    assert stats["open"] == 0 and stats["claims"] == 0
    # every accepted sample was consumed (in the run or the drain), dropped, or is still ready
    assert accepted >= len(ids) + dropped
    ray.kill(controller)


def test_killed_producer_loses_and_duplicates_nothing(ray_session):
    cfg = LagConfig(mode="bounded", max_lag=2, batch_size=3, over_bound="regenerate", lease_s=1.0)
    controller = LagControllerActor.remote(cfg.to_dict())
    doomed = Producer.remote(controller, seed=5, gen_s=(0.01, 0.02), stall_after=2)
    survivor = Producer.remote(controller, seed=6, gen_s=(0.01, 0.05))
    doomed_run = doomed.run.remote()
    deadline = time.monotonic() + 30
    while True:  # wait until two samples of the first batch of 3 are accepted and the third is in flight
        generated, claim = ray.get(doomed.progress.remote())
        if len(generated) == 2 and claim is not None and claim.sample_id not in generated:
            stats = ray.get(controller.stats.remote())
            if stats["ready"] == 2 and stats["claims"] == 1:
                break
        assert time.monotonic() < deadline, f"the doomed producer did not get mid-batch: {generated} {claim}"
        time.sleep(0.05)
    ray.kill(doomed)  # mid-batch: two samples accepted, the third claimed and never submitted
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(doomed_run, timeout=10)
    survivor_run = survivor.run.remote()

    rows, _ = train(controller, 10, seed=7, train_s=(0.01, 0.02))
    ids = [sid for _, sid, _, _ in rows] + _drain(controller)
    accepted = ray.get(survivor_run, timeout=30)

    assert len(ids) == len(set(ids))  # nothing consumed twice
    assert set(generated) <= set(ids)  # the dead producer's accepted samples were trained on
    assert claim.sample_id in ids  # its in-flight sample was generated again, not lost
    assert sorted(ids) == list(range(ray.get(controller.stats.remote())["next_id"]))  # no gap: nothing lost
    assert accepted + len(generated) == len(ids)  # every accepted sample, from either producer, was trained on
    ray.kill(controller)


@pytest.mark.parametrize("renew_every_s", [0.1, None])
def test_renewed_claims_outlive_their_lease(ray_session, renew_every_s):
    cfg = LagConfig(mode="bounded", max_lag=0, batch_size=2, lease_s=1.0)
    controller = LagControllerActor.remote(cfg.to_dict())
    slow = Producer.remote(controller, seed=15, gen_s=(3.0, 3.0))  # a generation takes 3 leases
    fast = Producer.remote(controller, seed=16, gen_s=(0.01, 0.01))
    ray.get([slow.progress.remote(), fast.progress.remote()])  # both processes are up
    slow_run = slow.run.remote(renew_every_s=renew_every_s)
    deadline = time.monotonic() + 30
    while (claim := ray.get(slow.progress.remote())[1]) is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    fast_run = fast.run.remote()
    batch = ray.get(controller.take.remote(30.0))
    [payload] = [s.payload for s in batch if s.sample_id == claim.sample_id]
    # renewed, the slow producer keeps its sample; unrenewed, the lease lapses and the fast one takes it over
    assert payload == (("sample", claim.sample_id), 15 if renew_every_s else 16)
    ray.get(controller.complete_step.remote())
    ray.get(controller.record_sync.remote())
    _drain(controller)
    ray.get([slow_run, fast_run], timeout=30)
    ray.kill(controller)


def test_interval_mode_lags_follow_the_schedule(ray_session):
    interval, prefetch = 3, 1
    cfg = LagConfig(mode="interval", interval=interval, prefetch=prefetch, batch_size=3, lease_s=10.0)
    controller = LagControllerActor.remote(cfg.to_dict())
    producers = [Producer.remote(controller, seed=s, gen_s=(0.005, 0.05), straggler_prob=0.2) for s in (8, 9)]
    runs = [p.run.remote() for p in producers]
    rows, metrics = train(controller, 13, seed=10, train_s=(0.01, 0.03))
    _drain(controller)
    ray.get(runs, timeout=30)

    for step, _, lag, lag_steps in rows:
        assert (lag, lag_steps) == scheduled_lag(step, interval, prefetch)
    assert [m["lag/steps/max"] for m in metrics] == [scheduled_lag(s, interval, prefetch)[1] for s in range(1, 14)]
    assert all(m["lag/off_schedule"] == 0 for m in metrics)
    ray.kill(controller)


def test_restart_from_saved_state_resumes_the_version_counter(ray_session, tmp_path):
    path = str(tmp_path / "lag_state.json")
    cfg = LagConfig(mode="bounded", max_lag=1, batch_size=2, lease_s=10.0)
    controller = LagControllerActor.remote(cfg.to_dict(), state_path=path)  # no file yet: fresh start
    producer = Producer.remote(controller, seed=11, gen_s=(0.005, 0.02))
    run = producer.run.remote()
    train(controller, 5, seed=12, train_s=(0.005, 0.01))
    ray.get(controller.save_state.remote(path))
    saved_next_id = load_state(path)["next_id"]
    ray.kill(controller)  # the trainer process restarts from its checkpoint
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(run, timeout=30)

    controller = LagControllerActor.remote(cfg.to_dict(), state_path=path)
    assert ray.get(controller.version.remote()) == 5
    producer = Producer.remote(controller, seed=13, gen_s=(0.005, 0.02))
    run = producer.run.remote()
    rows, metrics = train(controller, 2, seed=14, train_s=(0.005, 0.01))
    assert [m["lag/trainer_step"] for m in metrics] == [6, 7]
    assert [m["lag/version"] for m in metrics] == [6, 7]
    assert min(sid for _, sid, _, _ in rows) >= saved_next_id  # ids consumed before the save are not reused
    assert max(lag for *_, lag, _ in rows) <= 1
    _drain(controller)
    ray.get(run, timeout=30)
    ray.kill(controller)
