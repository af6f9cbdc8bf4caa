"""Writes NumPy .npy files with the standard library only, for the --data npy:
tests: a learnable toy task (the label is which quarter of the image is
bright) and broken variants.

  make_npy.py DIR
"""
import random
import struct
import sys


def save(path, descr, shape, payload, fortran=False, version=1):
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (
        descr, "True" if fortran else "False", "".join(f"{d}, " for d in shape).rstrip(" ")
        if len(shape) == 1 else ", ".join(str(d) for d in shape))
    prefix = 10 if version == 1 else 12
    header += " " * ((64 - (prefix + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY" + bytes([version, 0]))
        f.write(struct.pack("<H" if version == 1 else "<I", len(header)))
        f.write(header.encode("latin1") + payload)


def main():
    out = sys.argv[1]
    rng = random.Random(0)
    n = 256
    labels, pixels = [], bytearray()
    for _ in range(n):
        label = rng.randrange(4)
        labels.append(label)
        for y in range(28):
            for x in range(28):
                bright = (y >= 14) * 2 + (x >= 14) == label
                pixels.append(min(255, max(0, int(rng.gauss(200 if bright else 40, 30)))))
    floats = b"".join(struct.pack("<f", p / 255.0) for p in pixels)
    save(f"{out}/images_f32.npy", "<f4", (n, 1, 28, 28), floats)
    save(f"{out}/images_u8.npy", "|u1", (n, 28, 28), bytes(pixels), version=2)
    save(f"{out}/labels_i64.npy", "<i8", (n,), b"".join(struct.pack("<q", l) for l in labels))
    save(f"{out}/labels_i32.npy", "<i4", (n,), b"".join(struct.pack("<i", l) for l in labels))
    # Broken ones.
    save(f"{out}/images_f64.npy", "<f8", (n, 1, 28, 28), b"\0" * (8 * len(pixels)))
    save(f"{out}/images_fortran.npy", "<f4", (n, 1, 28, 28), floats, fortran=True)
    save(f"{out}/images_short.npy", "<f4", (n, 1, 28, 28), floats[:-4])
    save(f"{out}/images_rgb.npy", "|u1", (n, 3, 28, 28), bytes(pixels) * 3)
    save(f"{out}/labels_few.npy", "<i4", (n - 1,), b"".join(struct.pack("<i", l) for l in labels[1:]))
    save(f"{out}/labels_big.npy", "<i4", (n,), b"".join(struct.pack("<i", 12) for l in labels))
    with open(f"{out}/not.npy", "wb") as f:
        f.write(b"PK\x03\x04 this is a zip file")


if __name__ == "__main__":
    main()
