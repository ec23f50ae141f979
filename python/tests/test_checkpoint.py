"""Checkpoints written in Python are read by C++ (tests/checkpoint_tool) and back, resume
training exactly, and load in the `safetensors` package when it is installed."""
import importlib
import json
import os
import subprocess

import numpy as np
import pytest

import vjit

TOOL = os.environ.get("CHECKPOINT_TOOL", "")
needs_tool = pytest.mark.skipif(not os.path.isfile(TOOL),
                                reason="CHECKPOINT_TOOL does not name tests/checkpoint_tool (ctest sets it)")


def small_tree_lstm():
    """checkpoint_tool's model: a Tree-LSTM of hidden 8, embeddings of 6, 32 built-in samples."""
    return vjit.models.make_model("tree_lstm", hidden=8, embed=6, train_samples=32, test_samples=0)


@needs_tool
def test_parameters_written_in_python_are_read_by_cpp(tmp_path):
    bundle = small_tree_lstm()
    engine = vjit.Engine(bundle.program)
    engine.train_step(bundle.train.select(range(8)), vjit.Adam(0.05))
    path, loaded = tmp_path / "python.safetensors", tmp_path / "loaded.json"
    vjit.save_parameters(str(path), bundle.model, {"written_by": "python"})
    subprocess.run([TOOL, "read-parameters", str(path), str(loaded)], check=True)
    tensors = json.loads(loaded.read_text())["tensors"]
    assert list(tensors) == bundle.model.names
    for name, tensor in tensors.items():
        assert np.array_equal(np.array(tensor["values"], dtype=np.float32), bundle.model[name].ravel()), name


@needs_tool
def test_checkpoint_written_by_cpp_resumes_in_python(tmp_path):
    path, expected = tmp_path / "cpp.safetensors", tmp_path / "expected.json"
    subprocess.run([TOOL, "write", str(path), str(expected)], check=True)
    tensors = json.loads(expected.read_text())["tensors"]
    bundle = small_tree_lstm()
    engine, adam = vjit.Engine(bundle.program), vjit.Adam(0.01)
    metadata = vjit.load_checkpoint(str(path), engine, adam)
    assert metadata["epoch"] == "2" and metadata["note"] == "näive ✓"
    assert engine.train_steps == 2
    for name in bundle.model.names:
        assert np.array_equal(bundle.model[name].ravel(), np.array(tensors[name]["values"], dtype=np.float32)), name


def test_resuming_from_a_checkpoint_continues_exactly(tmp_path):
    path = str(tmp_path / "run.safetensors")
    batches = [small_tree_lstm().train.select(range(4 * i, 4 * i + 4)) for i in range(4)]

    def run(resume_after=None):
        bundle = small_tree_lstm()
        engine, adam = vjit.Engine(bundle.program), vjit.Adam(0.01)
        losses = []
        for i, batch in enumerate(batches):
            if i == resume_after:
                bundle = small_tree_lstm()  # a fresh model, engine and optimizer
                engine, adam = vjit.Engine(bundle.program), vjit.Adam(0.01)
                vjit.load_checkpoint(path, engine, adam)
            losses.append(engine.train_step(batch, adam))
            if i + 1 == resume_after:
                vjit.save_checkpoint(path, engine, adam, {"step": str(i + 1)})
        return losses

    assert run() == run(resume_after=2)


def test_checkpoint_of_another_program_is_refused(tmp_path):
    path = str(tmp_path / "run.safetensors")
    bundle = small_tree_lstm()
    vjit.save_checkpoint(path, vjit.Engine(bundle.program))
    other = vjit.models.make_model("tree_gru", hidden=8, embed=6, train_samples=32, test_samples=0)
    with pytest.raises(vjit.UserError, match="run.safetensors"):
        vjit.load_checkpoint(path, vjit.Engine(other.program))


def read_safetensors(path):
    """The tensors and metadata of a safetensors file, read by the format's specification
    (an 8-byte little-endian header length, a JSON header, then the tensors' bytes)."""
    data = open(path, "rb").read()
    header_length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + header_length].decode("utf-8"))
    body = data[8 + header_length:]
    metadata = header.pop("__metadata__", {})
    tensors, end = {}, 0
    for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"]):
        begin, stop = entry["data_offsets"]
        assert begin == end, f"{name}: the tensors' bytes leave a gap or overlap"
        dtype = {"F32": "<f4", "I64": "<i8"}[entry["dtype"]]
        array = np.frombuffer(body[begin:stop], dtype=dtype)
        assert array.size == int(np.prod(entry["shape"], dtype=np.int64)), name
        tensors[name] = array.reshape(entry["shape"])
        end = stop
    assert end == len(body), "bytes after the last tensor"
    assert all(isinstance(v, str) for v in metadata.values()), "metadata values are strings"
    return tensors, metadata


def test_a_python_checkpoint_is_a_safetensors_file_by_the_specification(tmp_path):
    """Without the optional safetensors package: what its loaders check, checked here."""
    bundle = small_tree_lstm()
    path = str(tmp_path / "run.safetensors")
    vjit.save_checkpoint(path, vjit.Engine(bundle.program), vjit.Adam(0.01), {"epoch": "3"})
    tensors, metadata = read_safetensors(path)
    assert metadata["epoch"] == "3" and tensors["optimizer.step"] == 0
    for name in bundle.model.names:
        assert np.array_equal(tensors[name], bundle.model[name]), name


@pytest.mark.parametrize("api", ["torch", "numpy"])
def test_the_safetensors_package_reads_a_python_checkpoint(api, tmp_path):
    """safetensors.torch.load_file (and safetensors.numpy's) read what save_checkpoint writes."""
    try:
        load_file = importlib.import_module(f"safetensors.{api}").load_file
    except ImportError as missing:
        pytest.skip(f"the optional package safetensors.{api} cannot be imported ({missing}; Debian has no "
                    "package of safetensors (torch: python3-torch), PyPI has: pip install safetensors); "
                    "test_a_python_checkpoint_is_a_safetensors_file_by_the_specification checks the format")
    bundle = small_tree_lstm()
    path = str(tmp_path / "run.safetensors")
    vjit.save_checkpoint(path, vjit.Engine(bundle.program), vjit.Adam(0.01))
    state = load_file(path)
    for name in bundle.model.names:
        values = state[name].numpy() if api == "torch" else state[name]
        assert np.array_equal(values, bundle.model[name]), name
