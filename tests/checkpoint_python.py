#!/usr/bin/env python3
"""vjit checkpoints read and written from Python (run by ctest as checkpoint_python).

    checkpoint_python.py CHECKPOINT_TOOL WORK_DIR

(a) checkpoint_tool writes a checkpoint of a trained model and a JSON list of
    what it must hold; an independent reader written here from the published
    safetensors spec (numpy only) checks the layout and compares every tensor
    bit for bit and the metadata. A parameters file written here by the same
    spec is loaded by vjit (load_parameters) and compared; one with a wrong
    shape must be refused.
(b) When the `safetensors` package is importable, safetensors.numpy.load_file
    reads the checkpoint too, and a file from safetensors.numpy.save_file is
    loaded by vjit. Without the package, (b) is reported as skipped.

Exit 0 when everything that ran passed, 1 on a failure, 77 (a ctest skip)
when numpy is missing, so that nothing could run.
"""
import json
import os
import struct
import subprocess
import sys
import zlib

SKIP = 77
try:
    import numpy as np
except ImportError as e:
    print(f"numpy not installed ({e}): checkpoint_python skipped (install python3-numpy)")
    sys.exit(SKIP)

DTYPES = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
          "F16": np.float16, "I32": np.int32, "U32": np.uint32, "F32": np.float32, "F64": np.float64,
          "I64": np.int64, "U64": np.uint64}
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)


def read_spec(path):
    """Reads a safetensors file as the spec describes it; returns (metadata, {name: array}, header_size)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    assert 8 + n <= len(data), f"header size {n} larger than the file"
    header = json.loads(data[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors, spans = {}, []
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = np.dtype(DTYPES[info["dtype"]]).newbyteorder("<")
        count = int(np.prod(info["shape"], dtype=np.int64))
        assert end - begin == count * dtype.itemsize, f"{name}: offsets do not match shape and dtype"
        tensors[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(info["shape"])
        spans.append((begin, end))
    spans.sort()
    covered = 0
    for begin, end in spans:
        assert begin == covered, f"gap or overlap at data byte {begin}"
        covered = end
    assert covered == len(body), "the tensors do not cover the data"
    return metadata, tensors, n


def write_spec(path, tensors, metadata=None):
    """Writes a safetensors file by the spec: header padded with spaces to 8 bytes."""
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name, array in tensors.items():
        blob = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def expected_arrays(description):
    out = {}
    for name, t in description["tensors"].items():
        out[name] = np.array(t["values"], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def compare(what, got, expected):
    check(sorted(got) == sorted(expected), f"{what}: tensors {sorted(got)} != expected {sorted(expected)}")
    for name in expected:
        if name in got:
            check(same_bits(got[name], expected[name]), f"{what}: tensor {name} differs")


def vjit_loads(tool, path, work, expected):
    """vjit's load_parameters reads `path`; the values it loaded equal `expected`."""
    loaded_json = os.path.join(work, "loaded.json")
    result = subprocess.run([tool, "read-parameters", path, loaded_json], capture_output=True, text=True)
    check(result.returncode == 0, f"vjit could not load {path}: {result.stderr.strip()}")
    if result.returncode == 0:
        with open(loaded_json) as f:
            compare(f"vjit's load of {os.path.basename(path)}", expected_arrays(json.load(f)), expected)


def main():
    tool, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    checkpoint = os.path.join(work, "vjit.safetensors")
    expected_json = os.path.join(work, "expected.json")
    subprocess.run([tool, "write", checkpoint, expected_json], check=True)
    with open(expected_json) as f:
        description = json.load(f)
    expected = expected_arrays(description)

    # (a) the independent reader
    metadata, tensors, header_size = read_spec(checkpoint)
    check((8 + header_size) % 8 == 0, "the data does not start 8-byte aligned")
    compare("spec reader", tensors, expected)
    for key, value in description["metadata"].items():
        check(metadata.get(key) == value, f"metadata {key!r}: {metadata.get(key)!r} != {value!r}")
    print(f"(a) spec reader: {len(tensors)} tensors and {len(metadata)} metadata entries match")
    check(metadata.get("vjit.checksum") == "crc32", "the checkpoint does not say it carries CRC-32 checksums")
    for name, array in tensors.items():
        crc = f"{zlib.crc32(array.tobytes()):08x}"
        check(metadata.get("vjit.crc32." + name) == crc, f"checksum of {name!r}: {metadata.get('vjit.crc32.' + name)!r} != zlib's {crc!r}")
    print(f"(a) every tensor's vjit.crc32 entry is zlib.crc32 of its data")

    parameters = {name: a for name, a in expected.items() if not name.startswith("optimizer.")}
    rng = np.random.default_rng(7)
    fresh = {name: rng.standard_normal(a.shape).astype(np.float32) for name, a in reversed(parameters.items())}
    spec_file = os.path.join(work, "spec_written.safetensors")
    write_spec(spec_file, fresh, {"format": "pt"})
    vjit_loads(tool, spec_file, work, fresh)
    name = next(n for n, a in fresh.items() if a.ndim == 2 and a.shape[0] != a.shape[1])
    wrong = dict(fresh)
    wrong[name] = fresh[name].T.copy()
    wrong_file = os.path.join(work, "wrong_shape.safetensors")
    write_spec(wrong_file, wrong)
    result = subprocess.run([tool, "read-parameters", wrong_file, os.path.join(work, "unused.json")],
                            capture_output=True, text=True)
    check(result.returncode == 2 and f"tensor '{name}'" in result.stderr and "in the file" in result.stderr,
          f"a transposed {name} was not refused clearly: exit {result.returncode}, {result.stderr.strip()}")
    print("(a) vjit loads a file written by the spec and refuses a transposed parameter:", result.stderr.strip())

    # (b) the reference implementation, when installed
    try:
        from safetensors.numpy import load_file, save_file
        from safetensors import safe_open
    except ImportError as e:
        print(f"safetensors package not installed ({e}): part (b) skipped")
    else:
        compare("safetensors.numpy.load_file", load_file(checkpoint), expected)
        with safe_open(checkpoint, framework="numpy") as f:
            reference_metadata = f.metadata()
        check(reference_metadata == metadata, "safe_open's metadata differs from the spec reader's")
        reference_file = os.path.join(work, "reference_written.safetensors")
        save_file(fresh, reference_file, metadata={"format": "pt"})
        vjit_loads(tool, reference_file, work, fresh)
        print("(b) safetensors.numpy reads vjit's checkpoint, and vjit loads a file of save_file")

    if failures:
        print(f"{len(failures)} failures")
        return 1
    print("checkpoint_python: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
