"""The verl side of agent episodes' turn records (sat_ext.verl.agent_turns): the recording LLM client and the
trainer's refusal of multi-turn trajectories whose tool observations are in the loss."""

from __future__ import annotations

import asyncio

import pytest
import torch
from verl.workers.rollout.replica import TokenOutput

from sat_ext.verl.agent_turns import ObservationMaskError, TurnRecorder, _masks, check_observation_masks


class _Client:
    def __init__(self, versions):
        self.versions, self.params = list(versions), []
        self.name = "the client"

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.params.append(sampling_params)
        fields = dict(zip(("min_global_steps", "max_global_steps"), self.versions.pop(0)))
        return TokenOutput(token_ids=[7] * 5, log_probs=[-1.0] * 5, extra_fields=fields)


def test_the_recorder_records_caps_and_trims():
    client = _Client([(0, 0), (0, 1), (2, 2)])
    recorder = TurnRecorder(client, max_tokens=5)
    params = {"temperature": 1.0}
    for prompt in ([1, 2], [1, 2, 3], [4]):
        asyncio.run(recorder.generate("r", prompt_ids=prompt, sampling_params=params))
    assert params == {"temperature": 1.0} and all(p["max_tokens"] == 5 for p in client.params)
    assert recorder.prompt_ids == [[1, 2], [1, 2, 3], [4]] and recorder.name == "the client"
    mask = [1] * 5 + [0] * 3 + [1] * 5 + [0] * 2 + [1] * 5
    assert recorder.record(mask) == [[5, 0, 0], [5, 0, 1], [5, 2, 2]]
    assert recorder.record(mask[:-2]) == [[5, 0, 0], [5, 0, 1], [3, 2, 2]]


def test_the_recorder_refuses_a_turn_without_a_version():
    client = _Client([(None, None)])
    with pytest.raises(RuntimeError, match="no weight version"):
        asyncio.run(TurnRecorder(client).generate("r", prompt_ids=[1], sampling_params={}))


def test_observations_in_the_loss_are_refused_naming_the_loops():
    masked = [1, 1, 0, 0, 1, 0]
    check_observation_masks(["a_0_0", "b_0_0"], [8, 2], [masked, [1, 1, 1, 0]], "loop X")  # single-turn: no gap
    with pytest.raises(ObservationMaskError, match="trajectory b_0_0 has num_turns=3.*agent loops: loop X"):
        check_observation_masks(["a_0_0", "b_0_0"], [8, 3], [masked, [1, 1, 1, 1, 0, 0]], "loop X")


def test_masks_from_transfer_queue_layouts():
    nested = torch.nested.as_nested_tensor([torch.tensor([1, 0, 1]), torch.tensor([1])], layout=torch.jagged)
    assert _masks(nested) == [[1, 0, 1], [1]]
    assert _masks(torch.tensor([[1, 0], [1, 1]])) == [[1, 0], [1, 1]]
