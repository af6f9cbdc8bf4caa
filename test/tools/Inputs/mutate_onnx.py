#!/usr/bin/env python3
"""Robustness of graphc import against damaged files: runs it on mutants of
a valid model (cut at many points, bytes flipped, varint lengths inflated),
each of which must import (exit 0) or be refused on one line (exit 1):
never a signal, a hang, or an error of more than one line.

  mutate_onnx.py GRAPHC MODEL.onnx WORKDIR
"""
import os
import random
import subprocess
import sys


def main():
    graphc, model, work = sys.argv[1:4]
    data = open(model, "rb").read()
    rng = random.Random(7)
    mutants = [data[:cut] for cut in range(0, len(data), max(1, len(data) // 60))]
    for _ in range(120):
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.choice([0x00, 0xff, 0x7f, 0x80, rng.randrange(256)])
        mutants.append(bytes(b))
    for _ in range(40):  # a length prefix made huge
        b = bytearray(data)
        at = rng.randrange(len(b) - 5)
        b[at:at + 5] = b"\xff\xff\xff\xff\x0f"
        mutants.append(bytes(b))
    outcomes = {0: 0, 1: 0}
    for i, m in enumerate(mutants):
        path = os.path.join(work, f"mutant{i}.onnx")
        with open(path, "wb") as f:
            f.write(m)
        r = subprocess.run([graphc, "import", path, "-o", os.path.join(work, "m.mlir")],
                           capture_output=True, timeout=60)
        stderr = r.stderr.decode("utf-8", "replace")
        if r.returncode not in (0, 1):
            sys.exit(f"mutant {i}: exit {r.returncode}\n{stderr}")
        if r.returncode == 1 and len(stderr.strip().splitlines()) != 1:
            sys.exit(f"mutant {i}: not one line:\n{stderr}")
        outcomes[r.returncode] += 1
        os.remove(path)
    print(f"{len(mutants)} mutants: {outcomes[0]} imported, {outcomes[1]} refused on one line, "
          "none crashed")


if __name__ == "__main__":
    main()
