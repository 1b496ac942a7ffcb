import sys, os, time, resource
sys.path.insert(0, os.getcwd())
import ember as em
from benchmarks import w4_transformer as w4
e = w4.ember(em.Device("cpu"), w4.SIZES["cpu"])
for _ in range(5): e.step(); e.sync()
for _ in range(3):
    r0 = resource.getrusage(resource.RUSAGE_SELF); p = time.process_time()
    e.step(); e.sync()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    print("minflt", r1.ru_minflt - r0.ru_minflt, "cpu ms", (time.process_time() - p) * 1e3, "sys ms", (r1.ru_stime - r0.ru_stime) * 1e3)
