"""The remote reward model against a real HTTP server on 127.0.0.1 started by the test:
the request body, retries after 5xx, no retry on 4xx, timeouts, the concurrency limit, and a
dead server isolated per sample."""

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from heron.config.reward import RemoteRewardConfig, RewardConfig
from heron.records import Prompt
from heron.reward.remote import RemoteReward, RemoteRewardError
from heron.reward.scorer import RewardScorer
from tests.concurrency_probe import ConcurrencyProbe
from tests.tolerance import HANG_S


class RewardServer:
    """Scores {"response"} == {"label"} as 1.0; behaviour per response text:
    "fail-once" -> HTTP 503 on its first request; "bad" -> HTTP 400; "slow" -> no answer until
    ``release`` is set. ``probe`` (if set) counts the requests in flight."""

    def __init__(self, fixed_answer: bytes | None = None):
        self.requests: list[dict] = []
        self.fixed_answer = fixed_answer  # answer every request with these bytes (HTTP 200)
        self.probe: ConcurrencyProbe | None = None
        self.release = threading.Event()
        self.lock = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(body)
                    server.lock.notify_all()
                    seen = sum(r["response"] == body["response"] for r in server.requests)
                # counted out before answering: once the client has the answer it may send the
                # next request, which must not overlap this one in the count
                with server.probe or contextlib.nullcontext():
                    code, payload = self._decide(body, seen)
                self._answer(code, payload)

            def _decide(self, body, seen):
                if server.fixed_answer is not None:
                    return 200, server.fixed_answer
                if body["response"] == "slow":
                    server.release.wait(HANG_S)
                if body["response"] == "fail-once" and seen == 1:
                    return 503, b"busy"
                if body["response"] == "bad":
                    return 400, b"bad request"
                reward = 1.0 if body["response"] == body["label"] else 0.0
                return 200, json.dumps({"reward": reward}).encode()

            def _answer(self, code, payload):
                self.send_response(code)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/score"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def wait_for_requests(self, response: str, count: int) -> int:
        """Waits (at most HANG_S) until ``count`` requests for ``response`` arrived; returns how many did."""
        with self.lock:
            self.lock.wait_for(lambda: self.count(response) >= count, HANG_S)
            return self.count(response)

    def count(self, response: str) -> int:
        return sum(r["response"] == response for r in self.requests)

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = RewardServer()
    yield s
    s.close()


PROMPT = Prompt(prompt_id=3, text="1+1=", label="2", metadata={"level": 1, "secret_api_key": "sk-do-not-send"})


def test_scores_and_sends_prompt_response_label_but_no_other_column(server):
    reward = RemoteReward(RemoteRewardConfig(url=server.url))
    assert reward(PROMPT, "2") == 1.0 and reward(PROMPT, "3") == 0.0
    assert server.requests[0] == {"prompt": "1+1=", "response": "2", "label": "2", "prompt_id": 3}
    assert "sk-do-not-send" not in json.dumps(server.requests)


def test_sends_metadata_only_when_asked(server):
    reward = RemoteReward(RemoteRewardConfig(url=server.url, send_metadata=True))
    assert reward(PROMPT, "2") == 1.0
    assert server.requests[0]["metadata"] == {"level": 1, "secret_api_key": "sk-do-not-send"}


@pytest.mark.parametrize("answer", [b'{"reward": "1.0"}', b'{"reward": null}', b'{"reward": [1.0]}', b'"1.0"'])
def test_an_answer_that_is_not_a_number_is_an_error_not_coerced(answer):
    server = RewardServer(fixed_answer=answer)
    try:
        reward = RemoteReward(RemoteRewardConfig(url=server.url, max_retries=0))
        with pytest.raises(RemoteRewardError, match="expected JSON"):
            reward(PROMPT, "2")
    finally:
        server.close()


def test_retries_after_5xx_but_not_after_4xx(server):
    reward = RemoteReward(RemoteRewardConfig(url=server.url, max_retries=2, backoff_s=0.01))
    assert reward(PROMPT, "fail-once") == 0.0
    assert sum(r["response"] == "fail-once" for r in server.requests) == 2
    with pytest.raises(RemoteRewardError, match="answered HTTP 400"):
        reward(PROMPT, "bad")
    assert sum(r["response"] == "bad" for r in server.requests) == 1


@pytest.mark.portability
def test_request_timeout_is_retried_then_reported(server):
    reward = RemoteReward(RemoteRewardConfig(url=server.url, timeout_s=0.3, max_retries=1, backoff_s=0.01))
    with pytest.raises(RemoteRewardError, match="failed 2 times"):
        reward(PROMPT, "slow")  # the server never answers: only the client's timeout ends each try
    assert server.wait_for_requests("slow", 2) == 2  # the timed-out request was sent again, once


@pytest.mark.portability
def test_concurrency_limit_and_failure_isolation_in_a_batch(server):
    cfg = RewardConfig(fn="remote", remote=RemoteRewardConfig(url=server.url, max_retries=0), max_concurrency=3, failure_value=-1.0)
    scorer = RewardScorer.from_config(cfg)
    server.probe = ConcurrencyProbe(expected=3, total=10)
    prompts = [PROMPT] * 10
    responses = ["2"] * 4 + ["bad"] + ["3"] * 5
    scores = scorer.score_responses(prompts, responses, [f"s{i}" for i in range(10)])
    assert scores.rewards == [1.0] * 4 + [-1.0] + [0.0] * 5
    assert scores.num_errors == 1
    assert not server.probe.timed_out, "fewer than 3 requests were ever in flight at once"
    assert server.probe.max_in_flight == 3


def test_dead_server_is_a_per_sample_failure():
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = RewardConfig(fn="remote", remote=RemoteRewardConfig(url=f"http://127.0.0.1:{port}/", max_retries=1, backoff_s=0.01))
    scorer = RewardScorer.from_config(cfg)
    scores = scorer.score_responses([PROMPT], ["2"], ["s0"])
    assert scores.rewards == [0.0] and scores.num_errors == 1


def test_remote_needs_a_url():
    from heron.config.base import ConfigError

    with pytest.raises(ConfigError, match="reward.fn=remote needs reward.remote.url"):
        RewardConfig(fn="remote")
