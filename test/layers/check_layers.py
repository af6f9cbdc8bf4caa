#!/usr/bin/env python3
"""The project's layer rules as folder rules, checked on every #include.

  check_layers.py SOURCE_DIR

Each folder's library sources may include only the folders below it (test
files, test helpers and the fuzzer may include any runtime folder). Prints
every violation as FILE:LINE: RULE and exits 1 if there is one.
"""
import os
import re
import sys

# (folder, what its sources may include), most specific folder first. A
# path ending in "/" allows the folder, anything else that one header.
RULES = [
    ("contract/", ["contract/"]),
    ("dialects/", ["contract/", "dialects/"]),
    ("compiler/", ["contract/", "dialects/", "compiler/"]),
    ("tools/graphc/", ["contract/", "dialects/", "compiler/", "tools/graphc/"]),
    ("tools/graphc-opt/", ["contract/", "dialects/", "compiler/"]),
    ("runtime/comm/", ["contract/", "runtime/comm/"]),
    ("runtime/core/", ["contract/", "runtime/comm/", "runtime/core/"]),
    ("runtime/backends/cpu/", ["contract/", "runtime/comm/", "runtime/core/",
                               "runtime/backends/cpu/"]),
    ("runtime/backends/cuda/", ["contract/", "runtime/comm/", "runtime/core/",
                                "runtime/backends/cuda/"]),
    ("runtime/backends/", ["contract/", "runtime/comm/", "runtime/core/", "runtime/backends/"]),
    ("runtime/train/", ["contract/", "runtime/comm/", "runtime/core/", "runtime/train/",
                        "runtime/backends/backend_factory.h"]),
    ("tools/graphrun/", ["contract/", "runtime/comm/", "runtime/core/", "runtime/train/",
                         "runtime/backends/backend_factory.h", "tools/graphrun/"]),
    # graphc-linkem reads links as graphrun --predict does, and nothing else.
    ("tools/linkem/", ["contract/", "runtime/train/scaling_model.h", "tools/linkem/"]),
]
PROJECT = ("contract/", "dialects/", "compiler/", "runtime/", "tools/")
SOURCES = (".h", ".cc", ".cpp", ".cu", ".c")


def exempt(path):
    """Tests and test helpers use whatever they test with."""
    name = os.path.basename(path)
    return (name.endswith(("_test.cc", "Test.cpp")) or "/testing/" in path or
            "/testdata/" in path or path.startswith("runtime/fuzz/"))


def main():
    root = sys.argv[1]
    problems, checked = [], 0
    for top in ("contract", "dialects", "compiler", "runtime", "tools"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                if exempt(path):
                    continue
                rule = next((r for r in RULES if path.startswith(r[0])), None)
                if rule is None:
                    problems.append(f"{path}: in no layer (add its folder to check_layers.py)")
                    continue
                checked += 1
                with open(os.path.join(root, path), errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                        if not m or not m.group(1).startswith(PROJECT):
                            continue
                        target = m.group(1)
                        if not any(target == a or (a.endswith("/") and target.startswith(a))
                                   for a in rule[1]):
                            problems.append(f"{path}:{number}: {rule[0]} may not include "
                                            f"{target}")
    for p in problems:
        print(p)
    print(f"check_layers: {checked} sources in {len(RULES)} folders, "
          f"{len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
