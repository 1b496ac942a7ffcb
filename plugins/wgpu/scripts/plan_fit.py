"""Why adaptive's step plan holds or is refused on W3/W4: each plan the device pool makes, with the
headroom test it passes or fails (``BufferPool._fits``: the arena plus the most held outside the plan
at once must stay within (1 + HEADROOM) x the step's peak in use), then per step the driver
allocations and the plan's counters. Any pooled device (opencl:0, wgpu:0, cuda:0), CPU sizes.

    PYTHONPATH=$PYTHONPATH:. python plugins/wgpu/scripts/plan_fit.py wgpu:0 W3 [--steps 8]

Run it with ``EMBER_WGPU_IN_PLACE=0`` / ``EMBER_OPENCL_IN_PLACE=0`` to see the refusal the in-place
updates remove (W3: the parameters and their replacements held beside the arena).
"""

from __future__ import annotations

import argparse
from typing import Any

import ember as em
from ember.memory import pool as pool_module
from ember.memory.strategies import HEADROOM

MIB = 2**20


def _logged(fits: Any) -> Any:
    def check(self: Any, plan: Any, uses: Any) -> bool:
        ok = fits(self, plan, uses)
        if uses is None:
            print(f"  plan of period {plan.period}: refused (no uses recorded for it)")
            return ok
        outside, high = self._outside(plan, uses)
        most = max(outside, default=0)
        print(
            f"  plan: period {plan.period}, {plan.planned} planned; arena {plan.extent / MIB:.2f} MiB + most held "
            f"outside it {most / MIB:.2f} = {(plan.extent + most) / MIB:.2f} MiB vs (1 + {HEADROOM}) x peak in use "
            f"{high / MIB:.2f} = {(1 + HEADROOM) * high / MIB:.2f} MiB: {'fits' if ok else 'REFUSED'}"
        )
        return ok

    return check


def main() -> None:
    from benchmarks import w3_cnn, w4_transformer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("device")
    parser.add_argument("workload", choices=("W3", "W4"))
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    pool_module.BufferPool._fits = _logged(pool_module.BufferPool._fits)  # type: ignore[method-assign]
    dev = em.Device(args.device, memory="adaptive")
    module = {"W3": w3_cnn, "W4": w4_transformer}[args.workload]
    case = module.ember(dev, module.SIZES["cpu"])
    pool = dev.memory.pools()[0]  # the device pool (an em.jit replay adds its own)
    for step in range(args.steps):
        misses = pool.misses
        out = case.step()
        case.sync()
        del out
        print(
            f"step {step}: driver allocations {pool.misses - misses}, planned so far {pool.planned}, "
            f"refusals {pool.plan_refusals}"
        )


if __name__ == "__main__":
    main()
