import torch

from heron.records import Sample
from heron.trainer.batch import collate


def _sample(prompt, response, adv, mask=None):
    return Sample(
        rollout_id=2, prompt_id=0, sample_index=len(prompt), policy_version=1,
        prompt_tokens=prompt, response_tokens=response, response_logprobs=[-0.5] * len(response),
        loss_mask=mask or [1] * len(response), response_text="", finish_reason="stop", advantage=adv,
    )


def test_collate_aligns_response_tokens_with_predicting_positions():
    batch = collate([_sample([5, 6], [7, 8, 9], 1.0), _sample([5], [7], -1.0, [0])], pad_token_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 7, 0, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    # position t predicts token t+1: response of row 0 starts at position 2, predicted from 1
    assert batch.loss_mask.tolist() == [[0, 1, 1, 1], [0, 0, 0, 0]]
    assert batch.old_logprobs.tolist() == [[0, -0.5, -0.5, -0.5], [-0.5, 0, 0, 0]]
    assert batch.advantages.tolist() == [1.0, -1.0]
    assert batch.rollout_id == 2 and batch.sample_ids[0] == "r2/p0/s2"


def test_select_and_chunks_keep_rows_together():
    batch = collate([_sample([1], [2], float(i)) for i in range(5)], pad_token_id=0)
    chunks = list(batch.chunks(2))
    assert [len(c) for c in chunks] == [2, 2, 1]
    assert torch.cat([c.advantages for c in chunks]).tolist() == [0, 1, 2, 3, 4]
