"""The shared-prompt layout of the training forward (heron.trainer.shared_prompts): the packing by a
hand-worked example, when it is declined, and against one padded row per sample -- logprobs and
entropies within the summation-order bound for every architecture it takes (fp32, and bf16
autocast within the bf16 bound of fp32), the trainer's update and metrics within the derived
bound under every loss aggregation (tests/tolerance.py, rule 2)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from heron.algo.catalog import LOSS_AGGREGATIONS
from heron.trainer.logprobs import forward_logprobs
from heron.trainer.precision import forward_context
from heron.trainer.model_flops import ForwardCost, forward_cost
from heron.trainer.shared_prompts import plan, unsupported_reason
from tests.tolerance import assert_bf16_logprobs_close, assert_logprobs_close, reduction_length
from tests.unit.test_lean_decoder import ARCHITECTURES, _model_dir
from tests.unit.test_packing import _trainer, assert_same_update
from tests.unit.test_trainer import _rollout

TOKENS = ForwardCost(per_token=1.0, per_pair=0.0)  # cost = tokens: shared whenever it packs fewer


def _hand_batch():
    """Rows 0, 1 share the prompt [5, 6, 7]; rows 2, 3 the one-token prompt [11]; L = 5."""
    input_ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 10, 0], [11, 12, 13, 0, 0], [11, 14, 0, 0, 0]])
    attention_mask = (torch.arange(5) < torch.tensor([5, 4, 3, 2])[:, None]).long()
    return input_ids, attention_mask, torch.tensor([3, 3, 1, 1])


def test_layout_by_hand():
    layout = plan(*_hand_batch(), TOKENS)
    # group A: prompt[:-1] = [5, 6], then [7, 8] and [7] (each answer's last token predicts nothing: not run);
    # group B: nothing shared, [11, 12] and [11]
    assert layout.input_ids.tolist() == [[5, 6, 7, 8, 7], [11, 12, 11, 0, 0]]
    assert layout.position_ids.tolist() == [[0, 1, 2, 3, 2], [0, 1, 0, 0, 0]]
    assert layout.targets.tolist() == [[0, 0, 8, 9, 10], [12, 13, 14, 0, 0]]
    mask = layout.dense_mask()[:, 0].long().tolist()
    assert mask[0][2] == [1, 1, 1, 0, 0]  # answer 1's first token: the shared part and itself
    assert mask[0][4] == [1, 1, 0, 0, 1]  # answer 2 never sees answer 1
    assert mask[0][1] == [1, 1, 0, 0, 0]  # the shared part is causal among itself
    assert mask[1][1] == [1, 1, 0, 0, 0]
    assert mask[1][2] == [0, 0, 1, 0, 0]  # the second segment sees itself only (nothing shared)
    assert mask[1][3] == [0, 0, 0, 1, 0]  # padding attends to itself only
    # packed outputs [G, S] = [2, 5]: each answer token's predictor lands where the padded row has it
    packed = torch.arange(10, dtype=torch.float32).view(2, 5) + 100
    assert layout.gather(packed).tolist() == [
        [0, 0, 102, 103], [0, 0, 104, 0], [105, 106, 0, 0], [107, 0, 0, 0],
    ]
    assert layout.targets.flatten()[layout.source[layout.valid]].tolist() == [8, 9, 10, 12, 13, 14]


def test_a_row_without_an_answer_keeps_a_segment_that_predicts_nothing():
    input_ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])  # row 1: the prompt alone
    layout = plan(input_ids, (input_ids > 0).long(), torch.tensor([3, 3]), TOKENS)
    assert layout.input_ids.tolist() == [[5, 6, 7, 8, 7]]
    assert layout.valid.tolist() == [[False, False, True, True], [False, False, False, False]]
    assert layout.gather(torch.arange(5.0).view(1, 5) + 100).tolist() == [[0, 0, 102, 103], [0, 0, 0, 0]]


def test_declined_when_nothing_is_shared_or_it_costs_more():
    input_ids, attention_mask, prompts = _hand_batch()
    assert plan(input_ids[[0, 2]], attention_mask[[0, 2]], prompts[[0, 2]], TOKENS) is None  # distinct prompts
    # one-token prompt: the packed row [5 8 9 10 5 12 13 14] holds as many tokens as the two rows' 4 positions
    # each (the last not run), and its segments' attention as many pairs (0 shared + 2 x 4 x 4 against
    # 2 x 4^2): nothing saved
    long_answers = torch.tensor([[5, 8, 9, 10, 11], [5, 12, 13, 14, 15]])
    ones, one_token = torch.ones(2, 5, dtype=torch.long), torch.tensor([1, 1])
    assert plan(long_answers, ones, one_token, ForwardCost(per_token=1.0, per_pair=1.0)) is None
    # the hand batch: 2 x 5 = 10 tokens and G p^2 + N a (p + a) = 2 x 4 + 4 x 2 x 4 = 40 pairs, against
    # 4 x 4 = 16 tokens and 4 x 16 = 64 pairs: 50 against 80
    assert plan(input_ids, attention_mask, prompts, ForwardCost(per_token=1.0, per_pair=1.0)) is not None
    # the margin (MIN_SAVING = 10 %): two 10-token rows (9 positions each run) sharing 2 tokens pack into
    # 1 + 8 + 8 = 17 tokens (5.6 % saved: declined); sharing 3, into 2 + 7 + 7 = 16 (11 %: shared)
    rows = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [5, 6, 7, 15, 16, 17, 18, 19, 20, 21]])
    full = torch.ones(2, 10, dtype=torch.long)
    assert plan(rows, full, torch.tensor([2, 2]), TOKENS) is None
    assert plan(rows, full, torch.tensor([3, 3]), TOKENS) is not None
    assert plan(input_ids, attention_mask, torch.tensor([3, 3, 0, 0]), TOKENS) is None  # an empty prompt


def test_unsupported_models_are_named(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    assert "model type 'gpt2'" in unsupported_reason(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2)))
    eager = AutoModelForCausalLM.from_pretrained(_model_dir(tmp_path_factory, "qwen3"), attn_implementation="eager")
    assert "attention implementation 'eager'" in unsupported_reason(eager)
    sdpa = AutoModelForCausalLM.from_pretrained(_model_dir(tmp_path_factory, "qwen3"))
    assert unsupported_reason(sdpa) is None
    from heron.config.lora import LoraConfig
    from heron.lora import apply_lora

    lora = apply_lora(AutoModelForCausalLM.from_pretrained(_model_dir(tmp_path_factory, "qwen3")), LoraConfig(enabled=True))
    assert unsupported_reason(lora) is None  # through the PeftModel wrapper
    attention = sdpa.model.layers[1].self_attn  # an attention whose forward drops extra keywords
    attention.forward = lambda hidden_states, position_embeddings, attention_mask=None, cache=None: None
    assert "forward takes no keyword arguments to pass to attention" in unsupported_reason(sdpa)
    sdpa = AutoModelForCausalLM.from_pretrained(_model_dir(tmp_path_factory, "qwen3"))
    cost = forward_cost(sdpa)
    config = sdpa.config
    assert cost.per_pair == 4 * config.num_hidden_layers * config.num_attention_heads * config.head_dim


def _grouped_batch(vocab: int, prompts=((5, 6, 7, 8, 9, 10), (11, 12), (13, 14, 15, 16)), samples: int = 3):
    """Each prompt with ``samples`` answers of different lengths, right-padded, groups interleaved
    with a row of another prompt in between (groups need not be contiguous)."""
    g = torch.Generator().manual_seed(0)
    rows = [(p, torch.randint(3, vocab, (4 + 3 * s + len(p) % 3,), generator=g).tolist()) for s in range(samples) for p in prompts]
    length = max(len(p) + len(a) for p, a in rows)
    input_ids = torch.zeros(len(rows), length, dtype=torch.long)
    attention_mask = torch.zeros(len(rows), length, dtype=torch.long)
    for i, (p, a) in enumerate(rows):
        input_ids[i, : len(p) + len(a)] = torch.tensor(list(p) + a)
        attention_mask[i, : len(p) + len(a)] = 1
    answer = torch.zeros(len(rows), length - 1)  # [B, L-1]: positions that predict an answer token
    for i, (p, a) in enumerate(rows):
        answer[i, len(p) - 1 : len(p) - 1 + len(a)] = 1
    return input_ids, attention_mask, torch.tensor([len(p) for p, _ in rows]), answer


def _mistral_dir(tmp_path_factory):
    """A random Mistral model without a sliding window (the shared layout's fourth model type)."""
    from transformers import MistralConfig

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, sliding_window=None, pad_token_id=0)
    folder = tmp_path_factory.mktemp("mistral")
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


@pytest.mark.portability
@pytest.mark.parametrize("kind", ARCHITECTURES + ["mistral"])
def test_shared_logprobs_entropy_and_gradients_match_padded_rows(tmp_path_factory, kind):
    folder = _mistral_dir(tmp_path_factory) if kind == "mistral" else _model_dir(tmp_path_factory, kind)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    input_ids, attention_mask, prompts, answer = _grouped_batch(model.config.vocab_size)
    layout = plan(input_ids, attention_mask, prompts, forward_cost(model))
    assert layout is not None and layout.input_ids.shape[0] == 3
    results = {}
    for name, lay in (("padded", None), ("shared", layout)):
        model.zero_grad(set_to_none=True)
        logprobs, entropy = forward_logprobs(model, input_ids, attention_mask, 0.9, with_entropy=True, layout=lay)
        ((logprobs + 0.1 * entropy) * answer).sum().backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        results[name] = (logprobs * answer, entropy * answer, grads)
    (lp_e, ent_e, grad_e), (lp_a, ent_a, grad_a) = results["padded"], results["shared"]
    n = reduction_length(model.config, tokens=input_ids.numel())
    log_vocab = math.log(model.config.vocab_size)
    assert_logprobs_close(lp_a, lp_e, n=n, log_vocab=log_vocab)
    assert_logprobs_close(ent_a, ent_e, n=n, log_vocab=log_vocab)
    assert bool((lp_a[answer == 0] == 0).all())
    # norm-wise (rule 2): each gradient is a chain of <= n sums; both runs' round-off adds
    from tests.tolerance import gamma

    assert (grad_a.double() - grad_e.double()).norm() <= 2 * gamma(n) * grad_e.double().norm() * (1 + log_vocab)


@pytest.mark.portability
def test_shared_bf16_autocast_is_within_the_bf16_bound(tmp_path_factory):
    model = AutoModelForCausalLM.from_pretrained(_model_dir(tmp_path_factory, "qwen3"), dtype=torch.float32)
    input_ids, attention_mask, prompts, answer = _grouped_batch(model.config.vocab_size)
    layout = plan(input_ids, attention_mask, prompts, forward_cost(model))
    with torch.no_grad():
        exact, _ = forward_logprobs(model, input_ids, attention_mask)
        bf16, _ = forward_logprobs(model, input_ids, attention_mask, forward_context=forward_context("bf16", model), layout=layout)
    assert_bf16_logprobs_close(bf16[answer > 0], exact[answer > 0], model.config)


@pytest.mark.portability
def test_shared_with_a_chunked_head(tmp_path_factory):
    model = AutoModelForCausalLM.from_pretrained(_model_dir(tmp_path_factory, "llama-bias"), dtype=torch.float32)
    input_ids, attention_mask, prompts, answer = _grouped_batch(model.config.vocab_size)
    layout = plan(input_ids, attention_mask, prompts, forward_cost(model))
    expected, _ = forward_logprobs(model, input_ids, attention_mask)
    actual, entropy = forward_logprobs(model, input_ids, attention_mask, with_entropy=True, chunk_size=5, layout=layout)
    n = reduction_length(model.config, tokens=input_ids.numel())
    assert_logprobs_close(actual * answer, expected * answer, n=n, log_vocab=math.log(model.config.vocab_size))
    assert entropy.shape == expected.shape


def _shared_applies(trainer, batch) -> bool:
    return trainer._shared_layout(batch) is not None


@pytest.mark.portability
@pytest.mark.parametrize("loss_agg", LOSS_AGGREGATIONS)
def test_shared_update_equals_the_padded_update(toy_model_dir, loss_agg):
    _, _, batch = _rollout(toy_model_dir)
    shared = _trainer(toy_model_dir, loss_agg, micro_batch_size=8)
    padded = _trainer(toy_model_dir, loss_agg, micro_batch_size=8, share_prompts=False)
    assert _shared_applies(shared, batch.select(slice(0, 8))) and not _shared_applies(padded, batch)
    assert_same_update(shared, padded, batch)


@pytest.mark.portability
def test_shared_no_grad_logprobs_land_in_their_rows(toy_model_dir):
    """The separate pi_old forward (compute_logprobs) with shared prompts: every row's loss
    positions within the bound of the padded forward, 0 elsewhere."""
    _, _, batch = _rollout(toy_model_dir)
    shared = _trainer(toy_model_dir, micro_batch_size=16)
    padded = _trainer(toy_model_dir, micro_batch_size=16, share_prompts=False)
    actual, expected = shared.compute_logprobs(batch), padded.compute_logprobs(batch)
    assert _shared_applies(shared, batch) and bool((actual[batch.loss_mask == 0] == 0).all())
    n = reduction_length(shared.model.config, tokens=batch.input_ids.numel())
    assert_logprobs_close(actual, expected, n=n, log_vocab=math.log(shared.model.config.vocab_size))


def test_batches_without_prompt_lengths_and_off_use_padded_rows(toy_model_dir):
    _, _, batch = _rollout(toy_model_dir)
    trainer = _trainer(toy_model_dir, micro_batch_size=16)
    assert _shared_applies(trainer, batch)
    assert not _shared_applies(trainer, replace(batch, prompt_lengths=None))


def test_shared_prompts_under_activation_checkpointing_are_bit_identical(toy_model_dir):
    """train.gradient_checkpointing recomputes each layer in the backward with the packed row's
    mask and position ids (transformers passes them to every layer): the same update bit for bit."""
    from heron.trainer.activation_checkpointing import enable_activation_checkpointing

    _, _, batch = _rollout(toy_model_dir)
    plain = _trainer(toy_model_dir, micro_batch_size=16)
    checkpointed = _trainer(toy_model_dir, micro_batch_size=16)
    enable_activation_checkpointing(checkpointed.model)
    assert _shared_applies(checkpointed, batch.select(slice(0, 16)))
    assert plain.train(batch) == checkpointed.train(batch)
    for (name, a), b in zip(plain.model.state_dict().items(), checkpointed.model.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.portability
def test_token_budget_packing_keeps_prompts_together_and_gives_the_padded_update(toy_model_dir):
    """train.max_tokens_per_micro_batch sorts rows by length, which scatters a prompt's samples;
    with shared prompts it takes them one after the other (heron.trainer.packing.pack_rows), so
    fewer (micro-batch, prompt) pairs remain, and the update is still the padded rows'."""
    from heron.trainer.shared_prompts import prompt_ids

    _, _, batch = _rollout(toy_model_dir)
    budget = 6 * batch.input_ids.shape[1]
    shared = _trainer(toy_model_dir, max_tokens_per_micro_batch=budget)
    padded = _trainer(toy_model_dir, max_tokens_per_micro_batch=budget, share_prompts=False)
    ids = prompt_ids(batch.input_ids, batch.prompt_lengths)

    def pairs(trainer) -> int:
        return sum(len({ids[r] for r in part.rows.tolist()}) for part in trainer._micro_batches(batch))

    assert len(set(ids)) == 4 and pairs(shared) < pairs(padded), (pairs(shared), pairs(padded))
    assert any(_shared_applies(shared, part.batch) for part in shared._micro_batches(batch))
    assert_same_update(shared, padded, batch)


def test_shared_shape_is_the_shape_plan_builds(toy_model_dir):
    """Packing asks shared_shape what plan would build without building it: on every subset of
    rows tried and under three cost models, the same decision and the same [G, S]."""
    from heron.trainer.packing import cut_length
    from heron.trainer.shared_prompts import prompt_ids, shared_shape

    _, _, batch = _rollout(toy_model_dir)
    lengths, ids = batch.attention_mask.sum(-1).tolist(), prompt_ids(batch.input_ids, batch.prompt_lengths)
    generator = torch.Generator().manual_seed(0)
    decisions = set()
    for cost in (TOKENS, ForwardCost(per_token=1.0, per_pair=1.0), forward_cost(_trainer(toy_model_dir).model)):
        for size in (1, 2, 3, 5, 8, 16):
            for _ in range(6):
                rows = sorted(torch.randperm(len(batch), generator=generator)[:size].tolist())
                length = cut_length([lengths[r] for r in rows], batch.input_ids.shape[1])
                part = batch.take(rows, length)
                layout = plan(part.input_ids, part.attention_mask, part.prompt_lengths, cost)
                shape = shared_shape([lengths[r] for r in rows], part.prompt_lengths.tolist(), [ids[r] for r in rows],
                                     length, cost)
                assert shape == (None if layout is None else tuple(layout.input_ids.shape)), rows
                decisions.add(shape is None)
    assert decisions == {True, False}


@pytest.mark.portability
def test_token_budget_counts_the_shared_layout(toy_model_dir):
    """With shared prompts the budget counts the tokens the forward holds (packed rows x their
    length), not the padded rows': every micro-batch's forward fits the budget, fewer micro-batches
    hold the rollout than with padded rows, and the update is still the padded rows'."""
    from heron.trainer.packing import micro_batches

    _, _, batch = _rollout(toy_model_dir)
    budget = 6 * batch.input_ids.shape[1]
    shared = _trainer(toy_model_dir, max_tokens_per_micro_batch=budget)
    padded = _trainer(toy_model_dir, max_tokens_per_micro_batch=budget, share_prompts=False)

    def held(trainer, part) -> int:
        layout = trainer._shared_layout(part.batch)
        return part.batch.input_ids.numel() if layout is None else layout.input_ids.numel()

    shared_parts, padded_parts = shared._micro_batches(batch), padded._micro_batches(batch)
    assert all(held(shared, part) <= budget for part in shared_parts)
    assert all(_shared_applies(shared, part.batch) for part in shared_parts)
    assert len(shared_parts) < len(padded_parts), (len(shared_parts), len(padded_parts))
    # a rank that must run more forwards than it packed (data parallel) cuts its micro-batches
    # where both parts still fit
    more = micro_batches(batch, 4, budget, count=lambda n: n + 3, share_cost=shared._share_cost)
    assert len(more) == len(shared_parts) + 3 and all(held(shared, part) <= budget for part in more)
    assert_same_update(shared, padded, batch)
