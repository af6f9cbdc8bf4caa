"""Checks of mixed-precision training runs, with NumPy (the GradScaler rule)
and the standard library.

  amp_check.py npy DIR [EVERY]          writes DIR/images.npy, DIR/labels.npy: 256
                                        MNIST-shaped examples, every EVERY-th
                                        (default 32nd) image with pixels of 1e6
                                        (finite in f32, inf in f16: its batch
                                        overflows)
  amp_check.py trajectory LOG INIT WINDOW
                                        the loss_scale / skipped columns of a
                                        `graphrun --display-every 1` log against
                                        GradScaler's rule (x0.5 on overflow, never
                                        below 1; x2 after WINDOW finite steps in a
                                        row) replayed from INIT on the overflows
                                        the skipped count shows
  amp_check.py unchanged A B NAME...    the tensors NAME of checkpoints A and B
                                        have the same bytes
  amp_check.py skipped-then-trains LOG  the first steps skipped, none in the last 15
"""
import struct
import sys

import numpy as np

import safetensors_tool  # the checkpoint reader of the other tests, beside this file


def tensor_bytes(path):
    """Each tensor's bytes, by name."""
    header, body = safetensors_tool.read(path)
    return {name: body[info["data_offsets"][0]:info["data_offsets"][1]]
            for name, info in safetensors_tool.tensors(header).items()}


def rows(log):
    """(step, loss, scale, skipped) of each display line."""
    out = []
    for line in open(log):
        parts = line.rstrip("\n").split("\t")
        if len(parts) == 5 and parts[0].isdigit():
            out.append((int(parts[0]), float(parts[2]), float(parts[3]), int(parts[4])))
    if not out:
        sys.exit(f"{log}: no display lines with loss_scale and skipped columns")
    return out


def save_npy(path, array):
    array = np.ascontiguousarray(array)
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (
        array.dtype.str, tuple(array.shape))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(array.tobytes())


def main():
    cmd = sys.argv[1]
    if cmd == "npy":
        rng = np.random.default_rng(0)
        labels = rng.integers(0, 10, 256).astype(np.int32)
        images = rng.random((256, 1, 28, 28), dtype=np.float32) * 0.1
        images[np.arange(256) % 10 == labels, 0, 0, :] += 1.0  # learnable
        images[::int(sys.argv[3]) if len(sys.argv) > 3 else 32] = 1e6
        save_npy(f"{sys.argv[2]}/images.npy", images)
        save_npy(f"{sys.argv[2]}/labels.npy", labels)
    elif cmd == "trajectory":
        log, scale, window = sys.argv[2], np.float32(sys.argv[3]), int(sys.argv[4])
        good, skipped, grew = 0, 0, 0
        table = rows(log)
        assert [r[0] for r in table] == list(range(1, len(table) + 1)), "display every step"
        for step, loss, got, count in table:
            found = count - skipped
            assert found in (0, 1), (step, count, skipped)
            assert np.isfinite(loss) or found == 1, f"step {step}: loss {loss}, not skipped"
            skipped = count
            if found:
                scale, good = max(scale * np.float32(0.5), np.float32(1.0)), 0
            elif good + 1 >= window:
                scale, good, grew = scale * np.float32(2.0), 0, grew + 1
            else:
                good += 1
            assert got == scale, f"step {step}: loss scale {got}, GradScaler gives {scale}"
        assert 0 < skipped < len(table), f"{skipped} of {len(table)} steps skipped"
        assert grew > 0, "the scale never grew"
        print(f"trajectory: {len(table)} steps, {skipped} skipped, {grew} doublings, "
              f"final scale {scale:g}: as GradScaler's rule")
    elif cmd == "unchanged":
        a, b = tensor_bytes(sys.argv[2]), tensor_bytes(sys.argv[3])
        for name in sys.argv[4:]:
            assert a[name] == b[name], f"{name} changed"
        print(f"unchanged: {len(sys.argv) - 4} tensors")
    elif cmd == "skipped-then-trains":
        # The first steps overflow one after the other, halving the scale
        # each time; once it fits, a few more overflows may come while the
        # gradients are large, then none: the last 15 steps all apply.
        table = rows(sys.argv[2])
        counts = [r[3] for r in table]
        leading = next(i for i, c in enumerate(counts) if c == i)
        assert leading >= 3, f"only {leading} leading steps skipped: {counts}"
        assert counts[:leading] == list(range(1, leading + 1)), counts
        assert len(counts) > 15 and counts[-1] == counts[-16], f"skips at the end: {counts}"
        assert all(np.isfinite(r[1]) for r in table[-15:]), "a loss at the end is not finite"
        assert 1 <= table[-1][2] <= 65536, table[-1]
        print(f"skipped the first {leading} steps, {counts[-1]} in all, then trained: "
              f"final loss {table[-1][1]}, scale {table[-1][2]:g}")
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
