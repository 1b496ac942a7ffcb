import cProfile
import os
import pstats
import sys

sys.path.insert(0, os.getcwd())
import ember as em
from benchmarks import w2_mlp

size = {"batch": 16, "hidden": 64}
dev = em.Device("cpu").autodiff()
x_np, y_np, p_np = w2_mlp.inputs(size)
x = em.tensor(x_np, device=dev)
y = em.tensor(y_np, device=dev)
p = {k: em.tensor(v, device=dev).requires_grad_() for k, v in p_np.items()}


def step():
    for t in p.values():
        t.grad = None
    h = em.relu(x @ p["w1"] + p["b1"])
    h = em.relu(h @ p["w2"] + p["b2"])
    loss = em.cross_entropy(h @ p["w3"] + p["b3"], y)
    loss.backward()
    with em.no_grad():
        for t in p.values():
            t.copy_(t - 0.01 * t.grad)


for _ in range(10):
    step()
pr = cProfile.Profile()
pr.enable()
for _ in range(500):
    step()
pr.disable()
st = pstats.Stats(pr)
st.sort_stats(sys.argv[1] if len(sys.argv) > 1 else "cumtime").print_stats(60)
