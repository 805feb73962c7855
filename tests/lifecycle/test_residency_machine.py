"""Stateful property test: random sequences of public operations (train, async checkpoint save, export,
push weights, generate, eval, probe) and explicit sleep/wake on a colocated, offloaded
trainer + engine pair, mirrored on a shadow pair without offload. ``save_behind`` leaves its
async save in flight (its host copy may not have run yet) while later operations train, sleep
and wake; the next save, ``finish_saves`` or the end checks that it holds the weights of the
moment it was taken.

After every step: states are consistent (no transitional state at rest, no operation left
running), at most one component is awake on the device, an asleep component holds no device
bytes and an awake one holds exactly what its shadow holds, and every result (metrics,
logprobs, generations, eval score, checkpointed weights, exported files) is identical to the
shadow's.
Touching released memory would crash (CPU) or raise ``ReleasedMemoryError``; the ``probe``
rule checks that direct access to an asleep component raises that error.
"""

from __future__ import annotations

import copy
import filecmp
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from residency_pair import Pair, train_batch
from heron.checkpoint.reader import load_into, open_checkpoint
from heron.checkpoint.writer import CheckpointWriter
from heron.evaluator import Evaluator
from heron.records import GenerationRequest, SamplingParams
from heron.residency import ReleasedMemoryError, State
from tests.soak import trials

COMPONENTS = st.sampled_from(["trainer", "engine"])


def _same_files(a: Path, b: Path) -> bool:
    """Same file names and byte-identical contents."""
    names = sorted(p.name for p in a.iterdir())
    match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    return names == sorted(p.name for p in b.iterdir()) and not mismatch and not errors


def _saved_model(folder: Path, template) -> dict[str, bytes]:
    """The model tensors of a checkpoint (as raw bytes, for exact comparison)."""
    model = copy.deepcopy(template)
    load_into(open_checkpoint(folder), model, None)
    return {k: v.numpy().tobytes() for k, v in model.state_dict().items()}


class ColocatedPair(RuleBasedStateMachine):
    def __init__(self, template, evaluator: Evaluator):
        super().__init__()
        self.main = Pair(template, colocate=True, offload=True)
        self.shadow = Pair(template, colocate=False, offload=False)
        self.evaluator = evaluator
        self.vocab_size = template.config.vocab_size
        self.tmp = Path(tempfile.mkdtemp(prefix="heron-machine-"))
        self.num_files = 0
        self.writers = [CheckpointWriter(self.tmp / name, async_save=True, keep_last=0) for name in ("main", "shadow")]
        self.template = template
        self.behind: dict[str, bytes] | None = None  # the weights a save still in flight must hold

    def teardown(self):
        try:
            self.finish_saves()
        finally:
            for writer in self.writers:
                writer.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _both(self, fn):
        return fn(self.main), fn(self.shadow)

    def _paths(self) -> tuple[Path, Path]:
        self.num_files += 1
        return self.tmp / f"main-{self.num_files}", self.tmp / f"shadow-{self.num_files}"

    @rule(seed=st.integers(0, 2))
    def train(self, seed):
        batch = lambda: train_batch(self.vocab_size, seed=seed)  # noqa: E731 (a fresh batch per pair)
        main, shadow = self._both(lambda p: p.trainer.train(batch()))
        assert main == shadow

    @rule(seed=st.integers(0, 2))
    def compute_logprobs(self, seed):
        main, shadow = self._both(lambda p: p.trainer.compute_logprobs(train_batch(self.vocab_size, seed=seed)))
        assert torch.equal(main, shadow)

    @rule()
    def save(self):
        """Async checkpoint, waited for at once."""
        self.save_behind()
        self.finish_saves()

    @rule()
    def save_behind(self):
        """Async checkpoint left in flight: its host copy runs in its own thread after ``save``
        returns, so the following rules run against a save that may not have copied anything yet."""
        self.finish_saves()
        self.num_files += 1
        self.behind = {k: v.numpy().tobytes() for k, v in self.shadow.trainer.model.state_dict().items()}
        for pair, writer in zip((self.main, self.shadow), self.writers):
            writer.save(self.num_files, pair.trainer, {})

    @rule()
    def finish_saves(self):
        if self.behind is None:
            return
        folders = [writer.wait() for writer in self.writers]
        assert _saved_model(folders[0], self.template) == self.behind
        assert _saved_model(folders[1], self.template) == self.behind
        self.behind = None

    @rule()
    def export(self):
        main_dir, shadow_dir = self._paths()
        self.main.trainer.export_hf(main_dir)
        self.shadow.trainer.export_hf(shadow_dir)
        assert _same_files(main_dir, shadow_dir)

    @rule()
    def push_weights(self):
        self._both(lambda p: p.engine.load_weights(p.trainer.weights()))

    @rule(seed=st.integers(0, 5), greedy=st.booleans())
    def generate(self, seed, greedy):
        requests = [
            GenerationRequest([5 + i, 9, 11 + seed], SamplingParams(max_new_tokens=4, seed=seed + i, greedy=greedy))
            for i in range(3)
        ]
        main, shadow = self._both(lambda p: p.engine.generate(requests))
        assert main == shadow

    @rule()
    def eval(self):
        main, shadow = self._both(lambda p: self.evaluator.evaluate(p.engine))
        assert main == shadow

    @rule(name=COMPONENTS)
    def sleep(self, name):
        self.main.components[name].sleep()
        assert self.main.components[name].residency_state is State.ASLEEP

    @rule(name=COMPONENTS)
    def wake(self, name):
        self.main.components[name].wake()
        assert self.main.components[name].residency_state is State.AWAKE

    @rule(name=COMPONENTS)
    def probe(self, name):
        """Direct module access: our error when asleep, the shadow's exact output when awake."""
        inputs = torch.tensor([[5, 6, 7, 8]])
        main, shadow = self.main.components[name], self.shadow.components[name]
        if main.residency_state is State.ASLEEP:
            with pytest.raises(ReleasedMemoryError, match=f"{name} is asleep"):
                main.model(input_ids=inputs)
        else:
            with torch.no_grad():
                assert torch.equal(main.model(input_ids=inputs).logits, shadow.model(input_ids=inputs).logits)

    @invariant()
    def states_are_consistent(self):
        awake = []
        for name, component in self.main.components.items():
            residency = component.residency
            assert residency.state in (State.AWAKE, State.ASLEEP)
            # a save in flight: the writer's thread waits in the trainer's host-only wait_saved
            behind = name == "trainer" and self.behind is not None
            assert residency.current_operation() in ((None, "wait_saved") if behind else (None,))
            assert residency.in_flight() in ([], ["async checkpoint staging"] if behind else [])
            held = component.memory_report()
            if residency.state is State.AWAKE:
                awake.append(name)
                assert held == self.shadow.components[name].memory_report()
            else:
                assert sum(held.values()) == 0
        assert len(awake) <= 1, awake
        assert self.main.coordinator.awake_on("cpu") == awake
        assert self.main.trainer.version == self.shadow.trainer.version
        assert self.main.engine.policy_version == self.shadow.engine.policy_version


@pytest.fixture(scope="module")
def evaluator(toy_model_dir):
    from heron.models import load_tokenizer
    from heron.reward.scorer import RewardScorer
    from heron.rollout.prompt_format import PromptFormatter
    from heron.toy.addition import make_prompts

    return Evaluator(make_prompts(3, seed=1, max_digits=2), PromptFormatter(load_tokenizer(str(toy_model_dir))),
                     RewardScorer.from_name("exact_match"), max_new_tokens=4)


def _run(template, evaluator, max_examples: int, steps: int):
    run_state_machine_as_test(
        lambda: ColocatedPair(template, evaluator),
        settings=settings(max_examples=max_examples, stateful_step_count=steps, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck)),
    )


def test_random_operation_sequences(micro_template, evaluator):
    _run(micro_template, evaluator, max_examples=200, steps=6)


@pytest.mark.slow
def test_random_operation_sequences_long(micro_template, evaluator):
    """500 sequences of 20 steps in the slow tier, 10,000 in `make soak`."""
    _run(micro_template, evaluator, max_examples=trials("machine", slow=500, soak=10_000), steps=20)
