#!/usr/bin/python3
"""Scrapes a training run with Debian's real Prometheus server, for ETE's tests.

Usage: prometheus_scrape.py WORKDIR -- ETE_TRAIN_COMMAND...

Starts the training command with monitor.prometheus_port set to a free port, parses its /metrics
with prometheus_client's parser (names, types, the `ete_` prefix, counters ending in _total),
starts `prometheus` on 127.0.0.1 scraping it every second, and waits until the server's HTTP
query API returns the run's ete_tokens_per_second and a positive ete_steps_total. Prints a JSON
summary; exits non-zero (with the reason) otherwise. Everything it starts is stopped; the whole
check gives up after 90 s.

Debian packages: prometheus, python3-prometheus-client.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

DEADLINE = time.time() + 90


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def wait_for(what, fn):
    last = None
    while time.time() < DEADLINE:
        try:
            v = fn()
            if v is not None:
                return v
        except Exception as e:  # not up yet
            last = e
        time.sleep(0.2)
    sys.exit(f"timed out waiting for {what} (last error: {last})")


def check_exposition(text):
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name, f in fams.items():
        if not name.startswith("ete_"):
            sys.exit(f"metric {name}: expected the ete_ prefix")
        if f.type == "counter":
            for s in f.samples:
                if not s.name.endswith("_total"):
                    sys.exit(f"counter sample {s.name}: expected a _total suffix")
    # prometheus_client strips _total from counter family names.
    for need in ("ete_steps", "ete_tokens_per_second", "ete_loss", "ete_learning_rate",
                 "ete_grad_norm", "ete_mfu_ratio", "ete_step_seconds", "ete_skipped_steps",
                 "ete_seconds_since_last_checkpoint", "ete_peak_rss_bytes",
                 "ete_rank_straggler_score"):
        if need not in fams:
            sys.exit(f"/metrics lacks {need}: has {sorted(fams)}")
    if fams["ete_steps"].type != "counter":
        sys.exit("ete_steps_total: expected a counter")
    return fams


def query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    r = json.loads(get(url))
    if r.get("status") != "success" or not r["data"]["result"]:
        return None
    return float(r["data"]["result"][0]["value"][1])


def main():
    work = sys.argv[1]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    ete_port, prom_port = free_port(), free_port()
    cmd += ["--set", f"monitor.prometheus_port={ete_port}"]
    procs = []
    try:
        log = open(os.path.join(work, "train.log"), "w")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        text = wait_for("/metrics after a step", lambda: (lambda t: t if "\nete_loss " in t else None)(
            get(f"http://127.0.0.1:{ete_port}/metrics")))
        fams = check_exposition(text)
        with open(os.path.join(work, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\n"
                    "scrape_configs:\n  - job_name: ete\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{ete_port}']\n")
        procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={work}/prometheus.yml",
             f"--storage.tsdb.path={work}/tsdb", f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "prometheus.log"), "w")))
        tps = wait_for("ete_tokens_per_second in Prometheus",
                       lambda: query(prom_port, "ete_tokens_per_second"))
        steps = wait_for("a positive ete_steps_total in Prometheus",
                         lambda: (lambda v: v if v and v > 0 else None)(
                             query(prom_port, "ete_steps_total")))
        print(json.dumps({"tokens_per_second": tps, "steps_total": steps,
                          "families": len(fams)}))
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
