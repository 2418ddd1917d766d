"""``KernelLowered``: what the opencl and webgpu backends' lowered programs share."""

from __future__ import annotations

from fnarray.core import profile as _profile
from fnarray.devices.backend import Lowered

__all__ = ["KernelLowered"]


class KernelLowered(Lowered):
    """A program scheduled into kernels once, on first use; listed by ``kernels()``/``as_text()``.

    Subclasses give ``_schedule_now()`` (run ``schedule_program`` with the target's capabilities),
    ``_named_source(kernel) -> (name, source)`` and ``_compile_schedule(schedule)``; a program whose
    control flow the host must drive compiles to ``host_control.HostDriven`` instead.
    """

    def __init__(self, program, device):
        super().__init__(program, device)
        self._plan = None

    def _schedules(self):
        if self._plan is None:
            with _profile.span("lower", f"schedule kernels for {self.device}", eqns=len(self.program.eqns)):
                self._plan = self._schedule_now()
        return self._plan

    def kernels(self):
        """The generated kernels in launch order: each with its source, work sizes and the IR equations it
        fused (``print`` shows them)."""
        return self._schedules().listing(self._named_source)

    def as_text(self) -> str:
        """The source of every kernel, in launch order."""
        return str(self.kernels())

    def compile(self):
        plan = self._schedules()
        if plan.host_driven:
            from fnarray.devices import host_control
            return host_control.HostDriven(self.program, self.device, [True] * len(self.program.eqns))
        return self._compile_schedule(plan.schedule)
