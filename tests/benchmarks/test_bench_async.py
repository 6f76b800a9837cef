"""benchmarks/bench_async.py: which process goes to which core, and its measurement switch's checks."""

import bench_async as B
import pytest


@pytest.mark.parametrize(
    "text,core",
    [
        ("ray::LagGenerateSamplesActor.fit", B.ROLLOUT_CORE),  # OpenRLHF's generator (sat_ext's subclass)
        ("ray::GenerateSamplesActor.fit", B.ROLLOUT_CORE),
        ("ray::LLMRayActor.generate", B.ROLLOUT_CORE),
        ("VLLM::EngineCore", B.ROLLOUT_CORE),
        ("ray::AgentLoopWorker.generate_sequences", B.ROLLOUT_CORE),
        ("ray::LagTrainingActor.fit", B.TRAINER_CORE),  # OpenRLHF's trainer loop
        ("ray::PPOTrainerAsync.fit", B.TRAINER_CORE),
        ("ray::PolicyModelActor.fit", B.TRAINER_CORE),
        ("ray::WorkerDict.actor_rollout_update_actor", B.TRAINER_CORE),
        ("ray::TaskRunner.run", B.TRAINER_CORE),
        ("/usr/bin/python ray/_private/gcs_server", None),
        ("python benchmarks/bench_async.py --framework verl", None),
    ],
)
def test_each_side_gets_its_core(text, core):
    assert B.core_of(text) == core


def test_the_client_switch_is_verl_only(tmp_path, capsys):
    with pytest.raises(SystemExit):
        B.main(["--framework", "openrlhf", "--verl-client", "verl", "--out", str(tmp_path)])
    assert "--verl-client" in capsys.readouterr().err
