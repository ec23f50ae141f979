"""The model zoo of vjit/models.h written in Python: each function adds a model's
parameters (in the zoo's order, so the same seed draws the same values) and its vertex
types to a Program, and returns the types' indices. tests/python checks that each
builds the IR the C++ zoo builds. Sizes the zoo takes from its data (vocabulary,
classes, the largest fan-in) are arguments here.
"""
import vjit

SENTIMENT_CLASSES = 5


def classify(f, w_out, h, classes):
    """The classifier head: logits = W_out h, pushed, with a cross-entropy loss."""
    logits = f.matmul(w_out, h)
    f.push(logits)
    f.add_loss(f.softmax_cross_entropy(logits, f.label(classes)))


def split_state(f, state, hidden):
    """A scattered [h; c] state into h and c."""
    return f.slice(state, 0, hidden), f.slice(state, hidden, hidden)


class TreeLstmCell:
    """The binary Tree-LSTM of Tai et al. 2015 (the zoo's tree_lstm): leaf and internal cells."""

    def __init__(self, model, vocab, hidden, embed, dropout=0.0, classify_here=True):
        self.hidden, self.dropout, self.classify_here = hidden, dropout, classify_here
        self.embedding = model.add("embedding", (vocab, embed), vjit.Init.Uniform, 0.1)
        self.w_iou = model.add("W_iou", (3 * hidden, embed))
        self.b_iou = model.add("b_iou", (3 * hidden,), vjit.Init.Zeros)
        self.b_f = model.add("b_f", (hidden,), vjit.Init.Ones)
        self.w_out = model.add("W_out", (SENTIMENT_CLASSES, hidden))

    def add_internal_params(self, model, suffix=""):
        H = self.hidden
        return (model.add("U_iou" + suffix, (3 * H, 2 * H)), model.add("U_f1" + suffix, (H, H)),
                model.add("U_f2" + suffix, (H, H)))

    def finish(self, f, iou_product, extra_c=None):
        """i, o, u from one product: c = σ(i) ⊙ tanh(u) [+ extra_c], h = σ(o) ⊙ tanh(c)."""
        H = self.hidden
        iou = f.add(iou_product, self.b_iou)
        i = f.sigmoid(f.slice(iou, 0, H))
        o = f.sigmoid(f.slice(iou, H, H))
        u = f.tanh(f.slice(iou, 2 * H, H))
        c = f.mul(i, u)
        if extra_c is not None:
            c = f.add(c, extra_c)
        h = f.mul(o, f.tanh(c))
        if self.classify_here:
            classify(f, self.w_out, h, SENTIMENT_CLASSES)
        f.scatter(f.concat([h, c]))

    def leaf(self, f):
        x = f.pull_embedding(self.embedding)
        if self.dropout > 0:
            x = f.dropout(x, self.dropout)
        self.finish(f, f.matmul(self.w_iou, x))

    def internal(self, f, params):
        u_iou, u_f1, u_f2 = params
        H = self.hidden
        h1, c1 = split_state(f, f.gather(0, (2 * H,)), H)
        h2, c2 = split_state(f, f.gather(1, (2 * H,)), H)
        f1 = f.sigmoid(f.add(f.matmul(u_f1, h1), self.b_f))
        f2 = f.sigmoid(f.add(f.matmul(u_f2, h2), self.b_f))
        forget = f.add(f.mul(f1, c1), f.mul(f2, c2))
        self.finish(f, f.matmul(u_iou, f.concat([h1, h2])), forget)

    def output(self, f):
        """ED-Batch's output vertex: classifies the h of its one child."""
        classify(f, self.w_out, f.slice(f.gather(0, (2 * self.hidden,)), 0, self.hidden), SENTIMENT_CLASSES)


def tree_lstm(program, vocab, hidden, embed=None, dropout=0.0):
    cell = TreeLstmCell(program.model, vocab, hidden, embed or hidden, dropout)
    internal = cell.add_internal_params(program.model)
    return (program.add_type("leaf", cell.leaf), program.add_type("internal", lambda f: cell.internal(f, internal)))


def tree_lstm_outputs(program, vocab, hidden, embed=None, dropout=0.0):
    cell = TreeLstmCell(program.model, vocab, hidden, embed or hidden, dropout, classify_here=False)
    internal = cell.add_internal_params(program.model)
    return (program.add_type("leaf", cell.leaf), program.add_type("internal", lambda f: cell.internal(f, internal)),
            program.add_type("output", cell.output))


def tree_lstm_2type(program, vocab, hidden, embed=None, dropout=0.0):
    cell = TreeLstmCell(program.model, vocab, hidden, embed or hidden, dropout)
    a, b = cell.add_internal_params(program.model, "_a"), cell.add_internal_params(program.model, "_b")
    return (program.add_type("leaf", cell.leaf), program.add_type("internal_a", lambda f: cell.internal(f, a)),
            program.add_type("internal_b", lambda f: cell.internal(f, b)))


def child_sum_tree_lstm(program, vocab, hidden, embed=None, dropout=0.0, max_children=5):
    """Tai et al.'s Child-Sum Tree-LSTM: the internal cell reads the [K, 2H] block of its children."""
    model, H = program.model, hidden
    cell = TreeLstmCell(model, vocab, hidden, embed or hidden, dropout)
    u_iou = model.add("U_iou", (3 * H, H))
    u_f = model.add("U_f", (H, H))

    def internal(f):
        block = f.gather_all(max_children, (2 * H,))
        h = f.slice_cols(block, 0, H)  # [K, H], zero rows past the last child
        c = f.slice_cols(block, H, H)
        forget_gates = f.sigmoid(f.add(f.matmul(h, u_f), cell.b_f))  # row k: σ(h_kᵀ U_f + b_f)
        cell.finish(f, f.matmul(u_iou, f.sum_rows(h)), f.sum_rows(f.mul(forget_gates, c)))

    return program.add_type("leaf", cell.leaf), program.add_type("internal", internal)


def tree_gru(program, vocab, hidden, embed=None, dropout=0.0):
    model, H, E = program.model, hidden, embed or hidden
    embedding = model.add("embedding", (vocab, E), vjit.Init.Uniform, 0.1)
    w_leaf, b_leaf = model.add("W_leaf", (H, E)), model.add("b_leaf", (H,), vjit.Init.Zeros)
    u_zr, b_zr = model.add("U_zr", (3 * H, 2 * H)), model.add("b_zr", (3 * H,), vjit.Init.Zeros)
    u_h, b_h = model.add("U_h", (H, 2 * H)), model.add("b_h", (H,), vjit.Init.Zeros)
    w_out = model.add("W_out", (SENTIMENT_CLASSES, H))

    def leaf(f):
        h = f.tanh(f.add(f.matmul(w_leaf, f.pull_embedding(embedding)), b_leaf))
        classify(f, w_out, h, SENTIMENT_CLASSES)
        f.scatter(h)

    def internal(f):
        h1, h2 = f.gather(0, (H,)), f.gather(1, (H,))
        e = f.concat([h1, h2])
        zr = f.sigmoid(f.add(f.matmul(u_zr, e), b_zr))
        z, r = f.slice(zr, 0, H), f.slice(zr, H, 2 * H)
        candidate = f.tanh(f.add(f.matmul(u_h, f.mul(r, e)), b_h))
        mean = f.scale(f.add(h1, h2), 0.5)
        h = f.add(f.mul(z, mean), f.mul(f.add_scalar(f.neg(z), 1.0), candidate))
        classify(f, w_out, h, SENTIMENT_CLASSES)
        f.scatter(h)

    return program.add_type("leaf", leaf), program.add_type("internal", internal)


def mv_rnn(program, vocab, hidden, embed=None, dropout=0.0):
    """The MV-RNN of Socher et al. 2012: each node scatters [a; vec(A)]."""
    model, n = program.model, hidden
    word_vectors = model.add("word_vectors", (vocab, n), vjit.Init.Uniform, 0.1)
    word_matrices = model.add("word_matrices", (vocab, n * n), vjit.Init.Uniform, 0.01)
    model[word_matrices].reshape(vocab, n, n)[:, range(n), range(n)] += 1.0  # near the identity
    w, b_w = model.add("W", (n, 2 * n)), model.add("b_W", (n,), vjit.Init.Zeros)
    w_m = model.add("W_M", (n, 2 * n))
    w_out = model.add("W_out", (SENTIMENT_CLASSES, n))

    def scatter_node(f, a, A):
        f.scatter(f.concat([a, f.reshape(A, (n * n,))]))

    def unpack(f, state):
        return f.slice(state, 0, n), f.reshape(f.slice(state, n, n * n), (n, n))

    def leaf(f):
        a = f.pull_embedding(word_vectors)
        A = f.reshape(f.pull_embedding(word_matrices), (n, n))
        classify(f, w_out, a, SENTIMENT_CLASSES)
        scatter_node(f, a, A)

    def internal(f):
        a, A = unpack(f, f.gather(0, (n + n * n,)))
        bv, B = unpack(f, f.gather(1, (n + n * n,)))
        p = f.tanh(f.add(f.matmul(w, f.concat([f.matmul(B, a), f.matmul(A, bv)])), b_w))
        P = f.matmul(w_m, f.concat([A, B]))
        classify(f, w_out, p, SENTIMENT_CLASSES)
        scatter_node(f, p, P)

    return program.add_type("leaf", leaf), program.add_type("internal", internal)


def tree_fc(program, vocab, hidden, embed=None, dropout=0.0, classes=2):
    """TensorFlow Fold's Tree-FC: relu cells, only internal vertices classify."""
    model, H, E = program.model, hidden, embed or hidden
    embedding = model.add("embedding", (vocab, E), vjit.Init.Uniform, 0.1)
    w_leaf, b_leaf = model.add("W_leaf", (H, E)), model.add("b_leaf", (H,), vjit.Init.Zeros)
    w, b = model.add("W", (H, 2 * H)), model.add("b", (H,), vjit.Init.Zeros)
    w_out = model.add("W_out", (classes, H))

    def internal(f):
        h = f.relu(f.add(f.matmul(w, f.concat([f.gather(0, (H,)), f.gather(1, (H,))])), b))
        classify(f, w_out, h, classes)
        f.scatter(h)

    return (program.add_type("leaf", lambda f: f.scatter(f.relu(f.add(f.matmul(w_leaf, f.pull_embedding(embedding)), b_leaf)))),
            program.add_type("internal", internal))


def _recursive_network(program, vocab, hidden, tensor):
    model, H = program.model, hidden
    embedding = model.add("embedding", (vocab, H), vjit.Init.Uniform, 0.1)
    w, b = model.add("W", (H, 2 * H)), model.add("b", (H,), vjit.Init.Zeros)
    n = 2 * H
    v = model.add("V_sym", (H, n * (n + 1) // 2), vjit.Init.Uniform, 1.0 / (4 * H)) if tensor else None
    w_out = model.add("W_out", (SENTIMENT_CLASSES, H))

    def leaf(f):
        h = f.pull_embedding(embedding)
        classify(f, w_out, h, SENTIMENT_CLASSES)
        f.scatter(h)

    def internal(f):
        x = f.concat([f.gather(0, (H,)), f.gather(1, (H,))])
        pre = f.add(f.matmul(w, x), b)
        if tensor:
            pre = f.add(pre, f.matmul(v, f.sym_outer(x)))
        h = f.tanh(pre)
        classify(f, w_out, h, SENTIMENT_CLASSES)
        f.scatter(h)

    return program.add_type("leaf", leaf), program.add_type("internal", internal)


def rntn(program, vocab, hidden, embed=None, dropout=0.0):
    return _recursive_network(program, vocab, hidden, True)


def tree_rnn(program, vocab, hidden, embed=None, dropout=0.0):
    return _recursive_network(program, vocab, hidden, False)


class LstmCell:
    """An LSTM step: gates = W x + U h + b (order i, f, o, g), c' = σ(f)⊙c + σ(i)⊙tanh(g)."""

    def __init__(self, model, prefix, inputs, hidden):
        self.hidden = hidden
        self.w = model.add(prefix + "W", (4 * hidden, inputs))
        self.u = model.add(prefix + "U", (4 * hidden, hidden))
        self.b = model.add(prefix + "b", (4 * hidden,), vjit.Init.Zeros)

    def step(self, f, x, state, extra_c=None):
        H = self.hidden
        h, c = split_state(f, state, H)
        gates = f.add(f.add(f.matmul(self.w, x), f.matmul(self.u, h)), self.b)
        i = f.sigmoid(f.slice(gates, 0, H))
        fg = f.sigmoid(f.slice(gates, H, H))
        o = f.sigmoid(f.slice(gates, 2 * H, H))
        g = f.tanh(f.slice(gates, 3 * H, H))
        c_next = f.add(f.mul(fg, c), f.mul(i, g))
        if extra_c is not None:
            c_next = f.add(c_next, extra_c)
        return f.mul(o, f.tanh(c_next)), c_next


class GateLstmCell:
    """LstmCell with one weight per gate (W_i, U_i, b_i, ...), as papers write it."""

    def __init__(self, model, prefix, inputs, hidden):
        self.hidden = hidden
        self.w, self.u, self.b = [], [], []
        for gate in ("i", "f", "o", "u"):
            self.w.append(model.add(prefix + "W_" + gate, (hidden, inputs)))
            self.u.append(model.add(prefix + "U_" + gate, (hidden, hidden)))
            self.b.append(model.add(prefix + "b_" + gate, (hidden,), vjit.Init.Zeros))

    def step(self, f, x, state):
        h, c = split_state(f, state, self.hidden)
        gate = [f.add(f.add(f.matmul(self.w[k], x), f.matmul(self.u[k], h)), self.b[k]) for k in range(4)]
        i, fg, o, g = f.sigmoid(gate[0]), f.sigmoid(gate[1]), f.sigmoid(gate[2]), f.tanh(gate[3])
        c_next = f.add(f.mul(fg, c), f.mul(i, g))
        return f.mul(o, f.tanh(c_next)), c_next


def _language_model(program, vocab, hidden, embed, dropout, separate_gates):
    model, H, E = program.model, hidden, embed or hidden
    embedding = model.add("embedding", (vocab, E), vjit.Init.Uniform, 0.1)
    lstm = (GateLstmCell if separate_gates else LstmCell)(model, "", E, H)
    w_out = model.add("W_out", (vocab, H))

    def cell(f):
        x = f.pull_embedding(embedding)
        if dropout > 0:
            x = f.dropout(x, dropout)
        h, c = lstm.step(f, x, f.gather_sum((2 * H,)))
        classify(f, w_out, h, vocab)
        f.scatter(f.concat([h, c]))

    return (program.add_type("cell", cell),)


def var_lstm(program, vocab, hidden, embed=None, dropout=0.0):
    return _language_model(program, vocab, hidden, embed, dropout, False)


def var_lstm_gates(program, vocab, hidden, embed=None, dropout=0.0):
    return _language_model(program, vocab, hidden, embed, dropout, True)


fixed_lstm = var_lstm


def bilstm_tagger(program, vocab, hidden, embed=None, dropout=0.0, num_tags=5):
    model, H, E = program.model, hidden, embed or hidden
    embedding = model.add("embedding", (vocab, E), vjit.Init.Uniform, 0.1)
    forward, backward = LstmCell(model, "fwd_", E, H), LstmCell(model, "bwd_", E, H)
    w_mlp, b_mlp = model.add("W_mlp", (H, 2 * H)), model.add("b_mlp", (H,), vjit.Init.Zeros)
    w_out = model.add("W_out", (num_tags, H))

    def chain_cell(lstm):
        def cell(f):
            h, c = lstm.step(f, f.pull_embedding(embedding), f.gather_sum((2 * H,)))
            f.scatter(f.concat([h, c]))
        return cell

    def tag(f):
        hf, hb = f.slice(f.gather(0, (2 * H,)), 0, H), f.slice(f.gather(1, (2 * H,)), 0, H)
        classify(f, w_out, f.tanh(f.add(f.matmul(w_mlp, f.concat([hf, hb])), b_mlp)), num_tags)

    return (program.add_type("fwd", chain_cell(forward)), program.add_type("bwd", chain_cell(backward)),
            program.add_type("tag", tag))


def lattice_lstm(program, vocab=1000, hidden=64, embed=None, dropout=0.0, num_tags=8):
    model, H, E = program.model, hidden, embed or hidden
    char_embedding = model.add("char_embedding", (vocab, E), vjit.Init.Uniform, 0.1)
    word_embedding = model.add("word_embedding", (vocab, E), vjit.Init.Uniform, 0.1)
    char_lstm = LstmCell(model, "char_", E, H)
    w_word, u_word = model.add("word_W", (3 * H, E)), model.add("word_U", (3 * H, H))
    b_word = model.add("word_b", (3 * H,), vjit.Init.Zeros)
    w_gate, b_gate = model.add("gate_W", (H, E)), model.add("gate_b", (H,), vjit.Init.Zeros)
    w_out = model.add("W_out", (num_tags, H))

    def char_cell(f, state, has_words):
        x = f.pull_embedding(char_embedding)
        words = f.mul(f.sigmoid(f.add(f.matmul(w_gate, x), b_gate)), f.gather_sum((H,))) if has_words else None
        h, c = char_lstm.step(f, x, state, words)
        classify(f, w_out, h, num_tags)
        f.scatter(f.concat([h, c]))

    def word(f):
        h, c = split_state(f, f.gather_sum((2 * H,)), H)
        gates = f.add(f.add(f.matmul(w_word, f.pull_embedding(word_embedding)), f.matmul(u_word, h)), b_word)
        i, fg = f.sigmoid(f.slice(gates, 0, H)), f.sigmoid(f.slice(gates, H, H))
        u = f.tanh(f.slice(gates, 2 * H, H))
        f.scatter(f.add(f.mul(fg, c), f.mul(i, u)))

    return (program.add_type("first_char", lambda f: char_cell(f, f.constant((2 * H,), 0.0), False)),
            program.add_type("char", lambda f: char_cell(f, f.gather(0, (2 * H,)), True)),
            program.add_type("word", word))


def seq2seq(program, vocab=16, hidden=64, embed=None, dropout=0.0):
    model, H, E = program.model, hidden, embed or hidden
    source_embedding = model.add("source_embedding", (vocab, E), vjit.Init.Uniform, 0.1)
    target_embedding = model.add("target_embedding", (vocab, E), vjit.Init.Uniform, 0.1)
    encoder_cell, decoder_cell = LstmCell(model, "encoder_", E, H), LstmCell(model, "decoder_", E, H)
    w_out = model.add("W_out", (vocab, H))

    def embed_token(f, table):
        x = f.pull_embedding(table)
        return f.dropout(x, dropout) if dropout > 0 else x

    def encoder(f):
        h, c = encoder_cell.step(f, embed_token(f, source_embedding), f.gather_sum((2 * H,)))
        f.scatter(f.concat([h, c]))

    def decoder(f):
        h, c = decoder_cell.step(f, embed_token(f, target_embedding), f.gather(0, (2 * H,)))
        classify(f, w_out, h, vocab)
        f.scatter(f.concat([h, c]))

    return program.add_type("encoder", encoder), program.add_type("decoder", decoder)


MODELS = {
    "tree_lstm": tree_lstm, "tree_lstm_outputs": tree_lstm_outputs, "tree_lstm_2type": tree_lstm_2type,
    "child_sum_tree_lstm": child_sum_tree_lstm, "tree_gru": tree_gru, "mv_rnn": mv_rnn, "tree_fc": tree_fc,
    "rntn": rntn, "tree_rnn": tree_rnn, "var_lstm": var_lstm, "var_lstm_gates": var_lstm_gates,
    "fixed_lstm": fixed_lstm, "bilstm_tagger": bilstm_tagger, "lattice_lstm": lattice_lstm, "seq2seq": seq2seq,
}
