"""The training forward's entropy is computed outside autograd when only a metric reads it
(``Objective.entropy_in_loss`` false, ``entropy_grad=False``): the same values and the same
logprob gradients bit for bit, and no ``exp(log_softmax)`` [B, T, V] kept for the backward;
with ``algo.entropy_coef > 0`` the loss still differentiates it."""

from __future__ import annotations

import pytest
import torch

from heron.config.algo import AlgoConfig
from heron.trainer.logprobs import forward_logprobs
from heron.trainer.objectives import PolicyObjective, SFTObjective
from tests.unit.test_logprobs_chunked import _inputs, _wide_vocab_model
from tests.unit.test_packing import _trainer
from tests.unit.test_trainer import _rollout


def _saved_storage_bytes(fn):
    """(bytes of the distinct storages autograd saves for the backward while ``fn`` runs, its result)."""
    storages = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(storages.values()), out


@pytest.mark.parametrize("scored", [False, True])
def test_a_metric_entropy_keeps_no_vocabulary_tensor_for_the_backward(scored):
    model = _wide_vocab_model(vocab_size=2000)
    input_ids, mask = _inputs(model)
    positions = torch.zeros(input_ids.shape[0], input_ids.shape[1] - 1, dtype=torch.bool)
    positions[:, 7:] = True
    results = {}
    for grad in (True, False):
        model.zero_grad(set_to_none=True)
        saved, (logprobs, entropy) = _saved_storage_bytes(lambda: forward_logprobs(
            model, input_ids, mask, 0.9, with_entropy=True, scored=positions if scored else None, entropy_grad=grad))
        assert entropy.requires_grad == grad
        logprobs.sum().backward()
        results[grad] = (saved, logprobs.detach(), entropy.detach(), [p.grad.clone() for p in model.parameters()])
    (saved_g, lp_g, ent_g, grads_g), (saved_m, lp_m, ent_m, grads_m) = results[True], results[False]
    assert torch.equal(lp_m, lp_g) and torch.equal(ent_m, ent_g)
    assert all(torch.equal(a, b) for a, b in zip(grads_m, grads_g))
    rows = int(positions.sum()) if scored else input_ids.shape[0] * (input_ids.shape[1] - 1)
    assert saved_g - saved_m == rows * model.config.vocab_size * 4  # exp(log_softmax), float32


def test_only_an_entropy_bonus_differentiates_the_entropy(toy_model_dir):
    assert PolicyObjective(AlgoConfig(entropy_coef=0.01)).entropy_in_loss
    assert not PolicyObjective(AlgoConfig()).entropy_in_loss and not SFTObjective().entropy_in_loss
    _, _, batch = _rollout(toy_model_dir)
    updates = []
    for coef in (0.0, 1.0):
        trainer = _trainer(toy_model_dir, entropy_coef=coef, micro_batch_size=8)
        initial = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        metrics = trainer.train(batch)
        updates.append(torch.cat([(v - initial[k]).flatten() for k, v in trainer.model.state_dict().items()]))
        assert metrics["entropy"] > 0
    # the bonus's gradient moves the weights: an entropy computed outside autograd would leave
    # the update of coef 1 equal to coef 0's
    assert (updates[1] - updates[0]).norm() > 0.01 * updates[0].norm()
