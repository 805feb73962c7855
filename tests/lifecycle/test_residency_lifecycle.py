"""The residency state machine on a real trainer + engine pair (toy model): transitions,
scopes, colocation, guards, in-flight holds, failure."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from heron.records import GenerationRequest, SamplingParams
from heron.residency import ReleasedMemoryError, ResidencyError, State, host_only
from heron.residency.errors import ResidencyError as _Base

REQUESTS = [GenerationRequest([5, 6, 7], SamplingParams(max_new_tokens=4, seed=i)) for i in range(3)]


def _forward(model):
    return model(input_ids=torch.tensor([[5, 6, 7]])).logits


def test_offloaded_components_rest_asleep_and_hold_no_device_bytes(make_pair):
    pair = make_pair(colocate=True, offload=True)
    for component in pair.components.values():
        assert component.residency_state is State.ASLEEP
        assert sum(component.memory_report().values()) == 0
    assert sum(pair.trainer.residency.released_bytes.values()) > 0


def test_sleep_and_wake_are_idempotent(make_pair):
    pair = make_pair(colocate=False, offload=True)
    engine = pair.engine
    engine.wake()
    awake_bytes = sum(engine.memory_report().values())
    engine.wake()
    assert engine.residency_state is State.AWAKE and engine.residency.num_transitions == 2  # sleep at attach, wake
    engine.sleep()
    engine.sleep()
    assert engine.residency_state is State.ASLEEP and engine.residency.num_transitions == 3
    assert sum(engine.memory_report().values()) == 0 and awake_bytes > 0


def test_operation_wakes_and_restores_previous_state(make_pair, batch):
    pair = make_pair(colocate=True, offload=True)
    pair.trainer.train(batch)
    assert pair.trainer.residency_state is State.ASLEEP  # was asleep before train
    pair.trainer.wake()
    pair.trainer.train(batch)
    assert pair.trainer.residency_state is State.AWAKE  # was awake before train


def test_exception_in_operation_restores_state(make_pair, batch):
    pair = make_pair(colocate=True, offload=True)
    with pytest.raises(ValueError, match="request 0"):
        pair.engine.generate([GenerationRequest([], SamplingParams())])  # invalid: empty prompt
    assert pair.engine.residency_state is State.ASLEEP
    assert pair.engine.residency.current_operation() is None


def test_colocated_wake_puts_the_other_to_sleep(make_pair):
    pair = make_pair(colocate=True, offload=True)
    pair.trainer.wake()
    pair.engine.wake()
    assert pair.trainer.residency_state is State.ASLEEP
    assert pair.coordinator.awake_on("cpu") == ["engine"]
    pair.engine.generate(REQUESTS)
    pair.trainer.wake()
    assert pair.coordinator.awake_on("cpu") == ["trainer"]


def test_not_colocated_both_can_be_awake(make_pair):
    pair = make_pair(colocate=False, offload=True)
    pair.trainer.wake()
    pair.engine.wake()
    assert sorted(pair.coordinator.awake_on("cpu")) == ["engine", "trainer"]


def test_nested_wake_of_a_colocated_component_fails_clearly(make_pair, monkeypatch):
    pair = make_pair(colocate=True, offload=True)
    original = pair.engine._generate_batch

    def generate_that_wakes_trainer(requests):
        pair.trainer.wake()
        return original(requests)

    monkeypatch.setattr(pair.engine, "_generate_batch", generate_that_wakes_trainer)
    with pytest.raises(ResidencyError, match="engine shares device cpu and is running 'generate'"):
        pair.engine.generate(REQUESTS)
    assert pair.engine.residency_state is State.ASLEEP and pair.trainer.residency_state is State.ASLEEP


def test_direct_access_while_asleep_raises_our_error_not_a_crash(make_pair):
    """Without the guard this forward reads 0-byte storages (a segfault on CPU)."""
    pair = make_pair(colocate=True, offload=True)
    with pytest.raises(ReleasedMemoryError, match="trainer is asleep .* outside any declared operation"):
        _forward(pair.trainer.model)
    with pytest.raises(ReleasedMemoryError, match="engine is asleep"):
        _forward(pair.engine.model)
    with pytest.raises(ReleasedMemoryError, match=r"optimizer \(AdamW.step\)"):
        pair.trainer.optimizer.step()
    pair.trainer.wake()
    assert _forward(pair.trainer.model).shape[-1] == pair.trainer.model.config.vocab_size


def test_state_dicts_of_an_asleep_component_raise_our_error(make_pair, tmp_path):
    """What an undeclared checkpoint save would do (the prior-art crash): DCP takes state
    dicts of the released tensors. Without the guard this segfaults on CPU."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    pair = make_pair(colocate=True, offload=True)
    with pytest.raises(ReleasedMemoryError, match="trainer is asleep .* the state_dict of module 'model'"):
        get_model_state_dict(pair.trainer.model)
    with pytest.raises(ReleasedMemoryError, match=r"AdamW.state_dict\)"):
        pair.trainer.optimizer.state_dict()
    with pytest.raises(ReleasedMemoryError, match="load_state_dict of module 'model'"):
        pair.engine.model.load_state_dict({})
    from heron.checkpoint.writer import CheckpointWriter

    writer = CheckpointWriter(tmp_path, async_save=True)
    writer.save(0, pair.trainer, {})  # save_state is declared: wakes by itself, stages, sleeps again
    assert pair.trainer.residency_state is State.ASLEEP
    writer.close()
    assert (tmp_path / "rollout-000000").is_dir()


def test_a_sleep_waits_for_the_async_save_copy(make_pair, tmp_path, monkeypatch):
    """The trainer's async save returns before its host copy is made; the save holds the
    trainer (a residency hold), so a sleep meanwhile waits for the copy instead of releasing the
    memory under it (the prior-art crash, moved into a thread), then sleeps."""
    from heron.checkpoint.reader import open_checkpoint
    from heron.checkpoint.writer import CheckpointWriter
    from tests.checkpoint_helpers import held_staging

    started, release = held_staging(monkeypatch)
    pair = make_pair(colocate=True, offload=True)
    trainer = pair.trainer
    trainer.wake()
    writer = CheckpointWriter(tmp_path, async_save=True)
    writer.save(0, trainer, {})
    assert started.wait(timeout=60) and trainer.residency.in_flight() == ["async checkpoint staging"]
    sleeper = threading.Thread(target=trainer.sleep)
    sleeper.start()
    sleeper.join(timeout=0.5)
    assert sleeper.is_alive() and trainer.residency.state is State.AWAKE
    release.set()
    sleeper.join(timeout=60)
    assert not sleeper.is_alive() and trainer.residency_state is State.ASLEEP
    assert trainer.residency.in_flight() == []
    writer.close()
    assert open_checkpoint(tmp_path / "rollout-000000").rollout_id == 0


def test_a_trainer_load_waits_for_the_async_save_copy(make_pair, batch, tmp_path, monkeypatch):
    """``load_state`` writes into the live tensors: while an async save has not copied them,
    it waits, so the save holds what the trainer had at the save (not the loaded values)."""
    from heron.checkpoint.fingerprint import config_fingerprint
    from heron.checkpoint.reader import open_checkpoint
    from heron.checkpoint.writer import CheckpointWriter
    from tests.checkpoint_helpers import held_staging

    trainer = make_pair(colocate=False, offload=False).trainer
    run_state = {"fingerprint": {"config": config_fingerprint({})}}
    CheckpointWriter(tmp_path / "a", async_save=False).save(0, trainer, run_state)
    trainer.train(batch)
    trained = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    started, release = held_staging(monkeypatch)
    writer = CheckpointWriter(tmp_path / "b", async_save=True)
    writer.save(1, trainer, run_state)
    assert started.wait(timeout=60)
    loader = threading.Thread(target=trainer.load_state, args=(open_checkpoint(tmp_path / "a" / "rollout-000000"), {}))
    loader.start()
    loader.join(timeout=0.5)
    assert loader.is_alive(), "load_state wrote into the tensors before the async save had copied them"
    release.set()
    loader.join(timeout=60)
    writer.close()
    trainer.load_state(open_checkpoint(tmp_path / "b" / "rollout-000001"), {})
    for name, tensor in trainer.model.state_dict().items():
        assert torch.equal(tensor, trained[name]), name


def test_misdeclared_host_only_operation_is_named(make_pair):
    """A host-only operation that touches device memory anyway: the error names it."""
    pair = make_pair(colocate=True, offload=True)

    @host_only
    def peek_logits(trainer):
        return _forward(trainer.model)

    with pytest.raises(ReleasedMemoryError, match="operation 'peek_logits' touched module 'model'.*@needs_device"):
        peek_logits(pair.trainer)


def test_host_only_weights_never_wake(make_pair, batch):
    pair = make_pair(colocate=True, offload=True)
    pair.trainer.train(batch)
    transitions = pair.trainer.residency.num_transitions
    handle = pair.trainer.weights()
    assert pair.trainer.residency.num_transitions == transitions
    pair.engine.load_weights(handle)
    pair.trainer.wake()
    for name, tensor in pair.trainer.model.state_dict().items():
        assert torch.equal(handle.tensors()[name], tensor), name


@pytest.mark.portability
def test_sleep_waits_for_in_flight_work(make_pair):
    pair = make_pair(colocate=True, offload=True)
    trainer = pair.trainer
    trainer.wake()
    hold = trainer.residency.hold("staging")
    waking, events = threading.Event(), []

    def stage():
        waking.wait()
        # room for a sleep that does not wait to show itself; never needed to pass (the state
        # is read without the residency lock, which the waiting sleep holds)
        deadline = time.monotonic() + 2.0
        while trainer.residency.state is State.AWAKE and time.monotonic() < deadline:
            time.sleep(0.01)
        events.append(("held", trainer.residency.state))
        if trainer.residency.state is State.AWAKE:
            float(sum(p.detach().sum() for p in trainer.model.parameters()))  # reads while held
        hold.release()

    worker = threading.Thread(target=stage)
    worker.start()
    waking.set()
    pair.engine.wake()  # puts the trainer to sleep: must wait for the hold
    events.append(("engine awake", trainer.residency_state))
    worker.join()
    assert events == [("held", State.AWAKE), ("engine awake", State.ASLEEP)]  # ordered by the hold
    assert trainer.residency.in_flight() == []


@pytest.mark.portability
def test_hold_must_be_taken_awake_and_sleep_times_out(make_pair):
    pair = make_pair(colocate=True, offload=True)
    with pytest.raises(ResidencyError, match="take the hold"):
        pair.trainer.residency.hold("staging")
    pair.trainer.wake()
    pair.trainer.residency.wait_timeout_s = 0.1
    hold = pair.trainer.residency.hold("stuck staging")
    with pytest.raises(ResidencyError, match=r"in-flight work .*\(stuck staging\)"):
        pair.trainer.sleep()
    assert pair.trainer.residency_state is State.AWAKE  # nothing was released
    hold.release()
    pair.trainer.sleep()
    assert pair.trainer.residency_state is State.ASLEEP


def test_failed_transition_is_terminal_and_explained(make_pair, monkeypatch):
    pair = make_pair(colocate=True, offload=True)

    def broken_restore():
        raise OSError("host buffer vanished")

    monkeypatch.setattr(pair.engine.residency.backend, "restore", broken_restore)
    with pytest.raises(ResidencyError, match="engine: waking failed .*host buffer vanished"):
        pair.engine.generate(REQUESTS)
    assert pair.engine.residency_state is State.FAILED
    with pytest.raises(ResidencyError, match="engine failed earlier .*cannot run 'generate'"):
        pair.engine.generate(REQUESTS)


def test_bare_component_runs_directly_and_refuses_sleep(toy_template):
    from heron.rollout.embedded import EmbeddedEngine

    engine = EmbeddedEngine(toy_template, pad_token_id=toy_template.config.pad_token_id)
    assert len(engine.generate(REQUESTS)) == 3
    with pytest.raises(_Base, match="no residency attached"):
        engine.sleep()


def test_reference_model_sleeps_with_the_trainer(make_pair, batch):
    pair = make_pair(colocate=True, offload=True, kl_coef=0.1)
    assert pair.trainer.residency.released_bytes["reference"] > 0
    metrics = pair.trainer.train(batch)
    assert "kl" in " ".join(metrics) and pair.trainer.residency_state is State.ASLEEP
