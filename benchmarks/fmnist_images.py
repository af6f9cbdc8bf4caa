#!/usr/bin/python3
"""The same model trained from image files as from arrays: fmnist_cnn for a
few epochs on Fashion-MNIST read from Debian's IDX files, and on the same
images written as JPEG files (an ImageFolder) and as WebDataset tar shards
of those files.

  benchmarks/fmnist_images.py [--epochs 5] [--out benchmarks/results]
                              [--name fmnist_images]

Writes all 60,000 training and 10,000 test images (grayscale, 28x28, JPEG
quality 95) with test/tools/Inputs/make_imagefolder.py, shards of 5,000
with test/tools/Inputs/folder_to_shards.py, then trains fmnist_cnn (batch 64,
SGD lr 0.01, seed 1) for EPOCHS epochs from each and evaluates on the whole
test split: the accuracies side by side, and images/sec. The IDX path
normalizes with the training set's mean and deviation; the image paths
give pixels in [0, 1] (--augment none: whole images, no crops), so the
figures also show what that normalization is worth. Records the CPU model;
writes NAME.json into --out.

Needs a build (`./setup.sh build`) and Debian's python3-pil, python3-numpy
and dataset-fashion-mnist.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_cpu import machine  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "bin")
INPUTS = os.path.join(ROOT, "test", "tools", "Inputs")


def train(plan, data, epochs, report, extra):
    cmd = [os.path.join(BIN, "graphrun"), plan, "--data", data, "--epochs", str(epochs),
           "--eval", "--seed", "1", "--display-every", "100000", "--report", report] + extra
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(report) as f:
        return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--name", default="fmnist_images")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "fm")
        subprocess.run([sys.executable, os.path.join(INPUTS, "make_imagefolder.py"), folder,
                        "60000", "10000"], check=True)
        os.makedirs(os.path.join(tmp, "shards"))
        for split in ("train", "val"):
            subprocess.run([sys.executable, os.path.join(INPUTS, "folder_to_shards.py"),
                            os.path.join(folder, split), os.path.join(tmp, "shards", split),
                            "5000"], check=True)
        plan = os.path.join(tmp, "cnn.plan")
        subprocess.run([os.path.join(BIN, "graphc"), "compile",
                        os.path.join(ROOT, "models", "fmnist_cnn.mlir"), "--batch-size", "64",
                        "--lr", "0.01", "-o", plan], check=True, stdout=subprocess.DEVNULL)
        runs = {
            "idx": ("fashion-mnist", []),
            "imagefolder": ("imagefolder:" + folder, ["--augment", "none"]),
            "shards": ("shards:" + os.path.join(tmp, "shards", "train-*.tar"),
                       ["--augment", "none", "--eval-data",
                        "shards:" + os.path.join(tmp, "shards", "val-*.tar")]),
        }
        results = {}
        for name, (data, extra) in runs.items():
            r = train(plan, data, args.epochs, os.path.join(tmp, name + ".json"), extra)
            results[name] = {"test_accuracy": r["test_accuracy"], "final_loss": r["final_loss"],
                             "images_per_sec": r["total_images_per_sec"],
                             "skipped_images": r.get("skipped_images", 0)}
            print(f"{name:12s} test accuracy {r['test_accuracy']:.4f}  final loss "
                  f"{r['final_loss']:.4f}  {r['total_images_per_sec']:.0f} images/sec",
                  flush=True)
    out = {"machine": machine(), "epochs": args.epochs, "model": "fmnist_cnn", "batch": 64,
           "lr": 0.01, "seed": 1, "runs": results,
           "command": "benchmarks/fmnist_images.py --epochs %d" % args.epochs}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, args.name + ".json"), "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
