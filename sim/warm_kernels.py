"""What the kernels that run warm save (``Device.warm_kernel_costs``, ``warm_span``).

The calibrated fixed cost of a kernel type (``Device.kernel_costs``) is its cost cold,
as the kernel calibration graph runs it; an op whose device ran ``d`` other kernel types
since its type's last kernel (:func:`core.kernel_warmth.reuse_distances`, over the
device's ops in the plan's order) pays ``(fixed - warm) * warmth(d)`` less
(:func:`core.kernel_warmth.warmth`).  The ops the executor runs without a kernel (a
variable's read handed on) neither save nor count.  The saving comes off the op's
first part too, its kernel's call, which a runtime with serial dispatch makes while it
holds the dispatcher (:meth:`sim.engine._Simulation.serial_parts`).

The cost-model placer's estimate (:mod:`placers.cost_model`) prices every kernel at its
calibrated fixed cost: a kernel's reuse distance depends on which other ops share its
device, which is what that placer is choosing.
"""

from __future__ import annotations

from core.kernel_warmth import reuse_distances, warmth

__all__ = ["warm_savings"]


def warm_savings(plan, devices, forwarded: set[str]) -> list[float]:
    """Per op of ``plan`` (op order), the seconds its kernel saves for running warm
    (0 on the devices that do not know their kernels' warm costs)."""
    on_device: dict[int, list[int]] = {}
    for i, (op, d) in enumerate(zip(plan.ops, plan.op_device)):
        device = devices[d]
        if device.warm_kernel_costs and device.kernel_costs and op.name not in forwarded:
            on_device.setdefault(d, []).append(i)
    savings = [0.0] * plan.n_ops
    types = plan.op_types
    for d, ops in on_device.items():
        device = devices[d]
        span = device.warm_span
        for i, distance in zip(ops, reuse_distances([types[i] for i in ops], span)):
            warm = device.warm_kernel_cost(types[i])
            if warm is None or distance >= span:
                continue
            fixed = device.kernel_cost(types[i])[0]
            if fixed > warm:
                savings[i] = (fixed - warm) * warmth(distance, span)
    return savings
