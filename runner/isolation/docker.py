"""DockerRunner: one fresh, hardened container per call, removed whatever happens.

Lifecycle of one call, top to bottom:
  create (hardened host config, labels naming the call and its owner) -> attach to
  stdin/stdout/stderr -> start -> write the request and half-close stdin -> read the
  multiplexed stream with caps until EOF or the deadline -> on deadline or cap, kill ->
  wait for the exit status, read the OOM flag -> remove (shielded from cancellation).

The host owns the deadline: it kills and removes the container itself; killing a client
would leave the container running (moby #35647).

`converse` is that lifecycle from the write on, whoever made the container: a cold start
here, or a warm container from pool.py, which uses the same steps.

Every docker SDK call blocks, so each runs in a worker thread, never on the event loop.
The runner owns the docker client it creates (on first use) and closes it in `aclose()`;
a client it was given belongs to the caller. Log lines name the call and the container.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import selectors
import socket
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import docker
import docker.errors
import requests.exceptions
from docker.types import LogConfig, Ulimit

from envelopes.agents_exe import docker_policy
from runner.isolation.base import ExchangeRunner, RunnerClosed, seconds_until
from runner.isolation.containers import DEFAULT_SECCOMP_PROFILE, labels_for, seccomp_option
from runner.isolation.dialect import Dialect, EnvelopeName, dialect_for
from runner.isolation.egress import (
    EgressError,
    EgressPolicy,
    Gateway,
    network_info,
    open_gateway,
)
from runner.isolation.events import EventReader
from runner.isolation.negotiation import FileLimits
from runner.isolation.outcome import Exchange, Intervention, TailBuffer
from runner.isolation.runtimes import (
    EngineRuntimes,
    RuntimeUnavailable,
    check_runtime,
    unknown_runtime_now,
)
from runner.isolation.sharing import CapabilityCache, Sweeper, SweepFailed

logger = logging.getLogger(__name__)

MiB = 1024 * 1024
#: A runtime's name as the engine's daemon.json registers it.
RUNTIME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_FRAME_HEADER = 8
_STDOUT, _STDERR = 1, 2


@dataclass(frozen=True)
class ContainerLimits:
    """The sandbox of one call. Every default is the safe one; raising a limit or
    opening a hole (network, root) takes an explicit setting, and the engine must
    apply every setting: a create that comes back with warnings is refused."""

    memory_bytes: int = 512 * MiB  # swap is set equal: no swap beyond memory
    cpus: float = 1.0
    pids: int = 128
    tmpfs_bytes: int = 64 * MiB  # /tmp, the only writable place
    shm_bytes: int = 16 * MiB
    open_files: int = 256
    file_size_bytes: int = 64 * MiB
    network: str = "none"  # the name of a Docker network to join instead of none
    user: str = "10001:10001"
    read_only_root: bool = True
    max_stderr_bytes: int = 8 * MiB
    env: Mapping[str, str] = field(default_factory=dict)
    #: Path of a seccomp profile (JSON); None: the engine's own default profile instead.
    seccomp_profile: str | None = DEFAULT_SECCOMP_PROFILE
    #: The OCI runtime the engine starts the container with, by its registered name: runc
    #: (the host's kernel, shared) or runsc (gVisor: a user-space kernel between the worker
    #: and the host's; registered by scripts/lib/engine.sh). Never replaced by another.
    runtime: str = "runc"
    #: Egress through an allow-list proxy (egress.py) instead of no network; None: none.
    egress: EgressPolicy | None = None

    def __post_init__(self) -> None:
        positive = ("memory_bytes", "pids", "tmpfs_bytes", "shm_bytes", "open_files",
                    "file_size_bytes", "max_stderr_bytes")  # fmt: skip
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"ContainerLimits.{name} must be positive")
        if self.memory_bytes < 6 * MiB:
            raise ValueError("ContainerLimits.memory_bytes must be at least 6 MiB (Docker's floor)")
        if not 0 < self.cpus <= 256:
            raise ValueError(f"ContainerLimits.cpus must be in (0, 256], got {self.cpus}")
        if not self.network:
            raise ValueError("ContainerLimits.network must name a network ('none' for none)")
        if self.egress is not None and self.network != "none":
            raise ValueError("ContainerLimits: set egress or network, not both (with egress"
                             " the call gets its own internal network)")  # fmt: skip
        if not RUNTIME_NAME.fullmatch(self.runtime):
            raise ValueError(
                f"ContainerLimits.runtime must name a runtime of the engine (runc, runsc),"
                f" got {self.runtime!r}"
            )

    def info(self) -> dict[str, Any]:
        """The limits as a call reports them (runner_info["limits"]); `seccomp` is
        "default" (our profile), "engine" (the engine's own), a profile's path, or
        "gvisor" under runsc, which does not load the profile (runtimes.py says why)."""
        seccomp = self.seccomp_profile or "engine"
        if self.runtime == "runsc":
            seccomp = "gvisor"
        return {
            "memory_bytes": self.memory_bytes,
            "cpus": self.cpus,
            "pids": self.pids,
            "tmpfs_bytes": self.tmpfs_bytes,
            "read_only_root": self.read_only_root,
            "user": self.user,
            "seccomp": "default" if seccomp == DEFAULT_SECCOMP_PROFILE else seccomp,
            "runtime": self.runtime,
        }

    def host_config(self, api: docker.APIClient) -> dict[str, Any]:
        config: dict[str, Any] = api.create_host_config(
            network_mode=self.network,
            read_only=self.read_only_root,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={self.tmpfs_bytes},mode=1777"},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges", *self._seccomp_option()],
            mem_limit=self.memory_bytes,
            memswap_limit=self.memory_bytes,
            nano_cpus=int(self.cpus * 1e9),
            pids_limit=self.pids,
            shm_size=self.shm_bytes,
            ulimits=[
                Ulimit(name="nofile", soft=self.open_files, hard=self.open_files),
                Ulimit(name="fsize", soft=self.file_size_bytes, hard=self.file_size_bytes),
                Ulimit(name="core", soft=0, hard=0),
            ],
            init=True,
            ipc_mode="private",
            log_config=LogConfig(type="none"),
            privileged=False,
            runtime=self.runtime,
        )
        return config

    def _seccomp_option(self) -> list[str]:
        if self.seccomp_profile is None:
            return []
        try:
            return [seccomp_option(self.seccomp_profile)]
        except (OSError, ValueError) as exc:
            raise StartFailed(
                f"cannot use the seccomp profile {self.seccomp_profile}: {exc} (regenerate"
                " it with images/seccomp/generate.py, or set"
                " ContainerLimits(seccomp_profile=None) for the engine's default profile)"
            ) from None


class DockerRunner(ExchangeRunner):
    def __init__(
        self,
        image: str,
        limits: ContainerLimits | None = None,
        *,
        command: list[str] | None = None,
        api: docker.APIClient | None = None,
        envelope: EnvelopeName = "v1",
        file_limits: FileLimits | None = None,
        capabilities: frozenset[str] | None = None,
        capability_cache: CapabilityCache | None = None,
        sweeper: Sweeper | None = None,
        runtimes: EngineRuntimes | None = None,
    ) -> None:
        """`capability_cache`, `sweeper` and `runtimes` are shared by the runners of one
        owner (sharing.py); a runner given none makes its own."""
        self.image = image
        self.limits = limits or ContainerLimits()
        self.command = command
        #: The envelope the worker speaks (see dialect.py).
        self.envelope = envelope
        #: Caps on a call's input files; capabilities given instead of asked (base.py).
        self.file_limits = file_limits or FileLimits()
        self.declared_capabilities = capabilities
        self.capability_cache = capability_cache
        #: Sweeps before this runner's first container (its owner's, when shared).
        self.sweeper = sweeper or Sweeper()
        #: The engine's registered runtimes, kept a while (runtimes.py).
        self.runtimes = runtimes or EngineRuntimes()
        self._dialect = dialect_for(envelope, docker_policy(image))
        self._api = api
        self._owns_api = api is None
        self._closed = False

    def api(self) -> docker.APIClient:
        """The docker client (blocking: the first use negotiates the API version)."""
        if self._closed:
            raise RunnerClosed(f"the DockerRunner for {self.image!r} is closed")
        if self._api is None:
            # DOCKER_HOST and friends are honoured, as by the docker CLI.
            self._api = docker.APIClient(
                version="auto", max_pool_size=64, **docker.utils.kwargs_from_env()
            )
        return self._api

    async def aclose(self) -> None:
        """Close the docker client this runner created (not one it was given); new calls
        are refused afterwards. Idempotent."""
        if self._closed:
            return
        self._closed = True
        api, self._api = self._api, None
        if api is not None and self._owns_api:
            await anyio.to_thread.run_sync(api.close)
            logger.debug("closed the docker client of the runner for %s", self.image)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def dialect(self) -> Dialect:
        return self._dialect

    async def exchange(
        self,
        payload: bytes,
        deadline_ms: int,
        stdout_cap: int,
        call_label: str,
        *,
        events: EventReader | None = None,
    ) -> Exchange:
        if self._closed:
            raise RunnerClosed(f"the DockerRunner for {self.image!r} is closed")

        async def cold_start() -> Started:
            return await self.start_container(call_label)

        return await self.converse(payload, deadline_ms, stdout_cap, cold_start, events=events)

    async def capability_key(self) -> Hashable | None:
        """The image's id and the command: runners of one image (new runner objects, the
        warm pool) describe it once between them, and a rebuilt image is asked again."""

        def image_id() -> str:
            return str(self.api().inspect_image(self.image)["Id"])

        try:
            found = await anyio.to_thread.run_sync(image_id)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            logger.debug("no image id for %s (%s): its capabilities are this runner's own",
                         self.image, exc)  # fmt: skip
            return None
        return ("docker", found, tuple(self.command or ()), self.envelope)

    async def start_container(self, call_label: str, role: str = "call") -> Started:
        """Create, attach and start a container whose worker then waits on stdin."""
        try:
            await self.sweeper.before_first_start(self.api)
        except SweepFailed as exc:
            raise StartFailed(str(exc)) from None
        return await anyio.to_thread.run_sync(self._create_and_start, call_label, role)

    async def converse(
        self,
        payload: bytes,
        deadline_ms: int,
        stdout_cap: int,
        acquire: Callable[[], Awaitable[Started]],
        release: Callable[[Started], Awaitable[None]] | None = None,
        *,
        events: EventReader | None = None,
    ) -> Exchange:
        """The one call lifecycle, whoever started the container: take it from
        `acquire` (a cold start, or a warm pool), write the request, read the reply
        under caps and the deadline, collect the exit status, and remove the container
        whatever happens: here, or by `release` (a pool removes it in its own background
        task, off the call's path). The deadline is the request's: it starts when the
        call does, not when the container was made. `events` reads stderr's event lines
        in the stream thread and delivers each on this event loop as it completes."""
        ex = Exchange(runner_info={"runner": "docker", "image": self.image,
                                   "runtime": self.limits.runtime,
                                   "limits": self.limits.info()})  # fmt: skip
        ex.runner_info["network"] = network_info(self.limits.network, self.limits.egress)
        started_at = time.monotonic()
        if seconds_until(deadline_ms) <= 0:
            ex.intervention = "expired"
            return ex
        container: Started | None = None
        try:
            try:
                container = await acquire()
            except StartFailed as exc:
                ex.intervention, ex.detail = "start_failed", str(exc)
                return ex
            ex.runner_info["container"] = container.id[:12]
            ex.runner_info["pooled"] = container.pooled
            logger.debug("call %s: container %s (%s)", container.call, container.id[:12],
                         "warm" if container.pooled else "cold")  # fmt: skip
            stream = await anyio.to_thread.run_sync(
                _pump,
                container.sock,
                payload,
                deadline_ms,
                stdout_cap,
                self.limits.max_stderr_bytes,
                events.from_thread() if events is not None else None,
                abandon_on_cancel=True,
            )
            await anyio.to_thread.run_sync(self._finish, container.id, stream, ex)
            if container.gateway is not None:  # its refusals, before the call returns
                await anyio.to_thread.run_sync(container.gateway.collect, ex.runner_info)
        finally:
            if container is not None:
                with anyio.CancelScope(shield=True):
                    if release is not None:
                        await release(container)
                    else:
                        await anyio.to_thread.run_sync(self.discard, container)
            ex.duration_ms = (time.monotonic() - started_at) * 1000
        return ex

    def discard(self, container: Started) -> None:
        """Close our end of its streams and remove it (blocking)."""
        with contextlib.suppress(OSError):  # already shut down by the exchange
            container.sock.shutdown(socket.SHUT_RDWR)
        container.sock.close()
        if container.stream_file is not None:
            container.stream_file.close()
        self._remove(container.id)
        if container.gateway is not None:  # after the sandbox: the network is empty now
            container.gateway.close()
        logger.debug("removed container %s (call %s)", container.id[:12], container.call)

    # --- steps, each run in a worker thread (the docker SDK blocks) -------------------

    def _create_and_start(self, call_label: str, role: str = "call") -> Started:
        """The sandbox, after its egress gateway when it has a policy (egress.py): the
        gateway lives and is removed with it."""
        if self.limits.egress is None:
            return self._create_sandbox(call_label, role)
        try:
            gateway = open_gateway(self.api(), self.limits.egress, call_label,
                                   runtime=self.limits.runtime)  # fmt: skip
        except EgressError as exc:
            raise StartFailed(str(exc)) from None
        try:
            started = self._create_sandbox(call_label, role, gateway)
        except BaseException:
            gateway.close()
            raise
        started.gateway = gateway
        return started

    def _create_sandbox(
        self, call_label: str, role: str, gateway: Gateway | None = None
    ) -> Started:
        api = self.api()
        try:  # never a fallback: a runtime the engine lacks is a failed start
            check_runtime(api, self.limits.runtime, network=self.limits.network,
                          pids=self.limits.pids, known=self.runtimes)  # fmt: skip
        except RuntimeUnavailable as exc:
            raise StartFailed(str(exc)) from None
        host_config, environment = self.limits.host_config(api), dict(self.limits.env)
        if gateway is not None:  # its internal network, its proxy as resolver and proxy
            gateway.configure(host_config, environment)
        try:
            created = api.create_container(
                self.image,
                command=self.command,
                stdin_open=True,  # with detach=False the SDK also sets StdinOnce: EOF works
                user=self.limits.user,
                environment=environment,
                working_dir="/tmp",
                hostname=None if self.limits.network == "host" else "sandbox",
                network_disabled=self.limits.network == "none" and gateway is None,
                labels=labels_for(call_label, role=role),
                host_config=host_config,
            )
        except docker.errors.ImageNotFound:
            raise StartFailed(
                f"image {self.image!r} is not on this engine (build it: scripts/build-images)"
            ) from None
        except docker.errors.APIError as exc:
            if "unknown runtime" in str(exc.explanation).lower():  # the cached list was stale
                raise StartFailed(
                    unknown_runtime_now(api, self.limits.runtime, self.runtimes)
                ) from None
            raise StartFailed(
                f"the engine refused to create the container: {exc.explanation}"
            ) from None
        except (docker.errors.DockerException, OSError) as exc:
            raise StartFailed(f"cannot reach the Docker engine: {exc}") from None
        container_id = created["Id"]
        try:
            if created.get("Warnings"):
                raise StartFailed(
                    "the engine would not apply every limit: " + "; ".join(created["Warnings"])
                )
            # Attached before the start, so nothing the worker writes can be missed, and
            # kept with the container until its one call reads it.
            attached = api.attach_socket(
                container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            api.start(container_id)
        except BaseException as exc:
            logger.warning("call %s: container %s did not start (%s); removing it",
                           call_label, container_id[:12], exc)  # fmt: skip
            self._remove(container_id)
            if isinstance(exc, docker.errors.APIError):
                raise StartFailed(f"the container did not start: {exc.explanation}") from None
            raise
        logger.debug("call %s: started container %s (role %s)", call_label, container_id[:12],
                     role)  # fmt: skip
        return Started(
            container_id,
            attached._sock,
            pooled=role == "pool",
            call=call_label,
            stream_file=attached if isinstance(attached, io.IOBase) else None,
        )

    def _finish(self, container_id: str, stream: _Stream, ex: Exchange) -> None:
        api = self.api()
        if stream.intervention is not None or not stream.eof:
            logger.debug("container %s: killing it (%s)", container_id[:12],
                         stream.intervention or "its streams did not end")  # fmt: skip
            try:
                api.kill(container_id)
            except docker.errors.APIError as exc:  # it exited on its own meanwhile
                logger.debug("container %s: kill refused: %s", container_id[:12], exc)
        try:
            status = api.wait(container_id, timeout=30)["StatusCode"]
            inspected = api.inspect_container(container_id)
            oom_killed = bool(inspected["State"].get("OOMKilled"))
            # What really ran: the image's id and the runtime the engine used.
            ex.runner_info["image_id"] = inspected.get("Image")
            ex.runner_info["runtime"] = inspected["HostConfig"].get("Runtime") or "runc"
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            # The engine lost track of it; it is removed in any case. Report a kill.
            logger.warning("container %s: the engine gave no exit status: %s",
                           container_id[:12], exc)  # fmt: skip
            status, oom_killed = 128 + 9, False
            stream.detail = stream.detail or f"the engine gave no exit status: {exc}"
        ex.stdout, ex.stdout_bytes, ex.stdout_truncated = (
            bytes(stream.stdout), stream.stdout_bytes, stream.stdout_truncated
        )  # fmt: skip
        ex.stderr_tail, ex.stderr_bytes = stream.stderr.tail(), stream.stderr.total
        ex.stderr_truncated = stream.stderr_truncated or stream.stderr.truncated()
        if status > 128 and status <= 128 + 64:  # the init reports a signal as 128 + n
            ex.signal = status - 128
        else:
            ex.exit_code = status
        if oom_killed:
            ex.intervention = "oom"
            ex.detail = f"the container hit its memory limit of {self.limits.memory_bytes} bytes"
        elif stream.intervention is not None:
            ex.intervention, ex.detail = stream.intervention, stream.detail

    def _remove(self, container_id: str) -> None:
        try:
            self.api().remove_container(container_id, force=True)
        except docker.errors.NotFound:
            logger.debug("container %s was already gone", container_id[:12])


class StartFailed(Exception):
    pass


@dataclass
class Started:
    """A created and started container whose worker waits on stdin, with the attach
    socket made before its start (the only way its output is read)."""

    id: str
    sock: socket.socket
    pooled: bool = False
    #: The call it was started for (the pool's label until a call takes it).
    call: str = ""
    started_at: float = field(default_factory=time.monotonic)
    #: Its egress gateway (internal network and proxy) when the call has a policy.
    gateway: Gateway | None = None
    #: The SDK's file object over `sock`: closed too, or the socket is only marked
    #: closed and its descriptor left to the garbage collector (a ResourceWarning).
    stream_file: io.IOBase | None = None


@dataclass
class _Stream:
    stdout: bytearray = field(default_factory=bytearray)
    stdout_bytes: int = 0
    stdout_truncated: bool = False
    stderr: TailBuffer = field(default_factory=TailBuffer)
    stderr_truncated: bool = False
    intervention: Intervention | None = None
    detail: str = ""
    eof: bool = False  # the worker's streams ended on their own
    events: EventReader | None = None  # stderr's event lines, when the request has events


def _pump(
    sock: socket.socket,
    payload: bytes,
    deadline_ms: int,
    stdout_cap: int,
    stderr_cap: int,
    event_reader: EventReader | None = None,
) -> _Stream:
    """Write the request, half-close, and demultiplex the reply until EOF, a cap or the
    deadline. One thread, non-blocking: a worker that never reads stdin cannot block
    the reading of its output."""
    stream = _Stream(events=event_reader)
    pending = memoryview(payload)
    buffer = bytearray()
    sock.setblocking(False)
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if pending else 0))
        if not pending:
            sock.shutdown(socket.SHUT_WR)
        try:
            while True:
                remaining = seconds_until(deadline_ms)
                if remaining <= 0:
                    stream.intervention = "timeout"
                    stream.detail = "the deadline passed; the container was killed"
                    break
                for _, events in selector.select(timeout=remaining):
                    if events & selectors.EVENT_WRITE and pending:
                        try:
                            pending = pending[sock.send(pending) :]
                        except BlockingIOError:  # the buffer is full: wait for EVENT_WRITE
                            pass
                        except OSError:  # the worker closed its stdin early: fine
                            pending = pending[len(pending) :]
                        if not pending:
                            with contextlib.suppress(OSError):  # the worker already hung up
                                sock.shutdown(socket.SHUT_WR)
                            selector.modify(sock, selectors.EVENT_READ)
                    if events & selectors.EVENT_READ:
                        try:
                            chunk = sock.recv(256 * 1024)
                        except BlockingIOError:
                            continue
                        if not chunk:
                            stream.eof = True
                            return stream
                        buffer += chunk
                        _demux(buffer, stream, stdout_cap, stderr_cap)
                        if stream.intervention is not None:
                            return stream
        except OSError as exc:  # the container was removed under us (cancellation)
            stream.detail = f"stream closed: {exc}"
        finally:
            # shutdown() first: close() alone keeps the fd open while the SDK's file
            # object refers to it, and the engine would block writing to a reader that
            # no longer reads, so the container could never finish exiting.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
    return stream


def _demux(buffer: bytearray, stream: _Stream, stdout_cap: int, stderr_cap: int) -> None:
    """Consume complete frames (8-byte header: stream, 0, 0, 0, big-endian length)."""
    while len(buffer) >= _FRAME_HEADER:
        length = int.from_bytes(buffer[4:8], "big")
        if len(buffer) < _FRAME_HEADER + length:
            return
        kind = buffer[0]
        data = bytes(buffer[_FRAME_HEADER : _FRAME_HEADER + length])
        del buffer[: _FRAME_HEADER + length]
        if kind == _STDOUT:
            stream.stdout_bytes += len(data)
            room = stdout_cap - len(stream.stdout)
            stream.stdout += data[:room]
            if len(data) > room:
                stream.stdout_truncated = True
                stream.intervention = "stdout_too_large"
                stream.detail = f"stdout passed max_result_bytes={stdout_cap}"
                return
        elif kind == _STDERR:
            # With events, each complete event line is delivered by feed(), right here.
            kept = data if stream.events is None else stream.events.feed(data)
            stream.stderr.write(kept, len(data))
            if stream.stderr.total > stderr_cap:
                stream.stderr_truncated = True
                stream.intervention = "stderr_too_large"
                stream.detail = f"stderr passed the runner's cap of {stderr_cap} bytes"
                return
