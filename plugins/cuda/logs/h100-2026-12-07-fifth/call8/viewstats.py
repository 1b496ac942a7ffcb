"""The view ledger over opencl W3 steps at GPU sizes: views made, reused and released in each step (as run in
call8, with the spare views since reverted: today's ledger has no ``reused`` or ``spares``)."""

import ember as em
from benchmarks import w3_cnn

dev = em.Device("opencl:0")
case = w3_cnn.ember(dev, dict(w3_cnn.SIZES["gpu"]))
views = dev.backend.rt.views
last = (0, 0, 0)
for step in range(30):
    case.step()
    case.sync()
    now = (views.made, views.reused, views.released)
    if step < 6 or step % 6 == 5:
        made, reused, released = (a - b for a, b in zip(now, last))
        print(f"step {step}: made {made}, reused {reused}, released {released}, spares {views.spares}")
    last = now
