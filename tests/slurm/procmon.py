#!/usr/bin/env python3
"""Process-lifetime monitor + log summariser for tests/slurm/exp.sh.

procmon.py watch JOBID LOGFILE SECONDS
    Polls /proc every 0.1 s (from OUTSIDE the job) for the slurmstepd
    processes of JOBID ("slurmstepd: [JOBID.x]") and all their descendants;
    appends 'appear' / 'gone' lines (same format as siglog.py) to LOGFILE.
    Gives exact death times of processes that cannot log themselves
    (batch shell, srun, mpirun, SIGKILLed tasks).
procmon.py report LOGFILE [T0]
    Prints the events sorted, with times relative to T0 (default: first
    'MARK' line or first line), hiding the once-a-second 'alive' lines.
"""
import os, sys, time

def procs():
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                st = f.read()
            with open("/proc/%s/cmdline" % p, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        ppid = int(st[st.rindex(")") + 2:].split()[1])
        out[int(p)] = (ppid, cmd)
    return out

def watch(job, logf, secs):
    seen = {}
    end = time.time() + secs
    def log(pid, cmd, ev):
        with open(logf, "a") as f:
            f.write("%.3f mon r=- pid=%d ppid=0 pgid=0 %s %s\n" % (time.time(), pid, ev, cmd[:70]))
    while time.time() < end:
        ps = procs()
        roots = [p for p, (pp, c) in ps.items() if c.startswith("slurmstepd: [%s." % job)]
        tree = set(roots)
        grew = True
        while grew:
            grew = False
            for p, (pp, c) in ps.items():
                if pp in tree and p not in tree:
                    tree.add(p); grew = True
        for p in tree:
            if p not in seen:
                seen[p] = ps[p][1]; log(p, ps[p][1], "appear")
        for p in list(seen):
            if p not in ps and seen[p] is not None:
                log(p, seen[p], "gone"); seen[p] = None
        if seen and all(v is None for v in seen.values()) and not roots:
            break
        time.sleep(0.1)

def report(logf, t0=None):
    lines = [l.split(None, 6) for l in open(logf) if l.strip()]
    lines.sort(key=lambda x: float(x[0]))
    if t0 is None:
        marks = [float(l[0]) for l in lines if l[1] == "MARK"]
        t0 = marks[0] if marks else float(lines[0][0])
    started, exited = {}, set()
    for l in lines:
        ev = l[6] if len(l) > 6 else ""
        if ev.startswith("alive"):
            continue
        if ev.startswith("start"):
            started[l[3]] = l[1] + " " + l[2]
        if ev.startswith("exit"):
            exited.add(l[3])
        print("%+8.2f  %-6s %-6s %-10s %s" % (float(l[0]) - t0, l[1], l[2][2:], l[3], ev.rstrip()))
    for pid, who in started.items():
        if pid not in exited:
            try:
                last = float(open("%s.last.%s" % (logf, pid[4:])).read())
                print("   %s %s: no 'exit' line -> killed; last seen alive at %+.2f" % (who, pid, last - t0))
            except OSError:
                print("   %s %s: no 'exit' line (batch shell or killed)" % (who, pid))

if __name__ == "__main__":
    if sys.argv[1] == "watch":
        watch(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        report(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else None)
