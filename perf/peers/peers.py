#!/usr/bin/env python3
"""vjit's Tree-LSTM, Var-LSTM and Tree-FC written in PyTorch, in two styles.

    peers.py EXPORT_DIR --style eager|level --mode train|infer [--threads 2] [--steps N]
    peers.py EXPORT_DIR... --style both --check-only

EXPORT_DIR is what build/perf/peers-export wrote for one vjit-bench run:
params.safetensors (vjit's initial parameters, PyTorch layout) and samples.json
(the samples of vjit-bench's batches, in its order, and vjit's objective on the
first batch). The models repeat examples/models/ exactly:

  Tree-LSTM (tree_models.cpp, TreeLstm): leaf x = E[token],
    iou = W_iou x + b_iou; internal (children 1, 2 = left, right)
    iou = U_iou [h1; h2] + b_iou, f_k = σ(U_fk h_k + b_f);
    i, o, u = σ, σ, tanh of the three H-row blocks of iou (in that order);
    c = i⊙u (+ f1⊙c1 + f2⊙c2), h = o⊙tanh(c);
    every node: softmax cross-entropy of W_out h (no bias) against its label.
  Tree-FC (make_tree_fc): leaf h = relu(W_leaf E[token] + b_leaf);
    internal h = relu(W [h1; h2] + b); cross-entropy of W_out h at labelled
    internal nodes (the root only).
  Var-LSTM (sequence_models.cpp, LstmCell): gates = W x + U h + b with blocks
    i, f, o, g (vjit's order; PyTorch's nn.LSTM wants i, f, g, o, so the rows
    are permuted on loading and bias_hh is a frozen zero); c' = f⊙c + i⊙g,
    h' = o⊙tanh(c'); each word: cross-entropy of W_out h against the next word.

The loss is the sum over every labelled vertex of the batch, as vjit's
objective; training is Adam (lr from samples.json, vjit-bench's 1e-4, PyTorch
defaults otherwise, as vjit's) with the embedding table's gradient row-sparse
and updated lazily (sparse=True + SparseAdam), as vjit's engine does.

Styles:
  eager  per sample, as written for one example: recursion over each tree
         (node by node; the sentence's words embedded in one lookup),
         nn.LSTM over each sentence alone; each sample's loss computed on its
         own, summed over the batch, one backward and step per batch.
  level  batched across the batch as DGL does: all nodes of one height (leaves
         first) of every tree of the batch in one product; the sentences as one
         PackedSequence (sorted by length, no padding) through nn.LSTM.

Batch structure (levels, index tensors, token tensors) is built before the
timer starts, as a DataLoader's collate function would in its workers; vjit's
timed step includes its own scheduling.

Before timing, the equal-work check: the first batch's loss from vjit's
weights must equal vjit's within 1e-4 relative (exit 1 otherwise); the second
batch's loss after one training step on the first is compared with vjit's too
(reported, and checked at 1e-3 relative in training mode). Prints one JSON line.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

FIRST_LOSS_TOLERANCE = 1e-4
SECOND_LOSS_TOLERANCE = 1e-3


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


# ---------------------------------------------------------------- trees

class TreeModel(torch.nn.Module):
    """Tree-LSTM or Tree-FC with vjit's parameter names."""

    def __init__(self, kind, params):
        super().__init__()
        self.kind = kind
        for name, value in params.items():
            setattr(self, name, torch.nn.Parameter(value.clone()))

    def embed(self, tokens):
        return F.embedding(tokens, self.embedding, sparse=True)

    # One cell on rows: leaves (tokens) or internal nodes (children states).
    def leaf(self, tokens):
        return self.leaf_cell(self.embed(tokens))

    def leaf_cell(self, x):
        if self.kind == "tree_fc":
            return torch.relu(F.linear(x, self.W_leaf, self.b_leaf)), None
        i, o, u = F.linear(x, self.W_iou, self.b_iou).chunk(3, dim=1)
        c = torch.sigmoid(i) * torch.tanh(u)
        return torch.sigmoid(o) * torch.tanh(c), c

    def internal(self, h1, c1, h2, c2):
        if self.kind == "tree_fc":
            return torch.relu(F.linear(torch.cat([h1, h2], dim=1), self.W, self.b)), None
        i, o, u = F.linear(torch.cat([h1, h2], dim=1), self.U_iou, self.b_iou).chunk(3, dim=1)
        f1 = torch.sigmoid(F.linear(h1, self.U_f1, self.b_f))
        f2 = torch.sigmoid(F.linear(h2, self.U_f2, self.b_f))
        c = torch.sigmoid(i) * torch.tanh(u) + f1 * c1 + f2 * c2
        return torch.sigmoid(o) * torch.tanh(c), c

    def loss(self, h, labels):
        return F.cross_entropy(F.linear(h, self.W_out), labels, ignore_index=-1, reduction="sum")


def classifies(kind, is_leaf):
    # Tree-FC's leaves have no classifier; the Tree-LSTM classifies every node.
    return not (kind == "tree_fc" and is_leaf)


def prepare_tree_eager(kind, samples, type_names):
    """Per sample: children, the leaves' tokens in one tensor and each leaf's
    row in it, labels."""
    prepared = []
    for s in samples:
        leaves = [v for v, kids in enumerate(s["children"]) if not kids]
        rows = {v: r for r, v in enumerate(leaves)}
        prepared.append((s["children"], torch.tensor([s["token"][v] for v in leaves]), rows, s["label"]))
    return prepared


def tree_eager_loss(model, prepared):
    total = 0.0
    for children, leaf_tokens, leaf_rows, labels in prepared:
        outputs, targets = [], []
        # The sentence's words looked up at once, as Tai et al.'s code does.
        x = model.embed(leaf_tokens)

        def visit(v):
            kids = children[v]
            if not kids:
                row = leaf_rows[v]
                h, c = model.leaf_cell(x[row:row + 1])
            else:
                (h1, c1), (h2, c2) = visit(kids[0]), visit(kids[1])
                h, c = model.internal(h1, c1, h2, c2)
            if classifies(model.kind, not kids) and labels[v] >= 0:
                outputs.append(h)
                targets.append(labels[v])
            return h, c

        visit(len(children) - 1)  # the root is the last vertex
        total = total + model.loss(torch.cat(outputs), torch.tensor(targets))
    return total


def prepare_tree_level(kind, samples, type_names):
    """The batch as one forest: per height (leaves first) the vertex ids, and
    the tokens or the children's ids; the classified vertices and labels."""
    heights, left, right, tokens, labels, classified = [], [], [], [], [], []
    offset = 0
    for s in samples:
        for v, kids in enumerate(s["children"]):
            if kids:
                assert max(kids) < v, "vertices must come after their children"
                heights.append(1 + max(heights[offset + k] for k in kids))
                left.append(offset + kids[0])
                right.append(offset + kids[1])
            else:
                heights.append(0)
                left.append(-1)
                right.append(-1)
            tokens.append(s["token"][v])
            labels.append(s["label"][v])
            classified.append(classifies(kind, not kids) and s["label"][v] >= 0)
        offset += len(s["children"])
    levels = []
    for height in range(max(heights) + 1):
        ids = [v for v, h in enumerate(heights) if h == height]
        if height == 0:
            levels.append((torch.tensor(ids), torch.tensor([tokens[v] for v in ids]), None, None))
        else:
            levels.append((torch.tensor(ids), None, torch.tensor([left[v] for v in ids]),
                           torch.tensor([right[v] for v in ids])))
    keep = torch.tensor([v for v in range(offset) if classified[v]])
    return offset, levels, keep, torch.tensor(labels)[keep]


def tree_level_loss(model, prepared):
    count, levels, keep, labels = prepared
    hidden = model.W_out.shape[1]
    h = torch.zeros(count, hidden)
    c = torch.zeros(count, hidden)
    for ids, tokens, left, right in levels:
        if tokens is not None:
            h_new, c_new = model.leaf(tokens)
        else:
            c1 = c.index_select(0, left) if model.kind != "tree_fc" else None
            c2 = c.index_select(0, right) if model.kind != "tree_fc" else None
            h_new, c_new = model.internal(h.index_select(0, left), c1, h.index_select(0, right), c2)
        # In place, as DGL writes node data: the reads above keep only indices.
        h.index_copy_(0, ids, h_new)
        if c_new is not None:
            c.index_copy_(0, ids, c_new)
    return model.loss(h.index_select(0, keep), labels)


# ---------------------------------------------------------------- Var-LSTM

def gate_permutation(hidden):
    """vjit's gate rows i, f, o, g → PyTorch's i, f, g, o."""
    blocks = [torch.arange(k * hidden, (k + 1) * hidden) for k in range(4)]
    return torch.cat([blocks[0], blocks[1], blocks[3], blocks[2]])


class VarLstm(torch.nn.Module):
    def __init__(self, params):
        super().__init__()
        hidden = params["U"].shape[1]
        perm = gate_permutation(hidden)
        self.embedding = torch.nn.Parameter(params["embedding"].clone())
        self.lstm = torch.nn.LSTM(params["W"].shape[1], hidden)
        with torch.no_grad():
            self.lstm.weight_ih_l0.copy_(params["W"][perm])
            self.lstm.weight_hh_l0.copy_(params["U"][perm])
            self.lstm.bias_ih_l0.copy_(params["b"][perm])
            self.lstm.bias_hh_l0.zero_()
        self.lstm.bias_hh_l0.requires_grad_(False)  # vjit's cell has one bias
        self.W_out = torch.nn.Parameter(params["W_out"].clone())

    def loss(self, h, labels):
        return F.cross_entropy(F.linear(h, self.W_out), labels, ignore_index=-1, reduction="sum")


def prepare_seq_eager(kind, samples, type_names):
    return [(torch.tensor(s["token"]), torch.tensor(s["label"])) for s in samples]


def seq_eager_loss(model, prepared):
    total = 0.0
    for tokens, labels in prepared:
        x = F.embedding(tokens, model.embedding, sparse=True).unsqueeze(1)  # [T, 1, E]
        out, _ = model.lstm(x)
        total = total + model.loss(out[:, 0], labels)
    return total


def prepare_seq_level(kind, samples, type_names):
    from torch.nn.utils.rnn import pack_sequence
    tokens = pack_sequence([torch.tensor(s["token"]) for s in samples], enforce_sorted=False)
    labels = pack_sequence([torch.tensor(s["label"]) for s in samples], enforce_sorted=False)
    return tokens, labels.data


def seq_level_loss(model, prepared):
    tokens, labels = prepared
    x = F.embedding(tokens.data, model.embedding, sparse=True)
    out, _ = model.lstm(tokens._replace(data=x))  # one step per time index over the still-running sentences
    return model.loss(out.data, labels)


# ---------------------------------------------------------------- driver

STYLES = {
    ("tree", "eager"): (prepare_tree_eager, tree_eager_loss),
    ("tree", "level"): (prepare_tree_level, tree_level_loss),
    ("seq", "eager"): (prepare_seq_eager, seq_eager_loss),
    ("seq", "level"): (prepare_seq_level, seq_level_loss),
}


def family(model_name):
    if model_name in ("tree_lstm", "tree_fc"):
        return "tree"
    if model_name == "var_lstm":
        return "seq"
    sys.exit(f"peers.py: no PyTorch peer for model {model_name!r} (tree_lstm, tree_fc, var_lstm)")


def make_model(name, params):
    return VarLstm(params) if name == "var_lstm" else TreeModel(name, params)


def make_optimizers(model, lr):
    sparse = [p for n, p in model.named_parameters() if n == "embedding"]
    dense = [p for n, p in model.named_parameters() if n != "embedding" and p.requires_grad]
    return [torch.optim.Adam(dense, lr=lr), torch.optim.SparseAdam(sparse, lr=lr)]


def train_step(model, optimizers, loss_fn, prepared):
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)
    loss = loss_fn(model, prepared)
    loss.backward()
    for opt in optimizers:
        opt.step()
    return float(loss.detach())


def infer_step(model, loss_fn, prepared):
    with torch.no_grad():
        return float(loss_fn(model, prepared))


def check_equal_work(export_dir, style):
    """Loads one export, checks the style's losses against vjit's (exits on a
    mismatch) and returns (spec, params, prepared batches, loss_fn, JSON line)."""
    with open(os.path.join(export_dir, "samples.json")) as f:
        spec = json.load(f)
    params = load_file(os.path.join(export_dir, "params.safetensors"))
    name, batch_size = spec["model"], spec["batch"]
    prepare, loss_fn = STYLES[(family(name), style)]
    samples = spec["samples"]
    batches = [samples[i:i + batch_size] for i in range(0, len(samples), batch_size)]
    prepared = [prepare(name, b, spec["types"]) for b in batches]

    model = make_model(name, params)
    first_loss = infer_step(model, loss_fn, prepared[0])
    train_step(model, make_optimizers(model, spec["lr"]), loss_fn, prepared[0])
    second_loss = infer_step(model, loss_fn, prepared[1]) if len(prepared) > 1 else None
    line = {"peer": "pytorch", "style": style, "model": name, "data": spec["data"],
            "hidden": spec["hidden"], "batch": batch_size, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "first_loss": first_loss, "vjit_first_loss": spec["vjit_first_loss"],
            "first_loss_rel_diff": relative(first_loss, spec["vjit_first_loss"])}
    if second_loss is not None:
        line.update(second_loss=second_loss, vjit_second_loss=spec["vjit_second_loss"],
                    second_loss_rel_diff=relative(second_loss, spec["vjit_second_loss"]))
    print(f"peers.py {name} {style}: first-step loss {first_loss:.6f}, vjit {spec['vjit_first_loss']:.6f} "
          f"(relative {line['first_loss_rel_diff']:.2e})"
          + (f"; after one Adam step {second_loss:.6f}, vjit {spec['vjit_second_loss']:.6f} "
             f"(relative {line['second_loss_rel_diff']:.2e})" if second_loss is not None else ""),
          file=sys.stderr)
    if line["first_loss_rel_diff"] > FIRST_LOSS_TOLERANCE:
        sys.exit(f"peers.py: {name} {style}: first-step loss differs from vjit's by more than "
                 f"{FIRST_LOSS_TOLERANCE} relative: not equal work")
    if second_loss is not None and line["second_loss_rel_diff"] > SECOND_LOSS_TOLERANCE:
        sys.exit(f"peers.py: {name} {style}: loss after one Adam step differs from vjit's by more than "
                 f"{SECOND_LOSS_TOLERANCE} relative: the training step is not vjit's")
    return spec, params, prepared, loss_fn, line


def time_style(spec, params, prepared, loss_fn, mode, steps):
    """vjit-bench's protocol: warm-up batches, then the timed ones; seconds per
    timed batch and their number."""
    model = make_model(spec["model"], params)
    optimizers = make_optimizers(model, spec["lr"])
    warmup = spec["warmup"]
    steps = min(steps or spec["steps"], len(prepared) - warmup)
    step = (lambda p: train_step(model, optimizers, loss_fn, p)) if mode == "train" \
        else (lambda p: infer_step(model, loss_fn, p))
    for p in prepared[:warmup]:
        step(p)
    start = time.perf_counter()
    for p in prepared[warmup:warmup + steps]:
        step(p)
    return (time.perf_counter() - start) / steps, steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export_dirs", nargs="+", metavar="EXPORT_DIR")
    parser.add_argument("--style", choices=["eager", "level", "both"], required=True)
    parser.add_argument("--mode", choices=["train", "infer"], default="train")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, help="timed batches (default: samples.json's)")
    parser.add_argument("--check-only", action="store_true",
                        help="the equal-work check only (several exports and --style both allowed)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    styles = ["eager", "level"] if args.style == "both" else [args.style]
    if not args.check_only and (len(styles) > 1 or len(args.export_dirs) > 1):
        sys.exit("peers.py: timing takes one export and one style")
    for export_dir in args.export_dirs:
        for style in styles:
            spec, params, prepared, loss_fn, line = check_equal_work(export_dir, style)
            line["mode"] = args.mode
            if not args.check_only:
                seconds, steps = time_style(spec, params, prepared, loss_fn, args.mode, args.steps)
                line.update(steps=steps, samples_per_s=spec["batch"] / seconds, ms_per_step=1e3 * seconds)
            print(json.dumps(line))


if __name__ == "__main__":
    main()
