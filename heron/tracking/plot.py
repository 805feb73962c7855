"""The reward curve PNG written at the end of a run (atomically: whole or not at all)."""

from __future__ import annotations

from pathlib import Path

from heron.atomic_file import atomic_path


def plot_reward_curve(metrics: list[dict], evals: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [m["rollout_id"] for m in metrics]
    ax.plot(xs, [m["reward/mean"] for m in metrics], label="train reward (mean)", color="tab:blue")
    keys = sorted({k for e in evals for k in e if k.endswith("accuracy")})  # eval/accuracy, eval/<set>/accuracy
    colors = ["tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:olive"]
    for i, key in enumerate(keys):
        points = [(e["rollout_id"], e[key]) for e in evals if key in e]
        name = key[len("eval/"):-len("accuracy")].strip("/")
        label = f"held-out accuracy{f' ({name})' if name else ''} (greedy)"
        ax.plot(*zip(*points), "o-", label=label, color=colors[i % len(colors)])
    ax.set_xlabel("rollout")
    ax.set_ylabel("reward / accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    try:
        with atomic_path(out) as temp:  # a failed write leaves the previous plot, never a partial one
            fig.savefig(temp, dpi=100, format="png")
    finally:
        plt.close(fig)
    return Path(out)
