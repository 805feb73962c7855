"""``ServerClient``: JSON over HTTP to an engine server heron started, with a deadline per call.

Every failure becomes one line naming the server: a refused or dropped connection first checks
whether the process has exited (then ``ServerDiedError`` with its exit code and log file), a
call past its deadline says which call and how long, an HTTP error carries the server's reply.
Connections are pooled (one ``requests.Session``, sized for the concurrent requests of a batch).
"""

from __future__ import annotations

from typing import Any

import requests

from heron.rollout.server.errors import EngineServerError
from heron.rollout.server.process import ServerProcess


class ServerClient:
    def __init__(self, server: ServerProcess, base_url: str, timeout_s: float, pool_size: int = 64):
        self.server = server
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=max(1, pool_size))
        self.session.mount("http://", adapter)

    def post(self, path: str, payload: dict[str, Any] | None = None, *, during: str, params: dict | None = None) -> Any:
        return self._call("POST", path, during, json=payload, params=params)

    def get(self, path: str, *, during: str) -> Any:
        return self._call("GET", path, during)

    def _call(self, method: str, path: str, during: str, **kwargs) -> Any:
        self.server.check_alive(during)
        try:
            response = self.session.request(method, self.base_url + path, timeout=self.timeout_s, **kwargs)
        except requests.Timeout:
            self.server.check_alive(during)
            raise EngineServerError(
                f"{self.server.name}: {during} got no answer within {self.timeout_s:g} s ({method} {path}); "
                f"see {self.server.log_path}; raise engine.vllm.request_timeout_s if the machine is just slow"
            ) from None
        except requests.ConnectionError as error:
            self.server.check_alive(during, settle_s=5.0)  # the usual cause: it died (names exit code and log)
            raise EngineServerError(
                f"{self.server.name}: {during} lost its connection ({type(error).__name__}); see {self.server.log_path}"
            ) from None
        if response.status_code != 200:
            raise EngineServerError(
                f"{self.server.name}: {during} failed with HTTP {response.status_code}: {response.text[:300]!r}; "
                f"see {self.server.log_path}"
            )
        return response.json() if response.content else None

    def close(self) -> None:
        self.session.close()
