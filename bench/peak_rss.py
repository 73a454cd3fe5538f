#!/usr/bin/env python3
"""bench/peak_rss.py OUT CMD...: runs CMD, writes the peak RSS (KiB) of the largest process it
waited for (getrusage's RUSAGE_CHILDREN: for `ete launch`, its largest rank) into OUT, and exits
with CMD's status."""
import resource
import subprocess
import sys

rc = subprocess.call(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write(f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\n")
sys.exit(rc)
