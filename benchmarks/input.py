#!/usr/bin/python3
"""The image input pipeline alone, beside PyTorch's DataLoader, and ResNet-50
training on JPEGs against synthetic data.

  benchmarks/input.py [--images 640] [--rounds 3] [--torch-python PY]
                      [--dali-python PY] [--skip-train] [--out benchmarks/results]
                      [--name input]

Makes a folder of ImageNet-size JPEGs (500x375 and 375x500, 10 classes,
quality 90: a smooth random field with grain, about as many bytes as an
ImageNet photo at that size), then times, in alternating rounds:

  graphrun  `graphrun --data imagefolder:DIR` training a model whose step is
            negligible (a linear layer on the 3x224x224 images), so its
            images/sec is the decode-and-augment pipeline's: TurboJPEG with
            DCT scaling, RandomResizedCrop(224) + flip, normalization;
            with 1 decoding thread and with every core
  pil       torchvision's ImageFolder (PIL decode) through a DataLoader with
            RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize,
            batch 32, with 1 worker and with one per core
  tvio      the same with torchvision.io.decode_jpeg and the v2 transforms on
            uint8 tensors
  dali      NVIDIA DALI's CPU pipeline (--dali-python: a Python with
            nvidia-dali-cuda120 from PyPI; it runs without a GPU): the file
            reader, decoding fused with the random crop, antialiased resize,
            flip and normalize, with 1 thread and with one per core

each over the whole folder a few times (first batches excluded). Then, unless
--skip-train, ResNet-50 v1.5 (batch 32, FP32) trained by graphrun on the same
folder and on synthetic data: the pipeline's cost to training. Records the
CPU model; writes NAME.json into --out.

Needs a build (`./setup.sh build`), Debian's python3-pil and python3-numpy
(this script runs under /usr/bin/python3) and a Python with torch and
torchvision (--torch-python).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_cpu import machine  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "bin")

# A model whose training step costs next to nothing beside decoding 32
# ImageNet JPEGs: the pipeline's throughput is what graphrun reports.
PROBE = """module {
  nn.parameter @fc.weight : tensor<10x150528xf32> = zeros
  nn.parameter @fc.bias : tensor<10xf32> = zeros
  func.func @forward(%images: tensor<?x3x224x224xf32>, %labels: tensor<?xi32>) -> tensor<f32> {
    %f = nn.flatten %images start_dim 1 : tensor<?x3x224x224xf32>
    %w = nn.load @fc.weight : tensor<10x150528xf32>
    %b = nn.load @fc.bias : tensor<10xf32>
    %logits = nn.linear %f, %w, %b : tensor<?x150528xf32>, tensor<10x150528xf32>, tensor<10xf32>
    %loss = nn.softmax_cross_entropy %logits, %labels label_smoothing 0.000000e+00 : tensor<?x10xf32>, tensor<?xi32>
    return %loss : tensor<f32>
  }
}
"""

TORCH_WORKER = r"""
import sys, time, json, torch, torchvision
from torchvision import transforms as T
from torchvision.transforms import v2
root, variant, workers, batches = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
norm = dict(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
if variant == "pil":
    ds = torchvision.datasets.ImageFolder(root, T.Compose([
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(**norm)]))
else:
    ds = torchvision.datasets.ImageFolder(
        root, v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                          v2.ToDtype(torch.float32, scale=True), v2.Normalize(**norm)]),
        loader=lambda p: torchvision.io.decode_jpeg(torchvision.io.read_file(p)))
loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, num_workers=workers,
                                     drop_last=True, persistent_workers=True, prefetch_factor=2)
done, warm, start = 0, 2, None
while done < batches + warm:
    for x, y in loader:
        done += 1
        if done == warm:
            start = time.perf_counter()
        if done == batches + warm:
            break
print(json.dumps({"images_per_sec": 32 * batches / (time.perf_counter() - start)}))
"""

DALI_WORKER = r"""
import sys, time, json
from nvidia.dali import pipeline_def, fn, types
root, threads, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

# DALI's CPU pipeline (no GPU: device_id=None): the file reader, the
# decoder fused with the random crop (it decodes the crop's region only),
# an antialiased resize to 224, then flip and normalize to CHW float32.
@pipeline_def(batch_size=32, num_threads=threads, device_id=None, seed=1, prefetch_queue_depth=2)
def pipe():
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
    images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                           random_area=[0.08, 1.0],
                                           random_aspect_ratio=[0.75, 4.0 / 3.0])
    images = fn.resize(images, resize_x=224, resize_y=224)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                      mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                      std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
                                      mirror=fn.random.coin_flip())
    return images, labels

p = pipe()
p.build()
for _ in range(2):
    p.run()
start = time.perf_counter()
for _ in range(batches):
    p.run()
print(json.dumps({"images_per_sec": 32 * batches / (time.perf_counter() - start)}))
"""


def make_folder(root, count):
    """`count` JPEGs in 10 class folders: low-frequency colour fields plus
    grain, 500x375 or 375x500, quality 90."""
    rng = np.random.default_rng(0)
    sizes = []
    for i in range(count):
        w, h = (500, 375) if i % 3 else (375, 500)
        coarse = rng.uniform(0, 255, size=(h // 25 + 1, w // 25 + 1, 3)).astype(np.uint8)
        field = np.asarray(Image.fromarray(coarse).resize((w, h), Image.BICUBIC), np.float64)
        pixels = np.clip(field + rng.normal(0, 12, size=field.shape), 0, 255).astype(np.uint8)
        folder = os.path.join(root, f"class{i % 10}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{i}.jpg")
        Image.fromarray(pixels).save(path, quality=90)
        sizes.append(os.path.getsize(path))
    return statistics.mean(sizes)


def graphrun(plan, data, steps, threads, data_threads, report):
    cmd = [os.path.join(BIN, "graphrun"), plan, "--data", data, "--steps", str(steps),
           "--warmup", "2", "--threads", str(threads), "--report", report]
    if data_threads:
        cmd += ["--data-threads", str(data_threads)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(report) as f:
        r = json.load(f)
    return r["total_images_per_sec"], r


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=640)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--torch-python", default="")
    parser.add_argument("--dali-python", default="")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    parser.add_argument("--name", default="input")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    work = tempfile.mkdtemp(prefix="graphc-input-")
    folder = os.path.join(work, "jpegs")
    mean_bytes = make_folder(folder, args.images)
    print(f"{args.images} JPEGs, {mean_bytes / 1024:.0f} KiB on average, in {folder}")
    with open(os.path.join(work, "probe.mlir"), "w") as f:
        f.write(PROBE)
    probe = os.path.join(work, "probe.plan")
    subprocess.run([os.path.join(BIN, "graphc"), "compile", os.path.join(work, "probe.mlir"),
                    "--batch-size", "32", "-o", probe], check=True, stdout=subprocess.DEVNULL)
    steps = 3 * (args.images // 32)
    variants = [("graphrun", 1), ("graphrun", cores)]
    if args.torch_python:
        variants += [("pil", 1), ("pil", cores), ("tvio", 1), ("tvio", cores)]
    if args.dali_python:
        variants += [("dali", 1), ("dali", cores)]
    rates = {f"{v}/{t}": [] for v, t in variants}
    for r in range(args.rounds):
        for variant, threads in variants:
            if variant == "graphrun":
                # One thread for the step; the decoders take the rest (the
                # first decoder is the prefetching thread itself).
                rate, _ = graphrun(probe, "imagefolder:" + folder, steps, 1, threads,
                                   os.path.join(work, "probe.json"))
            else:
                if variant == "dali":
                    cmd = [args.dali_python, "-c", DALI_WORKER, folder, str(threads), str(steps)]
                else:
                    cmd = [args.torch_python, "-c", TORCH_WORKER, folder, variant, str(threads),
                           str(steps)]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                rate = json.loads(out.strip().splitlines()[-1])["images_per_sec"]
            rates[f"{variant}/{threads}"].append(rate)
            print(f"round {r + 1}: {variant} with {threads} thread(s): {rate:.1f} images/sec",
                  flush=True)
    results = {"machine": machine(), "cores": cores, "images": args.images,
               "mean_jpeg_bytes": mean_bytes, "batch": 32, "rounds": args.rounds,
               "pipeline": {k: {"images_per_sec": statistics.median(v), "rounds": v}
                            for k, v in rates.items()}}
    print("\npipeline alone (decode + RandomResizedCrop(224) + flip + normalize), "
          "median images/sec:")
    for key, value in results["pipeline"].items():
        variant, threads = key.split("/")
        per = value["images_per_sec"] / int(threads)
        print(f"  {variant:9s} {threads} thread(s): {value['images_per_sec']:7.1f} "
              f"({per:.1f} per thread)")
    if not args.skip_train:
        plan = os.path.join(work, "resnet50.plan")
        subprocess.run([os.path.join(BIN, "graphc"), "compile",
                        os.path.join(ROOT, "models", "resnet50.mlir"), "--batch-size", "32",
                        "-o", plan], check=True, stdout=subprocess.DEVNULL)
        train = {"synthetic": [], "imagefolder": []}
        for r in range(args.rounds):
            for data in train:
                spec = data if data == "synthetic" else "imagefolder:" + folder
                rate, _ = graphrun(plan, spec, 8, cores, 0, os.path.join(work, "train.json"))
                train[data].append(rate)
                print(f"round {r + 1}: resnet50 on {data}: {rate:.2f} images/sec", flush=True)
        results["resnet50"] = {k: {"images_per_sec": statistics.median(v), "rounds": v}
                               for k, v in train.items()}
        ratio = (results["resnet50"]["imagefolder"]["images_per_sec"] /
                 results["resnet50"]["synthetic"]["images_per_sec"])
        results["resnet50"]["jpeg_over_synthetic"] = ratio
        print(f"resnet50 batch 32 on JPEGs: {ratio:.3f}x synthetic")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, args.name + ".json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
