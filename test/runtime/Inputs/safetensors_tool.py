"""Reads and edits safetensors files with the standard library only (the format:
an 8-byte little-endian header length, a JSON header, the tensors' bytes), for
the checkpoint tests.

  safetensors_tool.py check FILE MODEL.mlir   every nn.parameter / nn.state of the
                                               model, by name, dtype and shape
  safetensors_tool.py same A B                 the same tensors with the same bytes
  safetensors_tool.py close A B TOL [SKIP...]  the same tensors, float32 values within
                                               TOL * max(1, |b|) of each other (the
                                               tensors named SKIP are not compared)
  safetensors_tool.py reshape IN OUT NAME      NAME's shape reversed (a wrong file)
  safetensors_tool.py drop IN OUT NAME         without NAME
  safetensors_tool.py extra IN OUT             an extra tensor 'stray'
  safetensors_tool.py truncate IN OUT          the last tensor byte cut off
  safetensors_tool.py nan IN OUT NAME          NAME's last value NaN (a diverged run)
  safetensors_tool.py step IN OUT VALUE        the step counter graphc.step set to VALUE
"""
import json
import re
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    return header, data[8 + n :]


def write(path, header, body):
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)


def tensors(header):
    return {k: v for k, v in header.items() if k != "__metadata__"}


def main():
    cmd = sys.argv[1]
    if cmd == "check":
        header, body = read(sys.argv[2])
        model = open(sys.argv[3]).read()
        declared = re.findall(r"nn\.(?:parameter|state) @(\S+) : tensor<([0-9x]*)x?f32>", model)
        expect = {name: [int(d) for d in dims.split("x") if d] for name, dims in declared}
        got = tensors(header)
        for name, shape in expect.items():
            assert name in got, f"{name} missing"
            assert got[name]["dtype"] == "F32", got[name]
            assert got[name]["shape"] == shape, (name, got[name], shape)
            begin, end = got[name]["data_offsets"]
            assert end - begin == 4 * max(1, eval("*".join(map(str, shape)) or "1")), name
        assert got["graphc.step"]["dtype"] == "I64", got["graphc.step"]
        # Offsets tile the body with no gap and no overlap.
        spans = sorted(v["data_offsets"] for v in got.values())
        assert spans[0][0] == 0 and spans[-1][1] == len(body), spans[-1]
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        step = struct.unpack("<q", body[slice(*got["graphc.step"]["data_offsets"])])[0]
        meta = header["__metadata__"]
        assert meta["format"] == "pt" and int(meta["graphc.step"]) == step, (meta, step)
        print(f"ok: {len(expect)} model tensors, {len(got)} in all, step {step}")
    elif cmd == "same":
        (ha, ba), (hb, bb) = read(sys.argv[2]), read(sys.argv[3])
        ta, tb = tensors(ha), tensors(hb)
        assert ta.keys() == tb.keys()
        for k in ta:
            sa, sb = slice(*ta[k]["data_offsets"]), slice(*tb[k]["data_offsets"])
            assert ba[sa] == bb[sb], f"{k} differs"
        print(f"same: {len(ta)} tensors")
    elif cmd == "close":
        (ha, ba), (hb, bb) = read(sys.argv[2]), read(sys.argv[3])
        tol = float(sys.argv[4])
        ta, tb = tensors(ha), tensors(hb)
        assert ta.keys() == tb.keys()
        worst, count = 0.0, 0
        for k in ta:
            if k in sys.argv[5:]:
                continue
            if ta[k]["dtype"] != "F32":
                assert ba[slice(*ta[k]["data_offsets"])] == bb[slice(*tb[k]["data_offsets"])], k
                continue
            ra, rb = ba[slice(*ta[k]["data_offsets"])], bb[slice(*tb[k]["data_offsets"])]
            n = len(ra) // 4
            for x, y in zip(struct.unpack(f"<{n}f", ra), struct.unpack(f"<{n}f", rb)):
                d = abs(x - y) / max(1.0, abs(y))
                assert d <= tol, f"{k}: {x} vs {y}"
                worst = max(worst, d)
            count += n
        print(f"close: {count} values within {tol}, worst {worst:.1e}")
    else:
        header, body = read(sys.argv[2])
        if cmd == "reshape":
            header[sys.argv[4]]["shape"].reverse()
        elif cmd == "drop":
            del header[sys.argv[4]]
        elif cmd == "extra":
            header["stray"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(body), len(body) + 4]}
            body += b"\0" * 4
        elif cmd == "truncate":
            body = body[:-1]
        elif cmd == "tail":
            body += b"\0" * 8
        elif cmd == "overlap":
            # The named tensor reads the bytes of the one stored before it
            # (the same size), and its own bytes become a gap.
            a = header[sys.argv[4]]
            size = a["data_offsets"][1] - a["data_offsets"][0]
            a["data_offsets"] = [a["data_offsets"][0] - size, a["data_offsets"][0]]
        elif cmd == "nan":
            end = header[sys.argv[4]]["data_offsets"][1]
            body = body[: end - 4] + struct.pack("<f", float("nan")) + body[end:]
        elif cmd == "step":
            begin, end = header["graphc.step"]["data_offsets"]
            body = body[:begin] + struct.pack("<q", int(sys.argv[4])) + body[end:]
        write(sys.argv[3], header, body)


if __name__ == "__main__":
    main()
