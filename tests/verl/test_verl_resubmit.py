"""sat_ext.verl.lag.resubmit: the lag trainer's client runs verl's own resume loop (FullyAsyncLLMServerClient.generate),
resubmitting a request a weight sync aborted at once instead of after verl's 1 s sleep. Only the server is
stood in for (one attempt, below verl's loop); the sleeps are recorded, not timed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from verl.workers.rollout import llm_server
from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient, LLMServerClient
from verl.workers.rollout.replica import TokenOutput

from sat_ext.pinned import PATCHED
from sat_ext.verl.lag import resubmit
from sat_ext.verl.lag.resubmit import ResubmittingClient, backoff, client_class


class _Attempts(LLMServerClient):
    """One attempt at the server (what verl's loop calls as ``super().generate``): aborted ``aborts`` times after
    one token each, then the rest of a 4-token budget."""

    aborts = 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.seen.append((list(prompt_ids), dict(sampling_params)))
        version = len(self.seen) - 1
        if len(self.seen) <= self.aborts:
            return TokenOutput(
                token_ids=[10 + version],
                log_probs=[-0.5],
                stop_reason="aborted",
                extra_fields={"global_steps": version},
            )
        left = sampling_params["max_tokens"]
        return TokenOutput(
            token_ids=[20] * left,
            log_probs=[-0.1] * left,
            stop_reason="completed",
            extra_fields={"global_steps": version},
        )


def _client(base: type, aborts: int):
    cls = type("Probe", (base, _Attempts), {"aborts": aborts})  # verl's loop above, the stand-in server below
    client = cls.__new__(cls)
    client.config, client._only_hybrid, client.seen = SimpleNamespace(), False, []
    return client


class _RecordingAsyncio:
    """asyncio's sleeps recorded and skipped."""

    def __init__(self):
        self.sleeps: list[float] = []

    def __getattr__(self, name):
        return getattr(asyncio, name)

    async def sleep(self, delay, result=None):
        self.sleeps.append(delay)
        return result


@pytest.fixture
def sleeps(monkeypatch):
    """The sleeps verl's loop asks for, as llm_server's asyncio (sat_ext's back-off on top of a recorder)."""
    recorder = _RecordingAsyncio()
    installed = resubmit._BackoffAsyncio(recorder)
    setattr(installed, PATCHED, True)  # marked as apply_patch marks it: not wrapped again
    monkeypatch.setattr(llm_server, "asyncio", installed)
    return recorder.sleeps


def _generate(client):
    return asyncio.run(client.generate("r", prompt_ids=[1, 2], sampling_params={"max_tokens": 4}))


def test_an_aborted_request_is_resubmitted_at_once_then_backs_off(sleeps):
    client = _client(ResubmittingClient, aborts=3)
    out = _generate(client)
    assert sleeps == [0.0, 0.05, 0.1]  # verl's loop asked for 1 s three times
    assert out.token_ids == [10, 11, 12, 20] and out.stop_reason == "length"  # verl's merge: the budget is spent
    assert [p for p, _ in client.seen] == [[1, 2], [1, 2, 10], [1, 2, 10, 11], [1, 2, 10, 11, 12]]
    assert [s["max_tokens"] for _, s in client.seen] == [4, 3, 2, 1]
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (0, 3)


def test_verls_own_client_and_other_callers_keep_the_one_second_sleep(sleeps):
    out = _generate(_client(FullyAsyncLLMServerClient, aborts=2))
    assert sleeps == [1, 1] and out.token_ids == [10, 11, 20, 20]
    asyncio.run(llm_server.asyncio.sleep(1))  # outside ResubmittingClient.generate
    assert sleeps[-1] == 1


def test_the_back_off_doubles_to_verls_second():
    assert [backoff(n) for n in range(7)] == [0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.0]


def test_the_measurement_switch_hands_out_verls_client(monkeypatch):
    assert client_class() is ResubmittingClient
    monkeypatch.setenv(resubmit.CLIENT_ENV, "verl")
    assert client_class() is FullyAsyncLLMServerClient
