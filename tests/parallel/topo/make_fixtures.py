#!/usr/bin/env python3
"""tests/parallel/topo/make_fixtures.py — writes the `nvidia-smi topo -m` fixtures of
tests/parallel/topology_test.cpp in nvidia-smi's layout (tab-separated cells, " X " on the
diagonal, its legend; NIC columns named NIC0.. with a NIC legend in newer drivers, by device name
and space-aligned in older ones): an 8-GPU NVSwitch node on two sockets with four NICs, a
dual-socket PCIe node with two GPU pairs behind one switch each, and a VM's two vGPUs.
Usage: python3 tests/parallel/topo/make_fixtures.py (writes next to this script)."""
import os

os.chdir(os.path.dirname(os.path.abspath(__file__)))
legend = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def cell(c):
    return " X " if c == "X" else c


# 8 GPUs on NVSwitch (NV18 every pair), two sockets, 4 NICs: NIC k sits beside GPUs 2k, 2k+1.
G, N = 8, 4
head = "\t" + "\t".join([f"GPU{i}" for i in range(G)] + [f"NIC{k}" for k in range(N)] +
                        ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
rows = [head]


def sock(i):
    return i // 4


for i in range(G):
    links = ["X" if i == j else "NV18" for j in range(G)]
    nics = ["PIX" if k == i // 2 else ("NODE" if sock(i) == k // 2 else "SYS") for k in range(N)]
    aff = "0-47,96-143" if sock(i) == 0 else "48-95,144-191"
    rows.append(f"GPU{i}\t" + "\t".join(map(cell, links + nics)) + f"\t{aff}\t{sock(i)}\t\tN/A")
for k in range(N):
    links = ["PIX" if k == i // 2 else ("NODE" if sock(i) == k // 2 else "SYS") for i in range(G)]
    nn = ["X" if k == m else ("NODE" if k // 2 == m // 2 else "SYS") for m in range(N)]
    rows.append(f"NIC{k}\t" + "\t".join(map(cell, links + nn)))
nic_legend = "\nNIC Legend:\n\n" + "".join(f"  NIC{k}: mlx5_{k}\n" for k in range(N))
open("nvswitch8.txt", "w").write("\n".join(rows) + "\n" + legend + nic_legend)


# 4 PCIe GPUs on two sockets, pairs behind one switch each, an older driver's layout: one
# InfiniBand device column by name, no NUMA Affinity, cells aligned with spaces.
def pcie(i, j):
    if i == j:
        return "X"
    return "SYS" if i // 2 != j // 2 else "PIX"


def aligned(c):
    return f"{(' X' if c == 'X' else c):<8}"


cols = ["GPU0", "GPU1", "GPU2", "GPU3", "mlx4_0"]
rows = ["        " + "".join(f"{c:<8}" for c in cols) + "CPU Affinity"]
for i in range(4):
    cells = [pcie(i, j) for j in range(4)] + ["PHB" if i < 2 else "SYS"]
    aff = "0-9,20-29" if i < 2 else "10-19,30-39"
    rows.append(f"{'GPU%d' % i:<8}" + "".join(map(aligned, cells)) + aff)
rows.append(f"{'mlx4_0':<8}" + "".join(map(aligned, ["PHB", "PHB", "SYS", "SYS", "X"])))
open("pcie_dual_socket.txt", "w").write("\n".join(rows) + "\n" + legend)

# Two vGPUs of a VM: every path SYS (the hypervisor hides the topology), NUMA affinity N/A.
rows = ["\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID",
        "GPU0\t X \tSYS\t0-15\tN/A\t\tN/A", "GPU1\tSYS\t X \t0-15\tN/A\t\tN/A"]
open("vgpu_sys.txt", "w").write("\n".join(rows) + "\n" + legend)
