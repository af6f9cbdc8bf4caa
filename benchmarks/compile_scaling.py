#!/usr/bin/python3
"""How graphc's compile time grows with the length of one fused elementwise chain.

  benchmarks/compile_scaling.py [--sizes 2500,5000,10000,20000] [--repeats 3]

Generates a model whose forward applies N chained nn.relu to its input (one
fused group of N + 1 ops per step; test/tools/Inputs/chain_model.py), compiles
it with and without fusion, and prints the median wall time per size, per
1000 ops, and the growth factor from each size to the next (2.0 for linear
growth when sizes double, 4.0 for quadratic).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="2500,5000,10000,20000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--build", default=os.environ.get("GRAPHC_BUILD_DIR", os.path.join(ROOT, "build")))
    args = parser.parse_args()
    graphc = os.path.join(args.build, "bin", "graphc")
    if not os.path.exists(graphc):
        sys.exit(f"compile_scaling.py: {graphc} not found; run ./setup.sh build first")
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'ops':>8} {'fused s':>9} {'per 1000':>9} {'growth':>7} {'unfused s':>10} {'growth':>7}")
    previous = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            model = os.path.join(tmp, f"chain{n}.mlir")
            with open(model, "w") as f:
                subprocess.run([sys.executable, os.path.join(ROOT, "test/tools/Inputs/chain_model.py"),
                                str(n)], stdout=f, check=True)
            row = {}
            for mode, flags in (("fused", []), ("unfused", ["--no-fuse"])):
                times = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    subprocess.run([graphc, "compile", model, "--batch-size", "2", *flags,
                                    "-o", os.path.join(tmp, "x.plan")],
                                   stdout=subprocess.DEVNULL, check=True)
                    times.append(time.perf_counter() - start)
                row[mode] = statistics.median(times)
            growth = {m: (row[m] / previous[m] if previous else float("nan")) for m in row}
            print(f"{n + 1:>8} {row['fused']:>9.2f} {1000 * row['fused'] / (n + 1):>9.3f} "
                  f"{growth['fused']:>7.2f} {row['unfused']:>10.2f} {growth['unfused']:>7.2f}")
            previous = row


if __name__ == "__main__":
    main()
