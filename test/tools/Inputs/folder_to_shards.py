"""Writes an ImageFolder's JPEGs as WebDataset tar shards, for graphrun's
--data shards tests:

  folder_to_shards.py DIR OUT_PREFIX PER_SHARD

OUT_PREFIX-000.tar, OUT_PREFIX-001.tar, ... of PER_SHARD samples each
(KEY.jpg and KEY.cls, the label as a decimal number), in the order
torchvision's ImageFolder lists DIR (sorted classes, then a sorted walk of
each class), so that the shards hold the folder's images in its order.
"""
import io
import os
import sys
import tarfile


def folder_order(root):
    classes = sorted(e for e in os.listdir(root)
                     if not e.startswith(".") and os.path.isdir(os.path.join(root, e)))
    for label, name in enumerate(classes):
        for folder, dirs, files in sorted(os.walk(os.path.join(root, name))):
            dirs.sort()
            for f in sorted(files):
                if f.lower().endswith((".jpg", ".jpeg")):
                    yield os.path.join(folder, f), label


def main():
    root, prefix, per_shard = sys.argv[1], sys.argv[2], int(sys.argv[3])
    samples = list(folder_order(root))
    for shard in range(0, len(samples), per_shard):
        with tarfile.open(f"{prefix}-{shard // per_shard:03d}.tar", "w",
                          format=tarfile.GNU_FORMAT) as tar:
            for index, (path, label) in enumerate(samples[shard:shard + per_shard], shard):
                for ext, data in (("jpg", open(path, "rb").read()),
                                  ("cls", str(label).encode())):
                    info = tarfile.TarInfo(f"{index:06d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main()
