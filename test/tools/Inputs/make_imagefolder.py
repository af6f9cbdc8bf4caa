"""Writes Fashion-MNIST images as JPEG files in torchvision's ImageFolder
layout, for graphrun's --data imagefolder tests:

  make_imagefolder.py OUT TRAIN_COUNT VAL_COUNT [--rgb SIZE]

OUT/train/classK/N.jpg from the first TRAIN_COUNT training images and
OUT/val/classK/N.jpg from the first VAL_COUNT test images (K the label,
N the index), grayscale at 28x28 and quality 95; with --rgb, colour JPEGs
of SIZE x SIZE (the image scaled up, tinted by its label), as an ImageNet-
style folder of larger colour images.
"""
import argparse
import gzip
import os

import numpy as np
from PIL import Image

FASHION = "/usr/share/datasets/fashion-mnist"


def idx(name):
    with gzip.open(os.path.join(FASHION, name)) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def write(out, images, labels, count, rgb):
    for n in range(count):
        folder = os.path.join(out, f"class{labels[n]}")
        os.makedirs(folder, exist_ok=True)
        image = Image.fromarray(images[n], "L")
        if rgb:
            tint = np.array([1.0, 0.5 + labels[n] / 18, 1.0 - labels[n] / 18])
            pixels = np.asarray(image.resize((rgb, rgb), Image.BILINEAR), np.float64)
            image = Image.fromarray((pixels[:, :, None] * tint).astype(np.uint8), "RGB")
        image.save(os.path.join(folder, f"{n}.jpg"), quality=95)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("train", type=int)
    parser.add_argument("val", type=int)
    parser.add_argument("--rgb", type=int, default=0)
    args = parser.parse_args()
    write(os.path.join(args.out, "train"), idx("train-images-idx3-ubyte.gz"),
          idx("train-labels-idx1-ubyte.gz"), args.train, args.rgb)
    write(os.path.join(args.out, "val"), idx("t10k-images-idx3-ubyte.gz"),
          idx("t10k-labels-idx1-ubyte.gz"), args.val, args.rgb)


if __name__ == "__main__":
    main()
