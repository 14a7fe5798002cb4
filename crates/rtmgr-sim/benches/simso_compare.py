#!/usr/bin/env python3
# Run: python3 -m venv v && v/bin/pip install simso && v/bin/python crates/rtmgr-sim/benches/simso_compare.py 20000
# Same task set for rtmgr-sim: rtmgr lb scenarios/simso-compare.lbu --sim --balancer linux
# SimSo on a task set comparable to ARTiS §3.3: 4 CPUs, 3 "RT0" periodic tasks
# (period 10 ms, WCET 9 ms, one per CPU 1-3) and 13 periodic "Linux" tasks, global EDF (simso.schedulers.EDF).
import sys, time
from simso.core import Model
from simso.configuration import Configuration
dur_ms = float(sys.argv[1]) if len(sys.argv) > 1 else 2000
cfg = Configuration()
cfg.duration = dur_ms * cfg.cycles_per_ms
for i in range(3):
    cfg.add_task(name=f"rt0_{i}", identifier=i + 1, period=10, activation_date=0, wcet=9, deadline=10)
for i in range(13):
    cfg.add_task(name=f"linux_{i}", identifier=100 + i, period=100, activation_date=0, wcet=2.3, deadline=100)
for c in range(4):
    cfg.add_processor(name=f"CPU {c}", identifier=c + 1)
cfg.scheduler_info.clas = "simso.schedulers.EDF"
cfg.check_all()
m = Model(cfg)
t0 = time.time()
m.run_model()
wall = time.time() - t0
n = len(m.logs)
print(f'{{"simulated_ms": {dur_ms}, "log_events": {n}, "wall_s": {wall:.3f}, "events_per_s": {n / wall:.0f}}}')
