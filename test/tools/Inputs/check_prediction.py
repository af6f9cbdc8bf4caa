"""Checks graphrun --predict's JSON (test/tools/predict.test): one rank's
prediction is the measured step; with every allreduce after backward, two
ranks on 1 Gbit/s without latency wait (nearly) S / B for the buckets' bytes (the
fmnist_cnn gradients: 421,738 floats), half of that on an fp16 wire; with
overlap they wait no longer; 16 ranks in one node use the node's link, 32 on
two nodes add the link between them.

  check_prediction.py DIR
"""
import json
import math
import sys

d = sys.argv[1]


def load(name):
    return json.load(open(f"{d}/{name}.json"))["prediction"]


def close(a, b, rel=1e-9, what=""):
    assert math.isclose(a, b, rel_tol=rel, abs_tol=1e-9), (what, a, b)


PARAMS = 421738
now = load("now")
report = json.load(open(f"{d}/now.json"))
rows = {r["ranks"]: r for r in now["rows"]}
close(now["measured_step_ms"], report["step_ms_median"], what="measured step")
close(rows[1]["step_ms"], report["step_ms_median"], what="one rank = the measured step")
close(rows[1]["total_images_per_sec"], 16 * 1000 / report["step_ms_median"], what="rate")
assert rows[1]["exposed_comm_ms"] == 0 and rows[1]["comm_ms"] == 0, rows[1]
close(now["wire_mib_per_step"], PARAMS * 4 / 2**20, what="fp32 wire bytes")
# Stragglers: the measured spread of the steps times the expected largest of
# n standard normal draws (E[max of 2] = 1/sqrt(pi), of 4 = 1.0293754).
jitter = report["step_ms_jitter"]
close(now["step_jitter_ms"], jitter, what="jitter")
for n, e_max in ((2, 1 / math.sqrt(math.pi)), (4, 1.0293754)):
    close(rows[n]["straggler_ms"], jitter * e_max, rel=1e-6, what=f"{n}: stragglers")
for n in (2, 4, 64):
    r = rows[n]
    assert 0 < r["scaling_efficiency"] <= 1 + 1e-12, r
    close(r["step_ms"], rows[1]["step_ms"] + r["exposed_comm_ms"] + r["straggler_ms"],
          what=f"{n}: step = compute + stalls + stragglers")
# More ranks never predict a shorter step on the same links.
assert rows[2]["step_ms"] <= rows[4]["step_ms"] <= rows[64]["step_ms"], now["rows"]

bits = 1e9 / 8  # 1 Gbit/s in bytes
step = report["step_ms_median"]
for name, wire_bytes in (("after", PARAMS * 4), ("half", PARAMS * 2)):
    p = load(name)
    r = {r["ranks"]: r for r in p["rows"]}
    close(r[1]["step_ms"], step, what=f"{name}: one rank")
    # Rabenseifner on 2 ranks moves S / B; the buckets share the link, all
    # started after backward, so the last finishes after all their bytes:
    # only the updates of the buckets done first run meanwhile.
    comm = wire_bytes / bits * 1000
    close(r[2]["comm_ms"], comm, rel=1e-6, what=f"{name}: comm")
    assert 0.9 * comm <= r[2]["exposed_comm_ms"] <= comm * (1 + 1e-9), (name, r[2], comm)
    close(r[2]["step_ms"], step + r[2]["exposed_comm_ms"] + r[2]["straggler_ms"], rel=1e-9,
          what=f"{name}: step")
    close(r[2]["wire_mib_per_rank"], wire_bytes / 2**20, what=f"{name}: wire")
overlap = {r["ranks"]: r for r in load("overlap")["rows"]}
after = {r["ranks"]: r for r in load("after")["rows"]}
assert overlap[2]["exposed_comm_ms"] <= after[2]["exposed_comm_ms"] + 1e-9, (overlap, after)

nodes = load("nodes")
r = {r["ranks"]: r for r in nodes["rows"]}
assert r[2]["nodes"] == 1 and r[16]["nodes"] == 1 and r[32]["nodes"] == 2, nodes["rows"]
# Within the node: 2 ranks at 100 GB/s move S / B.
close(r[2]["comm_ms"], PARAMS * 4 / 100e9 * 1000, rel=1e-6, what="2 ranks in a node")
# 16 ranks in one node: Rabenseifner's 2 * 15/16 * S at 100 GB/s (a ring
# moves the same bytes).
close(r[16]["comm_ms"], 2 * 15 / 16 * PARAMS * 4 / 100e9 * 1000, rel=1e-6, what="16 in a node")
# 32 on 2 nodes: the node's ring, then the nodes' allreduce of S through 1 Gbit/s.
close(r[32]["comm_ms"], (2 * 15 / 16 * PARAMS * 4 / 100e9 + PARAMS * 4 / bits) * 1000, rel=1e-6,
      what="2 nodes of 16")
print("prediction checks passed")
