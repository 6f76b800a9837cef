"""benchmarks/_cpu_ledger.py: the window's arithmetic, process labels, and the counters of real processes (a busy
child; two busy children sharing one core, so that each waits on the run queue while the other runs)."""

import os
import subprocess
import sys
import time

import _cpu_ledger as L
import bench_async as B
import pytest

BUSY = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def test_window_counts_new_threads_from_zero_and_sums_per_label():
    a = L.Snapshot(0.0, 1, {(1, 1): ("x", 100, 10), (1, 2): ("x", 50, 0), (2, 2): ("gone", 7, 7)})
    b = L.Snapshot(2.0, 3, {(1, 1): ("x", 1_000_000_100, 20), (1, 2): ("x", 50, 0), (3, 3): ("new", 2_000_000_000, 5)})
    got = L.window(a, b)
    assert got == {"x": L.Spent(1.0, 10 / 1e9), "new": L.Spent(2.0, 5 / 1e9)}


@pytest.mark.parametrize(
    "cmdline,name,label",
    [
        (["ray::WorkerDict.actor_rollout_update_actor"], "ray::WorkerDict", "ray::WorkerDict"),
        (
            ["/venv/bin/python3", "-u", "-m", "verl.trainer.main_ppo", "a=b"],
            "python3",
            "python -m verl.trainer.main_ppo",
        ),
        (["/venv/bin/python", "benchmarks/bench_async.py", "--framework", "verl"], "python", "python bench_async.py"),
        (["/venv/lib/ray/core/src/ray/raylet/raylet", "--flag"], "raylet", "raylet"),
        ([], "VLLM::EngineCore", "VLLM::EngineCore"),
    ],
)
def test_labels(cmdline, name, label):
    assert L.label_of(cmdline, name) == label


def test_each_label_goes_to_its_side():
    assert B._side("ray::WorkerDict") == "trainer"
    assert B._side("VLLM::EngineCore") == "rollout"
    assert B._side("ray::AgentLoopWorker") == "rollout"
    assert B._side("raylet") == B._side("this script") == "other"


def _children(cores):
    return [subprocess.Popen([sys.executable, "-c", BUSY, str(c)]) for c in cores]


def _spent_of(procs, seconds):
    a = L.snapshot(0)
    time.sleep(seconds)
    b = L.snapshot(1)
    per_pid = {}
    for (pid, tid), (_, c1, w1) in b.threads.items():
        _, c0, w0 = a.threads.get((pid, tid), ("", 0, 0))
        cpu, wait = per_pid.get(pid, (0, 0))
        per_pid[pid] = (cpu + c1 - c0, wait + w1 - w0)
    return [per_pid[p.pid] for p in procs]


def test_core_jiffies_leave_idle_and_iowait_out():
    stat = "cpu  9 9 9 9 9 0 0 0 0 0\ncpu0 10 0 5 80 5 0 0 0 0 0\ncpu1 1 2 3 4 5 6 7 8 0 0\nintr 1 2\n"
    assert L.core_jiffies(stat) == {0: (15, 100), 1: (27, 36)}
    a = L.Snapshot(0.0, 0, {}, {0: (15, 100)})
    b = L.Snapshot(1.0, 1, {}, {0: (45, 200)})
    assert L.core_busy(a, b) == {0: pytest.approx(0.3)}


def test_a_busy_child_gains_cpu_time():
    procs = _children([0])
    try:
        time.sleep(0.2)
        ((cpu, _),) = _spent_of(procs, 0.3)
        assert cpu > 0
    finally:
        for p in procs:
            p.kill()


def test_two_busy_children_on_one_core_wait_on_its_run_queue():
    procs = _children([1, 1])
    try:
        time.sleep(0.2)
        spent = _spent_of(procs, 0.5)
        assert all(cpu > 0 for cpu, _ in spent)
        assert all(wait > 0 for _, wait in spent)  # each was runnable while the other held the core
    finally:
        for p in procs:
            p.kill()


def test_the_ledger_samples_only_inside_its_window():
    calls = iter(range(100))
    ledger = L.CpuLedger(lambda: next(calls), start_steps=3, end_steps=6, period=0.01)
    ledger.start()
    ledger.join(timeout=10)
    assert not ledger.is_alive()
    assert ledger.first.steps == 3 and ledger.last.steps == 5
    wall, spent, cores = ledger.spent()
    assert wall > 0 and "this script" in spent
    assert set(cores) == set(range(os.cpu_count())) and all(0.0 <= b <= 1.0 for b in cores.values())


def test_cpu_stats_scales_rates_to_one_step(tmp_path):
    B._write_ledger(
        tmp_path / B.LEDGER,
        4.0,
        {"ray::WorkerDict": L.Spent(2.0, 0.4), "VLLM::EngineCore": L.Spent(3.0, 0.0), "raylet": L.Spent(1.0, 0.2)},
        {B.ROLLOUT_CORE: 0.9, B.TRAINER_CORE: 0.6},
    )
    got = B.cpu_stats(tmp_path, sec_per_step=2.0)
    assert got["cpu_trainer_s"] == pytest.approx(1.0) and got["runq_trainer_s"] == pytest.approx(0.2)
    assert got["cpu_rollout_s"] == pytest.approx(1.5) and got["cpu_other_s"] == pytest.approx(0.5)
    assert got["cores_busy"] == pytest.approx(1.5)
    assert got["core_busy_rollout"] == 0.9 and got["core_busy_trainer"] == 0.6
    assert B.cpu_stats(tmp_path / "none", 1.0) == {}
