"""bf16 training: the hand-written training kernels against autograd, and the precision option end to end."""
import json

import pytest
import torch

from spacy_elmo.bilm import BiLM, BiLMConfig
from spacy_elmo.bilm.lstm import BiLstmStack
from spacy_elmo.bilm.token_encoder import CharCnnEncoder
from spacy_elmo.kernels import char_conv_train, fused_train
from spacy_elmo.training import train
from spacy_elmo.training.lm import BiLMLanguageModel
from spacy_elmo.training.precision import train_dtype
from spacy_elmo.training.sampled_softmax import accidental_hits

from .test_training import prepared, tiny_config  # noqa: F401  (the module-scoped corpus fixture)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("lengths", [[9, 3, 7, 1, 9], [6, 6, 6, 2], [4]])
def test_fused_lstm_layer_equals_autograd_in_float64(lengths, dropout):
    torch.manual_seed(0)
    stack = BiLstmStack(16, 24, 8, 2, cell_clip=0.5, proj_clip=0.3, residual=True).double()
    stack.dropout = dropout
    with torch.no_grad():
        for p in stack.parameters():
            p.mul_(3)  # large pre-activations: both clips are hit
    x = torch.randn(len(lengths), max(lengths), 16, dtype=torch.double, requires_grad=True)
    weights = None

    def run(dtype):
        nonlocal weights
        stack.train_dtype = dtype
        stack.zero_grad()
        x.grad = None
        torch.manual_seed(3)  # the same dropout masks for both
        outs, (h, c) = stack(x, torch.tensor(lengths))
        if weights is None:
            weights = [torch.randn_like(o) for o in outs]
        sum((o * w).sum() for o, w in zip(outs, weights)).backward()
        return outs, h, c, x.grad.clone(), {n: p.grad.clone() for n, p in stack.named_parameters()}

    ref, got = run(None), run(torch.float64)
    assert all(_close(a, b) for a, b in zip(ref[0], got[0]))
    assert _close(ref[1], got[1]) and _close(ref[2], got[2])  # final states
    assert _close(ref[3], got[3])
    for name in ref[4]:
        assert _close(ref[4][name], got[4][name]), name
    # the clips were exercised, so their gradient masks were tested
    assert (ref[2].abs() == 0.5).any()


def test_fused_lstm_keeps_padding_zero_and_gives_no_per_step_graph():
    stack = BiLstmStack(8, 12, 4, 1, 3.0, 3.0, False)
    stack.train_dtype = torch.bfloat16
    x = torch.randn(3, 5, 8, requires_grad=True)
    outs, _ = stack(x, torch.tensor([5, 2, 3]))
    assert outs[0].dtype == torch.float32
    assert outs[0][1, 2:].abs().sum() == 0 and outs[0][2, 3:].abs().sum() == 0
    # one recurrence node per layer, not one per step and gate
    nodes, seen, todo = 0, set(), [outs[0].grad_fn]
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        nodes += type(fn).__name__.startswith("FusedLstmLayer")
        todo.extend(f for f, _ in fn.next_functions)
    assert nodes == 1 and len(seen) < 40


def _encode_with_grads(enc, ids, weights, dtype):
    """The encoder's output for ``ids`` with ``train_dtype=dtype`` and its parameters' gradients of ``(out * weights).sum()``."""
    enc.train_dtype = dtype
    enc.zero_grad()
    out = enc(ids)
    (out * weights).sum().backward()
    return out.detach(), {n: p.grad.clone() for n, p in enc.named_parameters()}


def test_one_product_char_convolutions_equal_the_convolutions_in_float64():
    torch.manual_seed(0)
    enc = CharCnnEncoder(262, 6, ((1, 4), (2, 5), (3, 6), (5, 7)), n_highway=1, output_dim=9).double()
    ids = torch.randint(1, 262, (11, 50))
    weights = torch.randn(11, 9, dtype=torch.double)

    (a, ga), (b, gb) = _encode_with_grads(enc, ids, weights, None), _encode_with_grads(enc, ids, weights, torch.float64)
    assert _close(a, b)
    for name in ga:
        assert _close(ga[name], gb[name]), name


def _word_ids(lengths, positions=50, tail=261):
    """ELMo-like character ids: <bow>, a word's bytes and <eow>, then one padding id to the end."""
    rows = []
    for n in lengths:
        word = [258] + torch.randint(1, 256, (n,)).tolist() + [259]
        rows.append((word + [tail] * positions)[:positions])
    return torch.tensor(rows)


def test_mixed_char_pooling_cuts_positions_and_keeps_values_and_gradients(monkeypatch):
    torch.manual_seed(0)
    enc = CharCnnEncoder(262, 6, ((1, 4), (2, 5), (3, 6), (5, 7)), n_highway=1, output_dim=9).double()
    enc.train_chunk = 8  # three chunks of different lengths, each cut to its own positions
    ids = _word_ids([3, 1, 11, 0, 7, 1, 5, 16, 4, 9, 6, 1, 1, 8, 0, 12, 48, 2, 1, 1])  # 48: a word to the end
    weights = torch.randn(len(ids), 9, dtype=torch.double)
    seen = []
    pool = char_conv_train.conv_max_pool
    monkeypatch.setattr(char_conv_train, "conv_max_pool", lambda chars, *a: seen.append(chars.shape[1]) or pool(chars, *a))

    (a, ga), (b, gb) = _encode_with_grads(enc, ids, weights, None), _encode_with_grads(enc, ids, weights, torch.float64)
    assert sorted(seen) == [8, 16, 50]  # positions: words of <= 1, <= 9 and 48 characters (+ <bow>/<eow>, a tail window)
    assert _close(a, b)
    for name in ga:
        assert _close(ga[name], gb[name]), name


def test_stacked_filters_layout():
    convs = [torch.nn.Conv1d(2, 3, 1), torch.nn.Conv1d(2, 1, 2)]
    weight, bias = char_conv_train.stacked_filters(convs)
    assert weight.shape == (2 * 2, 4) and bias.shape == (4,)
    assert torch.equal(weight[:2, 3], convs[1].weight[0, :, 0]) and torch.equal(weight[2:, 3], convs[1].weight[0, :, 1])
    assert torch.equal(weight[2:, :3], torch.zeros(2, 3))  # the width-1 filters are zero at offset 1


def test_accidental_hits_find_every_pair():
    targets = torch.tensor([3, 0, 7, 3, 9])
    samples = torch.tensor([3, 1, 3, 9, 0, 5])
    rows, cols = accidental_hits(targets, samples)
    assert sorted(zip(rows.tolist(), cols.tolist())) == sorted(
        (r, c) for r in range(5) for c in range(6) if targets[r] == samples[c]
    )
    assert accidental_hits(torch.tensor([2]), samples)[0].numel() == 0


def _tiny_lm(vocab=50, samples=30):
    torch.manual_seed(0)
    config = BiLMConfig(lstm_dim=8, projection_dim=4, filters=((1, 4), (2, 4)), n_highway=1)
    return BiLMLanguageModel(BiLM(config), vocab, n_samples=samples)


def test_fused_sampled_softmax_equals_autograd_in_float64():
    lm = _tiny_lm().double()
    hidden = torch.randn(40, 4, dtype=torch.double, requires_grad=True)
    targets = torch.randint(0, 50, (40,))

    def run(dtype):
        lm.set_train_dtype(dtype)
        lm.zero_grad()
        hidden.grad = None
        torch.manual_seed(1)  # the same candidates (30 of 50 ids: accidental hits are certain)
        loss = lm._sampled_nll(hidden, targets)
        loss.backward()
        return loss.detach(), hidden.grad.clone(), lm.softmax.weight.grad.clone(), lm.softmax.bias.grad.clone()

    for a, b in zip(run(None), run(torch.float64)):
        assert _close(a, b)


def _batch(prepared_dir, n=1):
    from spacy_elmo.training.data import Position, Vocabulary, training_batches

    vocab = Vocabulary.load(prepared_dir / "vocab.txt")
    stream = training_batches(prepared_dir, vocab, 512, 50, 0, Position(), 0, 1)
    return vocab, [next(stream)[1] for _ in range(n)]


def _one_step(data, dtypes):
    """(loss, flat gradient) of one training step on the same batch, weights and dropout draws,
    for each training dtype in ``dtypes`` (None: autograd's float32 graph)."""
    vocab, (batch,) = _batch(data)
    torch.manual_seed(0)
    config = BiLMConfig(lstm_dim=32, projection_dim=16, filters=((1, 16), (2, 16), (3, 32)), n_highway=1, char_dim=8)
    lm = BiLMLanguageModel(BiLM(config), len(vocab), dropout=0.1, n_samples=20)
    lm.train()
    results = []
    for dtype in dtypes:
        lm.set_train_dtype(dtype)
        lm.zero_grad()
        torch.manual_seed(7)
        loss, _ = lm(batch)
        loss.backward()
        results.append((float(loss.detach()), torch.cat([p.grad.flatten() for p in lm.parameters()])))
    return results


def test_bf16_step_is_close_to_fp32(prepared):  # noqa: F811
    (loss32, g32), (loss16, g16) = _one_step(prepared[0] / "general-prep", (None, torch.bfloat16))
    assert abs(loss16 - loss32) < 0.01 * loss32
    assert torch.nn.functional.cosine_similarity(g32, g16, dim=0) > 0.99
    assert (g16 - g32).norm() < 0.1 * g32.norm()


def test_precision_option(monkeypatch):
    import spacy_elmo.training.precision as precision

    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)  # a GPU with bf16
    # before: auto picked bf16 on such a GPU, where the bf16 training path (a CPU one) is untested
    assert train_dtype("auto", gpu) is None
    for native in (True, False):
        monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
        assert train_dtype("auto", cpu) is (torch.bfloat16 if native else torch.float32)  # fp32-fused without native bf16
        assert train_dtype("auto", gpu) is None
        for device in (cpu, gpu):  # an explicit choice is taken as given
            assert train_dtype("fp32", device) is None and train_dtype("bf16", device) is torch.bfloat16
        assert train_dtype("fp32-fused", cpu) is torch.float32
    with pytest.raises(ValueError, match="fp32-fused is a CPU path"):
        train_dtype("fp32-fused", gpu)
    with pytest.raises(ValueError, match="precision must be one of fp32, fp32-fused, bf16, auto, got 'half'"):
        train_dtype("half", cpu)


def test_fp32_training_never_enters_the_mixed_kernels(prepared, tmp_path, monkeypatch):  # noqa: F811
    def refuse(*args, **kwargs):
        raise AssertionError("fp32 training called a bf16 training kernel")

    monkeypatch.setattr(fused_train, "run_layer", refuse)
    monkeypatch.setattr(char_conv_train, "conv_max_pool", refuse)
    monkeypatch.setattr("spacy_elmo.training.lm.SampledSoftmaxLoss.apply", refuse)
    result = train(tiny_config(prepared[0] / "general-prep", tmp_path / "fp32", max_steps=3, n_samples=20))
    assert result["step"] == 3


def test_bf16_resume_is_exact_and_a_run_may_switch_precision(prepared, tmp_path):  # noqa: F811
    data = prepared[0] / "general-prep"
    kw = dict(max_steps=8, checkpoint_every=4, dropout=0.2, n_samples=20, precision="bf16")
    train(tiny_config(data, tmp_path / "straight", **kw))
    assert train(tiny_config(data, tmp_path / "resumed", **kw), interrupt_at=5)["interrupted"]
    train(tiny_config(data, tmp_path / "resumed", **kw), resume=True)
    a = torch.load(tmp_path / "straight" / "checkpoints" / "last.pt", weights_only=False)
    b = torch.load(tmp_path / "resumed" / "checkpoints" / "last.pt", weights_only=False)
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    records = [json.loads(x) for x in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in records if "tokens_per_cpu_s" in r]
    assert logged and all(r["precision"] == "bfloat16" and r["tokens_per_cpu_s"] > 0 for r in logged)
    # an fp32 run continued in bf16 (precision may change on resume, when asked, with a warning)
    fp32 = dict(kw, precision="fp32")
    assert train(tiny_config(data, tmp_path / "switch", **fp32), interrupt_at=4)["interrupted"]
    with pytest.warns(UserWarning, match="resuming a run trained in fp32 with precision bf16"):
        result = train(tiny_config(data, tmp_path / "switch", **kw), resume=True)
    assert result["step"] == 8 and result["valid_ppl_avg"] < 1e4


def test_snapshot_exports_the_last_checkpoint(prepared, tmp_path):  # noqa: F811
    from spacy_elmo.training import load_language_model, perplexity
    from spacy_elmo.training.snapshot import export_checkpoint

    data = prepared[0] / "general-prep"
    run = tmp_path / "run"
    assert train(tiny_config(data, run, max_steps=6, checkpoint_every=3, precision="bf16"), interrupt_at=3)["interrupted"]
    info = export_checkpoint(run, tmp_path / "snap")
    assert info["step"] == 3 and info["tokens"] > 0
    model, vocab = load_language_model(tmp_path / "snap")
    state = torch.load(run / "checkpoints" / "last.pt", weights_only=False)["model"]
    assert all(torch.equal(t, state[f"bilm.{k}"]) for k, t in model.bilm.state_dict().items())
    assert perplexity(model, vocab, data, "valid")["ppl_avg"] < len(vocab)
    with pytest.raises(FileNotFoundError, match="not a training run folder"):
        export_checkpoint(tmp_path / "nothing", tmp_path / "x")
    # the command line gives the same folder, and keeps a non-empty DEST unless told --force
    from spacy_elmo.cli import main

    assert main(["snapshot", str(run), str(tmp_path / "snap-cli")]) == 0
    assert (tmp_path / "snap-cli" / "weights.pt").read_bytes() == (tmp_path / "snap" / "weights.pt").read_bytes()
    assert main(["snapshot", str(run), str(tmp_path / "snap-cli")]) == 2
    # ship takes the snapshot like a finished run: float16 softmax, provenance, no machine paths
    from spacy_elmo.training.ship import ship_model

    sizes = ship_model(tmp_path / "snap", tmp_path / "shipped")
    assert {"config.json", "weights.pt", "vocab.txt", "softmax.pt", "train_config.json", "snapshot.json"} <= set(sizes)
    assert json.loads((tmp_path / "shipped" / "snapshot.json").read_text())["step"] == 3
    assert torch.load(tmp_path / "shipped" / "softmax.pt", weights_only=True)["weight"].dtype == torch.float16
    shipped_config = json.loads((tmp_path / "shipped" / "train_config.json").read_text())
    assert shipped_config["out_dir"] == "run" and not any(str(v).startswith(str(tmp_path)) for v in shipped_config.values())
    assert (tmp_path / "shipped" / "weights.pt").read_bytes() == (tmp_path / "snap" / "weights.pt").read_bytes()
    pytest.importorskip("matplotlib")
    assert "learning_curve.png" in sizes
    with pytest.raises(FileNotFoundError, match="neither model/weights.pt nor weights.pt"):
        ship_model(tmp_path / "run" / "checkpoints", tmp_path / "x")


def test_input_gates_fold_the_bias_into_the_product():
    from spacy_elmo.kernels.fused_train import _input_gates

    torch.manual_seed(0)
    x, w, b = torch.randn(2, 37, 24, dtype=torch.float64), torch.randn(2, 24, 40, dtype=torch.float64), torch.randn(2, 40, dtype=torch.float64)
    assert torch.allclose(_input_gates(x, w, b), torch.baddbmm(b.unsqueeze(1), x, w), rtol=1e-12, atol=1e-12)
    low = [t.to(torch.bfloat16) for t in (x, w, b)]
    got, ref = _input_gates(*low).double(), torch.baddbmm(low[2].unsqueeze(1), low[0], low[1]).double()
    assert got.dtype == torch.float64 and torch.allclose(got, ref, rtol=2**-7, atol=2**-7)  # one bf16 rounding apart at most


def test_fp32_fused_step_is_the_fp32_step_up_to_rounding(prepared):  # noqa: F811
    (loss_a, g_a), (loss_b, g_b) = _one_step(prepared[0] / "general-prep", (None, torch.float32))
    assert abs(loss_a - loss_b) < 1e-5 * loss_a  # bf16 is only held to 1e-2
    assert (g_a - g_b).norm() < 1e-4 * g_a.norm()


def test_fp32_fused_runs_the_kernels_records_itself_and_resumes_exactly(prepared, tmp_path, monkeypatch):  # noqa: F811
    data = prepared[0] / "general-prep"
    calls = []
    real = fused_train.run_layer
    monkeypatch.setattr(fused_train, "run_layer", lambda *a, **k: calls.append(a[-1]) or real(*a, **k))
    kw = dict(max_steps=8, checkpoint_every=4, dropout=0.2, n_samples=20, precision="fp32-fused")
    train(tiny_config(data, tmp_path / "straight", **kw))
    assert calls and set(calls) == {torch.float32}
    assert train(tiny_config(data, tmp_path / "resumed", **kw), interrupt_at=5)["interrupted"]
    saved = torch.load(tmp_path / "resumed" / "checkpoints" / "last.pt", weights_only=False)
    assert saved["precision"] == "fp32-fused"
    train(tiny_config(data, tmp_path / "resumed", **{**kw, "precision": None}), resume=True)  # the checkpoint's precision
    a = torch.load(tmp_path / "straight" / "checkpoints" / "last.pt", weights_only=False)
    b = torch.load(tmp_path / "resumed" / "checkpoints" / "last.pt", weights_only=False)
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    records = [json.loads(x) for x in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert {r["precision"] for r in records if "tokens_per_cpu_s" in r} == {"float32-fused"}
