"""Every compiled kernel's arguments are checked before the C code runs (a ValueError naming the
argument), and a NaN comes out where the eager code puts one (spacy_elmo/kernels/native.py,
kernels/csrc/train_kernels.c). One build, in a private temporary cache, for the file."""

import os

import pytest
import torch

from spacy_elmo.bilm.lstm import BiLstmStack
from spacy_elmo.kernels import build, native

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="needs a C compiler")
BF16, F32, NAN = torch.bfloat16, torch.float32, float("nan")


@pytest.fixture(scope="module")
def lib(kernel_loader):
    kernels = kernel_loader.get()
    assert kernels is not None
    return kernels


def _step(n=3, hid=4, low=BF16):
    """Valid arguments of :meth:`NativeKernels.forward`, by name."""
    return {
        "z": torch.randn(2, n, 4 * hid).to(low),
        "c_prev": torch.randn(2, n, hid),
        "gates": torch.empty(2, n, 4 * hid),
        "c_new": torch.empty(2, n, hid),
        "tanh_c": torch.empty(2, n, hid),
        "m": torch.empty(2, n, hid, dtype=low),
        "cell_clip": 0.5,
    }


def _backward(n=3, hid=4, low=BF16):
    return {
        "dm": torch.randn(2, n, hid).to(low),
        "gates": torch.rand(2, n, 4 * hid),
        "c_new": torch.randn(2, n, hid),
        "c_prev": torch.randn(2, n, hid),
        "tanh_c": torch.randn(2, n, hid).tanh(),
        "dc_next": torch.randn(2, n - 1, hid),
        "cell_clip": 0.5,
        "dz": torch.empty(2, n, 4 * hid, dtype=low),
        "dc_out": torch.empty(2, n, hid),
        "grad_bias": torch.zeros(2, 4 * hid),
    }


def _infer(n=3, hid=4):
    return {
        "bias": torch.randn(2, 4 * hid),
        "step": torch.randn(2, n, 4 * hid).to(BF16),
        "rec": torch.randn(2, n, 4 * hid).to(BF16),
        "c": torch.randn(2, n, hid),
        "m": torch.empty(2, n, hid, dtype=BF16),
        "cell_clip": 0.5,
    }


def _hidden(n=3, proj=4, low=BF16):
    return {
        "grad_out": torch.randn(2, n, proj),
        "dh_next": torch.randn(2, n - 1, proj).to(low),
        "hidden": torch.randn(2, n, proj).to(low),
        "proj_clip": 0.3,
        "out": torch.empty(2, n, proj, dtype=low),
    }


def test_valid_arguments_pass(lib):
    lib.forward(**_step())
    lib.forward(**_step(low=F32))
    lib.backward(**_backward())
    lib.hidden_grad(**_hidden())
    lib.infer_step(**_infer())


# (method, arguments, the argument to change, its bad value, the message): each names the argument
STEP_N, HID = 3, 4
CASES = [
    ("forward", _step, "c_new", lambda a: torch.empty(2, STEP_N, HID + 1), "c_new: expected .2, n, 4."),
    ("forward", _step, "gates", lambda a: torch.empty(2, STEP_N, 4 * HID, dtype=torch.float64), "gates: expected a torch.float32"),
    ("forward", _step, "tanh_c", lambda a: torch.empty(2, STEP_N, HID, device="meta"), "tanh_c: the compiled kernels take dense CPU"),
    ("forward", _step, "m", lambda a: [0.0], "m: expected a tensor"),
    ("forward", _step, "z", lambda a: torch.empty(STEP_N, 4 * HID, dtype=BF16), r"z: expected \[2, rows, width\]"),
    ("forward", _step, "c_prev", lambda a: torch.empty(2, STEP_N, 0), "c_prev: width 0 is outside 1..65536"),
    ("forward", _step, "c_prev", lambda a: torch.empty(2, 2 * STEP_N, HID)[:, ::2], "c_prev: expected .* contiguous rows"),
    ("forward", _step, "cell_clip", lambda a: -1.0, "cell_clip: expected None or a number >= 0"),
    ("forward", _step, "cell_clip", lambda a: NAN, "cell_clip: expected None or a number >= 0"),
    ("forward", _step, "c_new", lambda a: a["c_prev"], "c_new overlaps c_prev"),
    ("forward", _step, "tanh_c", lambda a: a["c_new"], "(c_new|tanh_c) overlaps (tanh_c|c_new)"),
    ("forward", _step, "gates", lambda a: torch.empty(2, STEP_N, 4 * HID, dtype=BF16), "gates: expected a torch.float32"),
    ("backward", _backward, "dc_out", lambda a: a["c_new"], "dc_out overlaps c_new"),
    ("backward", _backward, "dc_out", lambda a: a["dc_next"].new_empty(2, STEP_N, HID), None),  # fine: its own memory
    ("backward", _backward, "dc_next", lambda a: torch.randn(2, STEP_N + 1, HID), "dc_next: expected at most 3 rows"),
    ("backward", _backward, "grad_bias", lambda a: torch.zeros(2, 4 * HID + 1), "grad_bias: expected a contiguous float32"),
    ("backward", _backward, "dz", lambda a: torch.empty(2, STEP_N, 4 * HID), "dz: expected a torch.bfloat16"),
    ("hidden_grad", _hidden, "out", lambda a: a["grad_out"].to(BF16), None),
    ("hidden_grad", _hidden, "proj_clip", lambda a: "0.3", "proj_clip: expected None or a number"),
    ("hidden_grad", _hidden, "hidden", lambda a: torch.randn(2, STEP_N, 4), "hidden: expected a torch.bfloat16"),
    ("infer_step", _infer, "m", lambda a: a["step"].view(-1)[: 2 * STEP_N * HID].view(2, STEP_N, HID), r"m\[0\] overlaps step\[0\]"),
    ("infer_step", _infer, "bias", lambda a: torch.randn(4 * HID), r"bias: expected a contiguous float32 CPU \[2, 16\]"),
    ("infer_step", _infer, "rec", lambda a: torch.randn(2, STEP_N - 1, 4 * HID).to(BF16), r"rec\[0\]: expected 3 rows"),
]


@pytest.mark.parametrize("method, make, name, bad, message", CASES)
def test_each_bad_argument_is_refused_by_name(lib, method, make, name, bad, message):
    torch.manual_seed(0)
    args = make()
    args[name] = bad(args)
    if message is None:  # a valid variant: runs
        getattr(lib, method)(**args)
        return
    with pytest.raises(ValueError, match=message):
        getattr(lib, method)(**args)


def test_hidden_grad_refuses_an_output_overlapping_its_input(lib):
    args = _hidden(low=F32)
    args["out"] = args["grad_out"]
    with pytest.raises(ValueError, match="out overlaps grad_out"):
        lib.hidden_grad(**args)


def _directions_sharing_memory(x: torch.Tensor, shift: int) -> torch.Tensor:
    """``x``'s shape over one buffer whose second direction starts ``shift`` rows after the first."""
    rows, width = x.shape[1], x.shape[2]
    buffer = torch.empty(rows + shift, width, dtype=x.dtype)
    return buffer.as_strided((2, rows, width), (shift * width, width, 1))


@pytest.mark.parametrize("shift", [0, 1])  # 0: stride 0, the same rows; 1: the rows overlap by all but one
@pytest.mark.parametrize(
    "method, make, name",
    [
        ("forward", _step, "gates"),
        ("forward", _step, "c_new"),
        ("forward", _step, "m"),
        ("backward", _backward, "dz"),
        ("backward", _backward, "dc_out"),
        ("hidden_grad", _hidden, "out"),
        ("infer_step", _infer, "c"),
        ("infer_step", _infer, "m"),
    ],
)
def test_an_output_whose_two_directions_share_memory_is_refused(lib, method, make, name, shift):
    # before: accepted (only overlaps between different arguments were checked), and two threads
    # wrote the same rows despite `restrict`
    args = make()
    args[name] = _directions_sharing_memory(args[name], shift)
    with pytest.raises(ValueError, match=rf"{name}.*(two directions share memory|overlaps {name}\[)"):
        getattr(lib, method)(**args)


def test_an_input_may_read_one_buffer_for_both_directions(lib):
    args = _step()
    args["c_prev"] = torch.randn(3, 4).expand(2, 3, 4)  # a broadcast initial state: read only
    lib.forward(**args)


STACK_PROBE = r"""
import sys, torch
from pathlib import Path
from spacy_elmo.kernels import native
lib = native.KernelLoader(Path(sys.argv[1])).get()
assert lib is not None
H, n = native.MAX_WIDTH, 2
lib.infer_step(torch.zeros(2, 4 * H), torch.zeros(2, n, 4 * H), torch.zeros(2, n, 4 * H), torch.zeros(2, n, H), torch.empty(2, n, H), None, threads=2)
lib.backward(torch.zeros(2, n, H), torch.rand(2, n, 4 * H), torch.zeros(2, n, H), torch.zeros(2, n, H), torch.zeros(2, n, H), None, None,
             torch.empty(2, n, 4 * H), torch.empty(2, n, H), torch.zeros(2, 4 * H), threads=2)
lib.max_pool(torch.zeros(2, 3, H, dtype=torch.bfloat16), [1], [H], threads=2)
print("ok")
"""


def test_the_widest_rows_run_under_a_small_stack_limit(kernel_loader):
    # RLIMIT_STACK bounds the main thread's stack and, under glibc, sets the default size of the
    # threads the kernels start (read when the process starts: so it is set in the child before
    # exec). Before: each row's scratch was on the stack (up to 1 MiB at width 65,536) and the
    # process died with SIGSEGV (exit 139) at 1 MiB for the inference step, at 256 KiB for all three.
    import resource
    import subprocess
    import sys
    from pathlib import Path

    kernel_loader.get()  # built already: the child only loads it
    limit = 256 * 1024

    def small_stack():
        resource.setrlimit(resource.RLIMIT_STACK, (limit, resource.getrlimit(resource.RLIMIT_STACK)[1]))

    repo = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": repo, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", STACK_PROBE, str(kernel_loader.root)], preexec_fn=small_stack, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])


def test_calls_from_several_threads_at_once_each_get_their_own_scratch(lib):
    # each calling thread keeps its scratch between calls and grows it for a wider one: threads
    # calling at once with different widths give what one thread calling in turn gives
    import threading

    torch.manual_seed(0)
    cases = [_infer(n=5, hid=hid) for hid in (8, 512, 8, 64, 1024, 16) * 3]

    def run(args):
        out = {**args, "c": args["c"].clone(), "m": torch.empty_like(args["m"])}
        for _ in range(20):
            out["c"] = args["c"].clone()
            lib.infer_step(**out, threads=2)
        return out["c"], out["m"]

    expected = [run(args) for args in cases]
    got = [None] * len(cases)

    def worker(i):
        got[i] = run(cases[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(cases))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for (c, m), (c_want, m_want) in zip(got, expected):
        assert torch.equal(c, c_want) and torch.equal(m, m_want)


def test_disjoint_rows_of_one_buffer_are_not_an_overlap(lib):
    # fused_train passes the previous step's cells and this step's from one [2, total, H] buffer
    cells = torch.randn(2, 7, 4)
    args = _step()
    args["c_prev"], args["c_new"] = cells[:, 0:3], cells[:, 3:6]
    lib.forward(**args)
    args["c_new"] = cells[:, 2:5]  # shares row 2 with c_prev
    with pytest.raises(ValueError, match="c_new overlaps c_prev"):
        lib.forward(**args)


@pytest.mark.parametrize(
    "widths, counts, message",
    [
        ([0, 2], [4, 4], "widths: each must be 1..5"),  # width 0 read one position past the view
        ([1, 6], [4, 4], "widths: each must be 1..5"),
        ([1, 2], [-1, 9], "counts: .* must be >= 0"),  # a negative count wrote out of bounds
        ([1, 2], [4, 3], "counts: .*add up to the 8 filters"),
        ([1, 2, 3], [4, 4], "one count per width"),
        ([], [], "one count per width"),
        ([1, 2.5], [4, 4], "widths: expected integers"),
        ([1, 2], [4, True], "counts: expected integers"),
    ],
)
def test_max_pool_refuses_bad_widths_and_counts(lib, widths, counts, message):
    with pytest.raises(ValueError, match=message):
        lib.max_pool(torch.zeros(2, 5, 8, dtype=BF16), widths, counts)


def test_max_pool_refuses_a_non_contiguous_or_empty_conv(lib):
    with pytest.raises(ValueError, match="conv: expected a contiguous bfloat16"):
        lib.max_pool(torch.zeros(2, 8, 5, dtype=BF16).transpose(1, 2), [1], [8])
    with pytest.raises(ValueError, match="conv: expected 1 to"):
        lib.max_pool(torch.zeros(2, 0, 8, dtype=BF16), [1], [8])
    values, index = lib.max_pool(torch.zeros(2, 5, 8, dtype=BF16), [1, 5], [0, 8])  # an empty group is fine
    assert values.shape == index.shape == (2, 8)


# NaN: the compiled code puts a NaN where the eager code does (clamp and torch.max keep NaN)


def _eager_forward(z, c_prev, clip):
    """The eager step of spacy_elmo/kernels/fused_train.py, operation for operation."""
    hid = c_prev.shape[2]
    g = z.float()
    g[..., :hid].sigmoid_()
    g[..., hid : 2 * hid].tanh_()
    g[..., 2 * hid :].sigmoid_()
    i, j, f, o = g.chunk(4, dim=-1)
    c_new = (f * c_prev).addcmul_(i, j).clamp_(-clip, clip)
    tc = torch.tanh(c_new)
    return {"gates": g, "c_new": c_new, "tanh_c": tc, "m": (tc * o).to(z.dtype)}


def _assert_same_nans(got, ref, name):
    assert torch.equal(torch.isnan(got), torch.isnan(ref)), f"{name}: NaN at {torch.isnan(got).nonzero().tolist()}, eager {torch.isnan(ref).nonzero().tolist()}"
    keep = ~torch.isnan(ref)
    torch.testing.assert_close(got[keep].float(), ref[keep].float(), rtol=1e-2, atol=1e-2, msg=name)


@pytest.mark.parametrize("low", [BF16, F32])
def test_a_nan_gate_pre_activation_gives_nan_where_the_eager_step_does(lib, low):
    torch.manual_seed(0)
    hid = 8
    args = _step(n=4, hid=hid, low=low)
    args["z"] = (torch.randn(2, 4, 4 * hid) * 4).to(low)  # large: the clip is reached
    for d, r, k in [(0, 1, 2), (1, 0, hid + 3), (0, 2, 2 * hid + 1), (1, 2, 3 * hid + 5)]:  # i, j, f, o
        args["z"][d, r, k] = NAN
    args["c_prev"] = torch.randn(2, 4, hid) * 4
    args["c_prev"][0, 3, 4] = NAN
    lib.forward(**args)
    ref = _eager_forward(args["z"], args["c_prev"], args["cell_clip"])
    assert (ref["c_new"].abs() == 0.5).any()
    for name in ("gates", "c_new", "tanh_c", "m"):
        _assert_same_nans(args[name], ref[name], name)


def test_a_nan_in_the_inference_step_gives_nan_where_the_eager_step_does(lib):
    torch.manual_seed(0)
    hid = 8
    args = _infer(n=4, hid=hid)
    args["step"] = (torch.randn(2, 4, 4 * hid) * 4).to(BF16)
    for d, r, k in [(0, 1, 2), (1, 0, hid + 3), (0, 2, 2 * hid + 1), (1, 3, 3 * hid + 5)]:
        args["step"][d, r, k] = NAN
    c0 = args["c"].clone()
    lib.infer_step(**args)
    gates = (args["bias"].unsqueeze(1) + args["step"]).add_(args["rec"])  # bf16.run_layer's eager step
    gates[..., :hid].sigmoid_()
    gates[..., hid : 2 * hid].tanh_()
    gates[..., 2 * hid :].sigmoid_()
    i, j, f, o = gates.chunk(4, dim=-1)
    c = c0.mul_(f).addcmul_(i, j).clamp_(-0.5, 0.5)
    _assert_same_nans(args["c"], c, "c")
    _assert_same_nans(args["m"], (torch.tanh(c) * o).to(BF16), "m")


def test_max_pool_takes_a_nan_as_the_maximum_like_torch_max(lib):
    torch.manual_seed(0)
    widths, counts = [1, 3, 5], [6, 6, 4]
    conv = torch.randn(3, 5, 16).bfloat16()
    conv[0, 0, 0] = NAN  # at the first position
    conv[1, 3, 5] = NAN  # two in one column: the first wins
    conv[1, 4, 5] = -NAN
    conv[2, 1, 7] = NAN  # width 3: valid positions 0..2
    conv[2, 4, 8] = NAN  # width 3: past the valid positions, ignored
    conv[2, 2, 14] = -NAN  # width 5: one valid position (0), ignored
    values, index = lib.max_pool(conv, widths, counts)
    start = 0
    for width, count in zip(widths, counts):
        best, where = conv[:, : conv.shape[1] - width + 1, start : start + count].max(dim=1)
        _assert_same_nans(values[:, start : start + count], best.float(), f"width {width}")
        assert torch.equal(index[:, start : start + count], where), f"width {width}"
        start += count
    assert torch.isnan(values[1, 5]) and index[1, 5] == 3 and torch.isnan(values[2, 7])


def test_a_nan_input_gives_the_eager_nans_through_training_forward_and_backward(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "LOADER", native.KernelLoader(tmp_path))
    torch.manual_seed(0)
    stack = BiLstmStack(16, 40, 8, 2, cell_clip=0.5, proj_clip=0.3, residual=True)
    with torch.no_grad():
        for p in stack.parameters():
            p.mul_(3)
    stack.train_dtype = torch.bfloat16
    x = torch.randn(3, 6, 16)
    x[1, 2, 5] = NAN
    weights: list = []

    def run():
        stack.zero_grad()
        inputs = x.clone().requires_grad_(True)
        outs, (h, c) = stack(inputs, torch.tensor([6, 4, 5]))
        if not weights:  # fixed random output weights, made on the first call
            weights.extend(torch.randn_like(o) for o in outs)
        sum((o * w).sum() for o, w in zip(outs, weights)).backward()
        return [o.detach() for o in outs] + [h, c, inputs.grad], {n: p.grad.clone() for n, p in stack.named_parameters()}

    assert native.library() is not None
    got, got_grads = run()
    monkeypatch.setattr(native, "library", lambda: None)
    ref, ref_grads = run()
    assert torch.isnan(ref[-2]).any()  # the cell state carries the NaN
    for k, (a, b) in enumerate(zip(got, ref)):
        assert torch.equal(torch.isnan(a), torch.isnan(b)), k
    for name in ref_grads:
        assert torch.equal(torch.isnan(got_grads[name]), torch.isnan(ref_grads[name])), name
