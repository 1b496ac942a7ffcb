import cProfile
import os
import pstats
import sys

sys.path.insert(0, os.getcwd())
import ember as em
from benchmarks import w2_mlp

dev = em.Device("cpu")
big = len(sys.argv) < 2 or sys.argv[1] != "q"
size = {"batch": 128, "hidden": 1024} if big else {"batch": 16, "hidden": 64}
n = 30 if big else 300
case = w2_mlp.ember(dev, size)
for _ in range(3):
    case.step()
    case.sync()
pr = cProfile.Profile()
pr.enable()
for _ in range(n):
    case.step()
    case.sync()
pr.disable()
pr.dump_stats(f"/tmp/w2over/w2_{'big' if big else 'q'}.prof")
st = pstats.Stats(pr)
st.sort_stats("tottime").print_stats(35)
