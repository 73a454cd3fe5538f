#!/usr/bin/env python3
"""Signal logger used by the Slurm signalling experiments (tests/slurm/exp.sh).

siglog.py LABEL LOGFILE [RUN_S] [AFTER_TERM_S]

Appends one line per event to LOGFILE:
  <epoch.sec> <LABEL> r=<rank> pid= ppid= pgid= <event>
Events: start (with SLURM_* bits of the environment), sig=NAME, alive
(once a second), exit.  On SIGTERM/SIGINT it keeps running AFTER_TERM_S
(default 20) more seconds to see whether/when SIGKILL follows: a SIGKILL is
visible as a missing 'exit' line; LOGFILE.last.<pid> holds the last time the
process was seen alive (updated every 0.1 s).
"""
import os, signal, sys, time

label, logf = sys.argv[1], sys.argv[2]
run_s = float(sys.argv[3]) if len(sys.argv) > 3 else 300
after_term = float(sys.argv[4]) if len(sys.argv) > 4 else 20
rank = os.environ.get("SLURM_PROCID", os.environ.get("OMPI_COMM_WORLD_RANK", "-"))
if "OMPI_COMM_WORLD_RANK" in os.environ:
    rank = "mpi" + os.environ["OMPI_COMM_WORLD_RANK"]
pid = os.getpid()

def log(ev):
    line = "%.3f %s r=%s pid=%d ppid=%d pgid=%d %s\n" % (
        time.time(), label, rank, pid, os.getppid(), os.getpgid(0), ev)
    fd = os.open(logf, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line.encode()); os.close(fd)

deadline = time.time() + run_s
def handler(sig, frame):
    global deadline
    log("sig=" + signal.Signals(sig).name)
    if sig in (signal.SIGTERM, signal.SIGINT):
        deadline = min(deadline, time.time() + after_term)

for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1,
          signal.SIGUSR2, signal.SIGCONT, signal.SIGQUIT, signal.SIGALRM,
          signal.SIGXCPU):
    signal.signal(s, handler)

env = " ".join("%s=%s" % (k, os.environ[k]) for k in (
    "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_RESTART_COUNT", "SLURM_JOB_END_TIME")
    if k in os.environ)
log("start " + env)
last = "%s.last.%d" % (logf, pid)
n = 0
while time.time() < deadline:
    with open(last, "w") as f:
        f.write("%.3f\n" % time.time())
    time.sleep(0.1)
    n += 1
    if n % 10 == 0:
        log("alive")
log("exit")
