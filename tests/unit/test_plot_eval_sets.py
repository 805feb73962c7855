"""The reward plot draws every eval set (eval/accuracy and eval/<name>/accuracy), including
runs that have only named sets."""

from heron.tracking.plot import plot_reward_curve

METRICS = [{"rollout_id": 0, "reward/mean": 0.1}, {"rollout_id": 1, "reward/mean": 0.3}]


def test_plot_with_default_and_named_sets(tmp_path):
    evals = [{"rollout_id": -1, "eval/accuracy": 0.1, "eval/hard/accuracy": 0.0}, {"rollout_id": 1, "eval/hard/accuracy": 0.2}]
    assert plot_reward_curve(METRICS, evals, tmp_path / "a.png").stat().st_size > 0


def test_plot_with_only_named_sets(tmp_path):
    evals = [{"rollout_id": -1, "eval/hard/accuracy": 0.0, "eval/hard/num_prompts": 5.0}]
    assert plot_reward_curve(METRICS, evals, tmp_path / "b.png").stat().st_size > 0
