"""Checks graphrun --bucket-sweep (test/tools/bucket-sweep.test): each cap's
row, re-cut on paper from one plan, predicts what the plan compiled at that
cap predicts from the same profile: the same number of buckets, the same
bytes on the wire, and a step within 0.1% (only the updates' order, which
the compiler groups by bucket, differs).

  check_bucket_sweep.py DIR SWEEP CAP=PLAN...
"""
import json
import math
import sys

d, sweep_name = sys.argv[1], sys.argv[2]
sweep = json.load(open(f"{d}/{sweep_name}.json"))["prediction"]["bucket_sweep"]
rows = {r["bucket_mb"]: r for r in sweep["rows"]}
assert sweep["first_bucket_mb"] == 1, sweep
for pair in sys.argv[3:]:
    cap, name = pair.split("=")
    row = rows[float(cap)]
    plan = json.load(open(f"{d}/{name}.json"))["prediction"]
    assert row["buckets"] == plan["buckets"], (cap, name, row["buckets"], plan["buckets"])
    assert math.isclose(row["wire_mib_per_step"], plan["wire_mib_per_step"], rel_tol=1e-9), (
        cap, name, row, plan["wire_mib_per_step"])
    by_ranks = {p["ranks"]: p for p in row["predictions"]}
    for real in plan["rows"]:
        paper = by_ranks[real["ranks"]]
        error = paper["step_ms"] / real["step_ms"] - 1
        assert abs(error) < 1e-3, (cap, name, real["ranks"], paper["step_ms"], real["step_ms"])
        print(f"{sweep_name} at {cap} MiB ({row['buckets']} buckets) vs {name}, "
              f"{real['ranks']} ranks: {error * 100:+.3f}%")
# The best cap is the shortest step's (the largest cap within 0.1% of it).
for best in sweep["best"]:
    steps = {r["bucket_mb"]: [p for p in r["predictions"] if p["ranks"] == best["ranks"]][0]
             for r in sweep["rows"]}
    shortest = min(s["step_ms"] for s in steps.values())
    assert best["bucket_mb"] == max(c for c, s in steps.items()
                                    if s["step_ms"] <= shortest * 1.001), (best, steps)
print("bucket sweep: ok")
