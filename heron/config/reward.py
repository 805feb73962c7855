from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.config.base import check, doc


@dataclass(frozen=True)
class RemoteRewardConfig:
    """A reward model behind HTTP (reward.fn=remote): POST {prompt, response, label, prompt_id}
    (plus the row's other columns as ``metadata`` when ``send_metadata``) as JSON to ``url``,
    answer {"reward": number}."""

    url: str = doc("Endpoint of the reward server, http:// or https://, e.g. http://127.0.0.1:8000/score.", "")
    timeout_s: float = doc("Timeout of one HTTP request, in seconds.", 10.0)
    max_retries: int = doc("Retries after a failed request (connection error, timeout, HTTP 5xx).", 2)
    backoff_s: float = doc("Wait before the first retry, doubled each retry, in seconds.", 0.2)
    send_metadata: bool = doc(
        "Also send the row's other columns (Prompt.metadata, see data.metadata_keys); off by default, "
        "so columns the server has no need for never leave the machine.",
        False,
    )

    def __post_init__(self):
        if self.url:
            scheme, _, rest = self.url.partition("://")
            check(
                scheme in ("http", "https") and rest.strip("/") != "",
                f"reward.remote.url must be an http:// or https:// address with a host, got {self.url!r}",
            )
        check(self.timeout_s > 0, f"reward.remote.timeout_s must be > 0, got {self.timeout_s}")
        check(self.max_retries >= 0, f"reward.remote.max_retries must be >= 0, got {self.max_retries}")
        check(self.backoff_s >= 0, f"reward.remote.backoff_s must be >= 0, got {self.backoff_s}")


BUILTIN_REWARD_NAMES = ("exact_match", "numeric_match", "math", "remote")
# A hanging reward must not hang the run. One minute is far above a rule-based reward (math-verify
# on a long answer: seconds) and above one remote request with its retries at the defaults
# (3 x 10 s + backoff); raise it for slow batch-scope reward models.
DEFAULT_REWARD_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RewardConfig:
    """How samples are scored, and what happens when scoring fails."""

    fn: str = doc(
        "Reward function: a built-in (exact_match, numeric_match, math, remote) or a hook path module:function.",
        "exact_match",
    )
    scope: Literal["sample", "group", "batch"] = doc(
        "What one call of a hook reward.fn scores: one response, one group, or the whole batch (built-ins: sample).",
        "sample",
    )
    on_error: Literal["fail", "penalize"] = doc(
        "A reward call that raises or times out: fail stops the run; penalize gives failure_value, counts and logs it.",
        "penalize",
    )
    failure_value: float = doc("Reward of a sample whose reward call failed (reward.on_error=penalize).", 0.0)
    timeout_s: float = doc(
        "Longest one reward call may take, in seconds (a call covers one sample, group or batch, "
        "see reward.scope); past it the call counts as failed (reward.on_error). 0 = no limit.",
        DEFAULT_REWARD_TIMEOUT_S,
    )
    max_concurrency: int = doc("Reward calls in flight at once (threads for sync functions, tasks for async).", 1)
    processes: int = doc(
        "Worker processes for a sync reward function (0: threads in this process, reward.max_concurrency of them). "
        "For CPU-bound rewards such as math-verify's symbolic checks, which threads cannot run in parallel; "
        "a call past reward.timeout_s is killed with its worker (heron.reward.process_pool).",
        0,
    )
    remote: RemoteRewardConfig = doc("The HTTP reward model used by reward.fn=remote.", factory=RemoteRewardConfig)
    overlong_buffer: int = doc(
        "DAPO's overlong reward shaping: a response longer than rollout.max_new_tokens - overlong_buffer tokens loses "
        "overlong_penalty * (excess / overlong_buffer) of reward, linearly up to the limit; 0 disables it.",
        0,
    )
    overlong_penalty: float = doc("The largest overlong penalty (DAPO: 1), reached at rollout.max_new_tokens.", 1.0)

    def __post_init__(self):
        check(self.timeout_s >= 0, f"reward.timeout_s must be >= 0, got {self.timeout_s}")
        check(self.overlong_buffer >= 0, f"reward.overlong_buffer must be >= 0, got {self.overlong_buffer}")
        check(self.overlong_penalty >= 0, f"reward.overlong_penalty must be >= 0, got {self.overlong_penalty}")
        check(self.max_concurrency >= 1, f"reward.max_concurrency must be >= 1, got {self.max_concurrency}")
        check(self.processes >= 0, f"reward.processes must be >= 0 (0: threads), got {self.processes}")
        check(
            self.fn not in BUILTIN_REWARD_NAMES or self.scope == "sample",
            f"reward.scope={self.scope} applies to hook rewards only; the built-in reward.fn={self.fn} scores per sample",
        )
        check(self.fn != "remote" or self.remote.url != "", "reward.fn=remote needs reward.remote.url=http://127.0.0.1:<port>/...")
