from heron.data.lookahead import LookaheadSampler
from heron.data.sampler import EpochSampler


def test_reserved_prompts_come_back_in_order_and_the_stream_is_unchanged():
    plain = EpochSampler(list(range(10)), seed=3)
    ahead = LookaheadSampler(EpochSampler(list(range(10)), seed=3))
    expected = [plain.take(3) for _ in range(4)]
    got = [ahead.take(3)]
    reserved = ahead.reserve(3)
    state = ahead.state_dict()
    assert ahead.take(3) == reserved
    got += [reserved, ahead.take(3), ahead.take(3)]
    assert got == expected
    # a checkpoint taken while a rollout is in flight resumes at that rollout's prompts
    resumed = LookaheadSampler(EpochSampler(list(range(10)), seed=3))
    resumed.load_state_dict(state)
    assert resumed.take(3) == expected[1]
