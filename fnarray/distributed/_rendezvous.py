"""A bounded handshake over plain TCP before ``jax.distributed.initialize`` takes over the coordinator port.

Why: once JAX's coordination client is connecting, a peer that never comes ends the process from C++
(``client.h``: "Terminating process because the JAX distributed service detected fatal errors", exit 134),
after fnarray's ``TimeoutError`` was already raised. So the processes first meet on the coordinator's port
themselves: process 0 listens there, every other process connects (retrying until ``timeout``) and says
``fnarray-join <process_id> <num_processes>``; when all are in, process 0 answers each ``go``, waits for
them to hang up (so that its end of the port is free at once) and closes; then JAX's service binds the
same port. A missing process, a wrong count or a duplicate id is a Python exception in every process, and
JAX is never started for a run that cannot form.
"""

from __future__ import annotations

import socket
import time

__all__ = ["rendezvous", "split_address"]

_HELLO = "fnarray-join"
_RETRY_S = 0.1


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (``"[::1]:port"`` for IPv6) as ``(host, port)``; ``ValueError`` naming the form."""
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"fnarray.distributed.initialize: coordinator_address={address!r} is not 'host:port' "
                         "(for instance '10.0.0.1:1234' or '[::1]:1234')")
    return host.strip("[]"), int(port)


def rendezvous(address: str, num_processes: int, process_id: int, timeout: float) -> None:
    """Wait until all ``num_processes`` processes have reached the coordinator at ``address``.

    Raises:
      TimeoutError: the coordinator (process 0) cannot be reached, or (on process 0) some processes did
        not come, within ``timeout`` seconds; the message names who is missing.
      ValueError: the processes disagree on ``num_processes`` or two claim the same ``process_id``.
      OSError: process 0 cannot listen on the port (already in use).
    """
    if num_processes <= 1:
        return
    host, port = split_address(address)
    deadline = time.monotonic() + timeout
    if process_id == 0:
        _serve(port, num_processes, deadline, timeout, address)
    else:
        _join(host, port, num_processes, process_id, deadline, timeout, address)


def _serve(port, num_processes, deadline, timeout, address):
    try:
        server = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True) \
            if socket.has_dualstack_ipv6() else socket.create_server(("", port))
    except OSError as e:
        raise OSError(e.errno, f"fnarray.distributed.initialize: process 0 cannot listen on port {port} of "
                               f"{address!r} ({e.strerror}); choose a free port (python -m "
                               "fnarray.distributed.launch picks one)") from e
    peers: dict = {}
    try:
        with server:
            while len(peers) < num_processes - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(1, num_processes)) - set(peers))
                    raise TimeoutError(
                        f"fnarray.distributed.initialize: process 0 (the coordinator at {address!r}) waited "
                        f"{timeout:g} s, but process(es) {missing} of {num_processes} never connected. Check that "
                        "every process was started with the same coordinator address and num_processes, and that "
                        "the port is not blocked.")
                server.settimeout(left)
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                pid = _greeting(conn, num_processes, deadline)
                if pid in peers:
                    conn.close()
                    raise ValueError(f"fnarray.distributed.initialize: two processes claim process_id={pid}; give "
                                     f"each of the {num_processes} processes its own id in [0, {num_processes})")
                peers[pid] = conn
            for conn in peers.values():
                conn.sendall(b"go\n")
            for conn in peers.values():   # each peer hangs up first: no TIME_WAIT left on the port here
                conn.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    conn.recv(16)
                except OSError:
                    pass
    finally:
        for conn in peers.values():
            conn.close()


def _greeting(conn, num_processes, deadline) -> int:
    conn.settimeout(max(0.1, deadline - time.monotonic()))
    try:
        words = _readline(conn).split()
    except OSError:
        words = []
    if len(words) != 3 or words[0] != _HELLO or not words[1].isdigit() or not words[2].isdigit():
        conn.close()
        raise ValueError("fnarray.distributed.initialize: something that is not an fnarray process connected to "
                         f"the coordinator's port (it said {' '.join(words)[:60]!r}); start every process through "
                         "fnarray.distributed.initialize, with the same coordinator address")
    pid, n = int(words[1]), int(words[2])
    if n != num_processes or not 0 < pid < num_processes:
        conn.sendall(f"bad {num_processes}\n".encode())
        conn.close()
        raise ValueError(f"fnarray.distributed.initialize: process {pid} says the run has {n} processes, process 0 "
                         f"says {num_processes}; give every process the same num_processes and an id below it")
    return pid


def _join(host, port, num_processes, process_id, deadline, timeout, address):
    last = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(
                f"fnarray.distributed.initialize: process {process_id} of {num_processes} could not reach the "
                f"coordinator at {address!r} within {timeout:g} s ({last or 'no answer'}). Check that process 0 "
                "runs and listens there (same address and port in every process), that every process was started, "
                "and that the port is not blocked.")
        try:
            conn = socket.create_connection((host, port), timeout=min(left, 2.0))
        except OSError as e:
            last = f"{type(e).__name__}: {e}"
            time.sleep(min(_RETRY_S, max(0.0, deadline - time.monotonic())))
            continue
        break
    with conn:
        conn.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn.sendall(f"{_HELLO} {process_id} {num_processes}\n".encode())
            answer = _readline(conn)
        except OSError as e:
            answer = f"{type(e).__name__}: {e}"
    if answer.startswith("bad "):
        raise ValueError(f"fnarray.distributed.initialize: process 0 says the run has {answer.split()[1]} processes, "
                         f"this process (id {process_id}) says {num_processes}; give every process the same "
                         "num_processes")
    if answer != "go":
        raise TimeoutError(
            f"fnarray.distributed.initialize: process {process_id} of {num_processes} reached the coordinator at "
            f"{address!r}, but the run did not form within {timeout:g} s ({answer or 'the coordinator hung up'}): "
            "some other process did not come, or gave another num_processes.")


def _readline(conn) -> str:
    data = b""
    while not data.endswith(b"\n") and len(data) < 256:
        chunk = conn.recv(256)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()
