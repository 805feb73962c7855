"""``ServerEngine``: a ``RolloutEngine`` backed by an inference server heron starts and owns.

The engine is framework-neutral; a ``ServerAdapter`` (``heron.rollout.server.adapter``) speaks the
server's API (vLLM: ``heron.rollout.vllm``). What the engine guarantees:

- ``generate``: one HTTP request per ``GenerationRequest`` (each has its own seed and params),
  up to ``max_concurrent_requests`` in flight; the server batches them continuously. Answers come
  back in request order, stamped with the version the server confirmed at the last push. The
  first failure cancels the queued requests and is raised, so a dead or hung server fails the
  call within one request deadline.
- ``load_weights(handle)``: the handle's tensors (whatever transport brought them) are checked
  against the served model's layout (``ValueError`` before anything changes), written as one
  versioned safetensors file (atomic; not fsynced: nothing reads it after a crash) and loaded in
  place by the server; then the server must report ``handle.version`` (``WeightVersionError``
  if not).
  With ``cluster.weight_transport=broadcast`` the server's worker joins the broadcast group
  itself where its adapter can (``join_weight_group``; vLLM): the layout rank 0 publishes is
  checked the same way first, then the worker loads each bucket as it arrives, with no file and
  no copy in this process (a layout that does not fit is received and dropped, so the sender
  completes, and ``ValueError`` is raised).
  With ``cluster.weight_transport=disk`` the server loads the transport's own file where it can
  (``handle.file``: its header fits the layout under the checkpoint's names, and the server
  never rereads pushed files), so no second copy is read and written.
- ``policy_version`` asks the server, so a stale or restarted server cannot pass the run's check.
- ``close`` stops the server's whole process group (also via atexit, SIGTERM and the launcher's
  stdin watchdog: ``heron.rollout.server.process``).

Residency: heron holds none of the engine's memory, so its holdings are empty and name their own
backend, ``ServerSideMemory`` (the server's own sleep where it has one, else a tracked no-op).
"""

from __future__ import annotations

import logging
import shutil
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

import torch

from heron.interrupt import install_interrupt_handlers
from heron.records import Generation, GenerationRequest
from heron.residency import Resident, host_only, needs_device
from heron.residency.backend import KeepResident
from heron.residency.state import Holdings
from heron.rollout.request_checks import validate_request
from heron.rollout.server.adapter import ServerAdapter
from heron.rollout.server.errors import ServerStartError
from heron.rollout.server.http import ServerClient
from heron.rollout.server.process import ServerProcess, free_port, log_tail
from heron.rollout.server.sleep_backend import ServerSideMemory
from heron.rollout.server.weight_layout import WeightLayout, file_shapes
from heron.weights.broadcast import layout_shapes
from heron.weights.handle import SafetensorsFile, WeightHandle
from heron.weights.version import WeightVersionError

log = logging.getLogger("heron.rollout")
PORT_ATTEMPTS = 3  # another process may take the free port before the server binds it


class ServerEngine(Resident):
    def __init__(
        self, adapter: ServerAdapter, layout: WeightLayout, *, name: str, log_path: Path, weight_dir: Path,
        max_model_len: int, device: str = "cpu", server_sleeps: bool = False, startup_timeout_s: float = 900.0,
        request_timeout_s: float = 600.0, shutdown_timeout_s: float = 20.0, max_concurrent_requests: int = 64,
    ):
        self.adapter = adapter
        self.layout = layout
        self.name = name
        self.log_path = Path(log_path)
        self.weight_dir = Path(weight_dir)
        self.max_model_len = max_model_len
        self._device = torch.device(device)
        self.server_sleeps = server_sleeps
        self.startup_timeout_s = startup_timeout_s
        self.request_timeout_s = request_timeout_s
        self.shutdown_timeout_s = shutdown_timeout_s
        self.max_concurrent_requests = max_concurrent_requests
        self.server: ServerProcess | None = None
        self.client: ServerClient | None = None
        self.startup_s: float | None = None
        self._version = 0
        self._worker_receives = False  # the server's worker is a member of the weight broadcast group
        self._lock = threading.Lock()  # one generate or push at a time (a push must not race decoding)
        self._pool = ThreadPoolExecutor(max_workers=max_concurrent_requests, thread_name_prefix=f"{name}-http")

    # --- lifecycle -----------------------------------------------------------------------------
    @host_only
    def start(self) -> ServerEngine:
        """Launches the server and waits until it serves version 0 (the model folder's weights)."""
        for attempt in range(PORT_ATTEMPTS):
            port = free_port()
            spec = self.adapter.launch(port)
            server = ServerProcess(
                f"{self.adapter.name} server '{self.name}'", spec.command, spec.env, self.log_path,
                f"http://127.0.0.1:{port}{spec.health_path}",
            )
            try:
                self.startup_s = server.start(self.startup_timeout_s)
                break
            except ServerStartError:
                if attempt + 1 == PORT_ATTEMPTS or "address already in use" not in log_tail(self.log_path, 30).lower():
                    raise
        self.server = server
        self.client = ServerClient(server, f"http://127.0.0.1:{port}", self.request_timeout_s, self.max_concurrent_requests)
        try:
            self.adapter.after_start(self.client)
            self._check_served(0)
        except BaseException:
            self.close()
            raise
        install_interrupt_handlers()  # SIGTERM unwinds like Ctrl-C, so close and atexit stop the server
        log.info("%s healthy on 127.0.0.1:%d after %.1f s (pid %d); log: %s",
                 server.name, port, self.startup_s, server.pid, self.log_path)
        return self

    @host_only
    def close(self) -> None:
        """Stops the server (its whole process group) and removes the pushed-weights folder. Idempotent."""
        if self.server is not None:
            self.server.stop(self.shutdown_timeout_s)
        if self.client is not None:
            self.client.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(self.weight_dir, ignore_errors=True)

    shutdown = close

    def __enter__(self) -> ServerEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @host_only
    def health(self) -> bool:
        """True when the server process runs and answers its health URL."""
        return self.server is not None and self.server.exit_code() is None and self.server.healthy()

    # --- the RolloutEngine protocol ------------------------------------------------------------
    @property
    @host_only
    def policy_version(self) -> int:
        return self._served()

    @property
    @host_only
    def device(self) -> torch.device:
        return self._device

    @needs_device
    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        for index, request in enumerate(requests):
            validate_request(index, request)
            total = len(request.prompt_tokens) + request.params.max_new_tokens
            if total > self.max_model_len:
                raise ValueError(
                    f"request {index}: prompt ({len(request.prompt_tokens)} tokens) + max_new_tokens "
                    f"({request.params.max_new_tokens}) exceeds the server's max_model_len={self.max_model_len}; "
                    f"raise engine.vllm.max_model_len (at most the model's max_position_embeddings)"
                )
        with self._lock:
            return self._generate_all(requests)

    def _generate_all(self, requests: list[GenerationRequest]) -> list[Generation]:
        version, client = self._version, self._live_client("generate")

        def one(request: GenerationRequest) -> Generation:
            path, body = self.adapter.completion(request)
            return self.adapter.parse(client.post(path, body, during="generate"), request, version)

        futures = [self._pool.submit(one, request) for request in requests]
        wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f for f in futures if f.done() and f.exception() is not None), None)
        if failed is not None:
            for future in futures:
                future.cancel()
            raise failed.exception()
        return [f.result() for f in futures]

    @host_only
    def join_weight_group(self, addr: str, port: int, rank: int, size: int, timeout_s: float, bucket_bytes: int) -> None:
        """Joins the weight broadcast group as ``rank`` (blocks until every member joined): the
        server's worker joins where the adapter can, else this process (``heron.weights.broadcast``),
        which then receives each push and writes it for the server like any other."""
        from heron.weights import broadcast

        if self.adapter.join_weight_group(self._live_client("join the weight group"), addr, port, rank, size, timeout_s):
            self._worker_receives = True
            return
        broadcast.join(addr, port, rank, size, timeout_s, device=self._device, bucket_bytes=bucket_bytes)

    @needs_device
    def load_weights(self, handle: WeightHandle) -> None:
        """Pushes the handle's weights (HF names) to the server in place; afterwards the server
        serves ``handle.version`` or this raises. Checks the layout before anything changes."""
        if self._worker_receives and handle.by_broadcast:
            self._receive_in_worker(handle.version)
            return
        if handle.file is not None and self._loads_in_place(handle.file):
            with self._lock:
                self._push_file(Path(handle.file), handle.version)
            return
        tensors = self.layout.to_push(handle.tensors())
        with self._lock:
            self._live_client("load_weights")  # a dead server fails before the file is written
            # not fsynced: the server reads it at once, and after a crash the resumed run pushes again
            weight_file = SafetensorsFile.write_version(tensors, self.weight_dir, handle.version, durable=False)
            self._push_file(Path(weight_file.path), handle.version)

    def _loads_in_place(self, path: str) -> bool:
        """Whether the server can load the transport's own file ``path`` (disk transport) instead
        of a copy: its header fits the served layout under the checkpoint's own names (an alias
        needs the copy, which renames it) and the server never rereads pushed files. A file that
        does not fit raises ``ValueError`` here or in the copy's check, before anything changes."""
        if self.adapter.rereads_pushed_files():
            return False  # the copy's own check (to_push) refuses a misfit
        return all(name == target for name, target in self.layout.targets(file_shapes(path)).items())

    def _push_file(self, path: Path, version: int) -> None:
        """The server loads ``path`` in place and must then serve ``version`` (caller holds the lock)."""
        self.adapter.push_weights(self._live_client("load_weights"), path, version)
        self._check_served(version)
        self._version = version

    def _receive_in_worker(self, version: int) -> None:
        """A broadcast push received by the server's worker: its layout checked here first."""
        with self._lock:
            client = self._live_client("load_weights")
            layout = self.adapter.broadcast_layout(client, version)
            try:
                renames = self.layout.targets(layout_shapes(layout))
            except ValueError:
                self.adapter.receive_weights(client, version, {}, load=False)  # the sender completes
                raise
            self._version = -1  # a load that fails part-way leaves no version to stamp samples with
            self.adapter.receive_weights(client, version, renames, load=True)
            self._check_served(version)
            self._version = version

    @host_only
    def served_versions(self) -> dict[str, int]:
        return {self.name: self._served()}

    # --- residency (heron.residency.wiring reads the holdings) ---------------------------------
    @host_only
    def holdings(self) -> Holdings:
        """Nothing on heron's side: the weights and KV cache live in the server process, which
        sleeps by itself (its own backend)."""
        return Holdings(lambda: {"params": [], "buffers": [], "kv_cache": []}, device=self._device,
                        backend=self._memory_backend)

    def _memory_backend(self, offload: bool):
        if not offload:
            return KeepResident()
        if self.server_sleeps:  # UNTESTED: CUDA only
            return ServerSideMemory(lambda: self.adapter.sleep(self._live_client("sleep")),
                                    lambda: self.adapter.wake(self._live_client("wake")))
        return ServerSideMemory()

    # --- helpers -------------------------------------------------------------------------------
    def _live_client(self, during: str) -> ServerClient:
        if self.server is None or self.client is None:
            raise ServerStartError(f"{self.adapter.name} server '{self.name}' was never started; cannot {during}")
        self.server.check_alive(during)
        return self.client

    def _served(self) -> int:
        return self.adapter.served_version(self._live_client("policy_version"))

    def _check_served(self, expected: int) -> None:
        served = self._served()
        if served != expected:
            raise WeightVersionError(
                f"{self.adapter.name} server '{self.name}' serves policy version {served} but heron pushed "
                f"version {expected}; samples would come from stale weights (see {self.log_path})"
            )
