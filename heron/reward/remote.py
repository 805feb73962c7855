"""A reward model behind HTTP, used as the per-sample reward ``reward.fn=remote``.

Protocol: ``POST <url>`` with JSON ``{"prompt", "response", "label", "prompt_id"}``, plus
``"metadata"`` (the row's other columns) only with ``reward.remote.send_metadata=true``: a
data column the server has no need for (an API key, a user id) never leaves the machine by
default. The server answers ``{"reward": <number>}``; a string, null or list is a malformed
answer, not coerced. A connection error, a timeout or an HTTP 5xx is
retried ``max_retries`` times with exponential backoff; an HTTP 4xx (the request is wrong)
and a malformed answer are not. Concurrency (``reward.max_concurrency``) and the overall
per-call limit (``reward.timeout_s``) are the reward scorer's, like for any reward function.
Plain ``urllib``: no client library, no session state shared between threads.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from heron.config.reward import RemoteRewardConfig
from heron.records import Prompt


class RemoteRewardError(RuntimeError):
    """The reward server could not score a sample (after retries)."""


class RemoteReward:
    def __init__(self, cfg: RemoteRewardConfig):
        self.cfg = cfg

    def __call__(self, prompt: Prompt, response: str) -> float:
        fields = {"prompt": prompt.text, "response": response, "label": prompt.label, "prompt_id": prompt.prompt_id}
        if self.cfg.send_metadata:
            fields["metadata"] = prompt.metadata
        body = json.dumps(fields, default=str).encode()
        delay = self.cfg.backoff_s
        for attempt in range(self.cfg.max_retries + 1):
            try:
                return self._post(body)
            except _Retryable as e:
                if attempt == self.cfg.max_retries:
                    raise RemoteRewardError(
                        f"reward server {self.cfg.url} failed {attempt + 1} times, last: {e}"
                    ) from None
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def _post(self, body: bytes) -> float:
        request = urllib.request.Request(self.cfg.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.cfg.timeout_s) as answer:
                payload = answer.read()
        except urllib.error.HTTPError as e:
            if e.code >= 500:
                raise _Retryable(f"HTTP {e.code}") from None
            raise RemoteRewardError(f"reward server {self.cfg.url} answered HTTP {e.code}: {e.reason}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            raise _Retryable(f"{type(e).__name__}: {getattr(e, 'reason', e)}") from None
        try:
            reward = json.loads(payload)["reward"]
        except (ValueError, KeyError, TypeError):
            reward = None
        if not isinstance(reward, (int, float)):  # bool is an int: true/false score 1/0
            raise RemoteRewardError(
                f"reward server {self.cfg.url} answered {payload[:100]!r}, expected JSON {{\"reward\": <number>}}"
            )
        return float(reward)


class _Retryable(Exception):
    pass
