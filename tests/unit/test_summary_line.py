"""The one-line summary per rollout (tracking.summary): what a user watching the run reads."""

from heron.tracking.tracker import summary_line


def test_the_summary_line_names_reward_time_throughput_and_eval():
    record = {"rollout_id": 7, "reward/mean": 0.5, "train/loss": -0.25, "response/length_mean": 3.0,
              "time/rollout_s": 0.5, "perf/samples_per_s": 256.04, "eval/accuracy": 0.875}
    line = summary_line(record)
    assert line == ("rollout    7 | reward 0.500 | loss -0.2500 | kl 0.0000 | clip 0.000 | entropy 0.000 | len 3.0 "
                    "| 0.50s | 256.0 samples/s | eval 0.875")


def test_a_record_without_throughput_or_eval_still_summarises():
    line = summary_line({"rollout_id": 0, "reward/mean": 0.0, "time/rollout_s": 1.0})
    assert line.endswith("| 1.00s") and "samples/s" not in line and "eval" not in line
