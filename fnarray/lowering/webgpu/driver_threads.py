"""lavapipe's threads kept on one CPU while every queued dispatch is one work-group (Linux only).

Mesa's lavapipe runs a command buffer on a queue thread that hands each dispatch to a pool of compute workers
(llvmpipe's ``lp_cs_tpool``: as many as the CPUs, all woken for every dispatch; the queue thread sleeps until
the work-groups are done). Where the kernel scheduler leaves those threads on different CPUs, each dispatch
pays two wake-ups across CPUs (~35 us of CPU against ~5 us where they share one): the per-process "slow mode"
of docs/performance.md, which took a webgpu:0 decode loop of one-work-group dispatches from ~1 ms to 2-4 ms a pass
in about half the processes on this 2-core machine. Pinning only the queue thread beside one worker does not
remove it (the other worker is still woken across CPUs for every dispatch: measured as slow as the split).

So while every dispatch submitted since the last full wait runs as one work-group (which only one worker can
run anyway: nothing is lost), the device's driver threads are kept on one CPU (``DriverThreads.gather``, at a
submit); a submit with a dispatch of more work-groups first gives them back their own CPU masks (``release``),
so big kernels keep every worker. The CPU is the calling thread's where the threads may run there (checked at
each such submit, ~0.1 us: they follow it where the kernel scheduler moves it), else the one they are on, else
the lowest they may all run on; a process (or thread) confined to one CPU is left alone. Results never depend
on it: only where the threads run changes.

The threads are those the calling thread created while the device opened (``opened_since``): named like the
thread that created them (Linux copies a creating thread's name; Mesa names its rasterizer threads
``llvmpipe-N`` and its shader-cache thread ``...disk$N``, which compute never uses) and not Python's own (wgpu-py
starts a polling thread). ``FNARRAY_WEBGPU_PIN_THREADS=0`` before the device opens turns it off; it applies
only to lavapipe (a CPU adapter whose name says llvmpipe, on Vulkan), never to a GPU.
"""

from __future__ import annotations

import os
import sys
import threading

#: The environment variable that turns the pinning off ("0", "false", "no", "off").
SWITCH = "FNARRAY_WEBGPU_PIN_THREADS"
_TASKS = "/proc/self/task"


def enabled() -> bool:
    """Whether ``FNARRAY_WEBGPU_PIN_THREADS`` leaves the pinning on (the default)."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def applies(info) -> bool:
    """Whether an adapter (wgpu-py's ``adapter.info``) is lavapipe on Linux, whose threads ``DriverThreads``
    keeps together."""
    name = f"{info.get('device', '')} {info.get('description', '')}".lower()
    return (sys.platform.startswith("linux") and str(info.get("adapter_type", "")).lower() == "cpu"
            and str(info.get("backend_type", "")).lower() == "vulkan" and "llvmpipe" in name)


def task_ids() -> set:
    """The ids of this process's threads (empty where ``/proc`` cannot be read)."""
    try:
        return {int(t) for t in os.listdir(_TASKS)}
    except OSError:
        return set()


def _name(tid) -> str | None:
    try:
        with open(f"{_TASKS}/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def _cpu_reader():
    """A function giving the CPU the calling thread runs on (glibc's ``sched_getcpu``, ~0.1 us), or ``-1``."""
    import ctypes
    try:
        getcpu = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return lambda: -1
    getcpu.restype, getcpu.argtypes = ctypes.c_int, ()
    return getcpu


def opened_since(before) -> DriverThreads | None:
    """The driver threads the calling thread created since ``before`` (``task_ids()`` taken before the device
    opened), or ``None`` where fewer than two were found or they may not all run on two or more common CPUs."""
    mine = _name(threading.get_native_id())
    python = {t.native_id for t in threading.enumerate()}
    tids = sorted(t for t in task_ids() - set(before) if t not in python and _name(t) == mine)
    if len(tids) < 2:
        return None
    try:
        masks = [frozenset(os.sched_getaffinity(t)) for t in tids]
    except OSError:
        return None
    common = frozenset.intersection(*masks)
    return DriverThreads(tids, masks, common, _cpu_reader()) if len(common) >= 2 else None


class DriverThreads:
    """A device's driver threads (ids, their own CPU masks) and whether they are gathered on one CPU."""

    __slots__ = ("tids", "masks", "cpus", "cpu", "current_cpu")

    def __init__(self, tids, masks, cpus, current_cpu):
        self.tids = tuple(tids)
        self.masks = tuple(masks)   # each thread's own mask, restored by ``release``
        self.cpus = cpus            # the CPUs every one of them may run on
        self.cpu = None             # the CPU they are gathered on, or None
        self.current_cpu = current_cpu   # () -> the calling thread's CPU (-1: unknown)

    def gather(self):
        """Keep every thread on one CPU: the calling thread's where allowed (followed from submit to submit: the
        kernel scheduler moves the calling thread off a busy CPU, and the driver's threads go with it), else the
        one they are on, else the lowest allowed."""
        cpu = self.current_cpu()
        if cpu not in self.cpus:
            cpu = self.cpu if self.cpu is not None else min(self.cpus)
        if cpu != self.cpu and self.tids and self._set(lambda _: {cpu}):
            self.cpu = cpu

    def release(self):
        """Give every thread its own CPU mask back."""
        if self.cpu is not None:
            self.cpu = None
            self._set(lambda k: self.masks[k])

    def _set(self, mask_of) -> bool:
        """Set each live thread's mask; on an error, give every thread its own mask back and stop keeping them
        (a thread gone: its id may belong to another process by now, so only ids still in this process are set)."""
        live = task_ids()
        try:
            for k, t in enumerate(self.tids):
                if t in live:
                    os.sched_setaffinity(t, mask_of(k))
        except OSError:
            for k, t in enumerate(self.tids):
                if t in live:
                    try:
                        os.sched_setaffinity(t, self.masks[k])
                    except OSError:
                        pass
            self.tids, self.cpu = (), None
            return False
        return True
