"""The view ledger over opencl W3 steps at GPU sizes: views made, reused and released in each step."""

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
        print(f"step {step}: made {now[0] - last[0]}, reused {now[1] - last[1]}, released {now[2] - last[2]}, spares {views.spares}")
    last = now
