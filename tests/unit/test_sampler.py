from heron.data.sampler import EpochSampler


def test_epochs_cover_every_item_once_and_reshuffle():
    s = EpochSampler(list(range(10)), seed=3)
    first, second = s.take(10), s.take(10)
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second  # a new permutation per epoch
    assert s.state_dict() == {"epoch": 1, "cursor": 10}


def test_resume_from_state_gives_the_same_stream():
    straight = EpochSampler(list(range(7)), seed=1)
    expected = straight.take(5) + straight.take(12)
    a = EpochSampler(list(range(7)), seed=1)
    head = a.take(5)
    b = EpochSampler(list(range(7)), seed=1)
    b.load_state_dict(a.state_dict())
    assert head + b.take(12) == expected


def test_no_shuffle_keeps_file_order():
    assert EpochSampler(list("abc"), seed=0, shuffle=False).take(4) == ["a", "b", "c", "a"]
