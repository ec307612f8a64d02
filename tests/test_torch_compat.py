"""A model ported from PyTorch by hand: the layers take PyTorch's arguments,
PyTorch's ``state_dict`` loads (``layout="torch"``) and kiln's goes back,
and the two models agree."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import AttrError, ShapeError
from kiln.nn import functional as F

torch = pytest.importorskip("torch", reason="PyTorch is not installed: these tests compare kiln.nn with torch.nn")

RNG = np.random.default_rng(0)
IMAGES = RNG.standard_normal((2, 4, 10, 10)).astype("float32")


def torch_cnn():
    t = torch.nn
    return t.Sequential(t.Conv2d(4, 8, 3, padding=0, bias=False), t.BatchNorm2d(8), t.ReLU(),
                        t.Conv2d(8, 8, 3, padding=2, dilation=2, groups=4), t.ReLU(), t.MaxPool2d(2),
                        t.Flatten(), t.Linear(8 * 4 * 4, 10))


def kiln_cnn():
    return nn.Sequential(nn.Conv(4, 8, 3, padding=0, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv(8, 8, 3, padding=2, dilation=2, groups=4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(8 * 4 * 4, 10))


def trained_torch_cnn():
    """A torch CNN whose running statistics and counter are not the defaults."""
    torch.manual_seed(0)
    model = torch_cnn().train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.from_numpy(IMAGES) * 2 + 1)
    return model.eval()


def torch_tensors(state: dict) -> dict:
    return {k: torch.from_numpy(v) for k, v in state.items()}


def test_a_torch_state_dict_loads_and_the_outputs_agree_in_eval():
    ref = trained_torch_cnn()
    want = ref(torch.from_numpy(IMAGES)).detach().numpy()
    state = ref.state_dict()
    model = kiln_cnn()
    assert list(model.state_dict(layout="torch")) == list(state)  # PyTorch's names, in PyTorch's order
    assert model.load_state_dict(state, layout="torch") == ([], [])
    assert model.modules[1].num_batches_tracked == 3
    np.testing.assert_allclose(model.eval()(kiln.Tensor(IMAGES)).numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(model.modules[7].weight.numpy(), state["7.weight"].numpy().T)  # kiln: (in, out)

    numpy_state = {k: v.numpy() for k, v in state.items()}  # numpy arrays do as well
    fresh = kiln_cnn()
    fresh.load_state_dict(numpy_state, layout="torch")
    np.testing.assert_allclose(fresh.eval()(kiln.Tensor(IMAGES)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_kiln_state_dict_loads_into_torch_and_the_outputs_agree():
    kiln.manual_seed(3)
    model = kiln_cnn()
    model.train()(kiln.Tensor(IMAGES))  # running statistics off their defaults
    model.eval()
    model.modules[1].num_batches_tracked = 5
    ref = torch_cnn()
    ref.load_state_dict(torch_tensors(model.state_dict(layout="torch")))  # strict
    assert int(ref[1].num_batches_tracked) == 5
    np.testing.assert_allclose(ref.eval()(torch.from_numpy(IMAGES)).detach().numpy(),
                               model(kiln.Tensor(IMAGES)).numpy(), rtol=1e-5, atol=1e-5)
    # and back: the round trip through PyTorch is exact
    again = kiln_cnn()
    again.load_state_dict(ref.state_dict(), layout="torch")
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(again.state_dict()[name], value)


def test_a_kiln_layout_load_of_torch_state_says_which_layout_fits():
    state = torch_cnn().state_dict()
    with pytest.raises(AttrError) as err:
        kiln_cnn().load_state_dict(state)
    msg = str(err.value)
    assert "unexpected keys: 1.num_batches_tracked" in msg
    assert "7.weight (got (10, 128), expected (128, 10))" in msg
    assert "it loads with layout='torch'" in msg
    without_counter = {k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}
    kiln_cnn().load_state_dict(without_counter, layout="torch")  # PyTorch's older state dicts lack it


def test_torch_layout_load_lists_every_problem_and_changes_nothing():
    model = kiln_cnn()
    before = model.state_dict()
    state = torch_cnn().state_dict()
    del state["3.bias"]
    state["9.weight"] = torch.zeros(3)
    state["7.weight"] = torch.zeros(128, 10)  # kiln's layout where PyTorch's was asked for
    state["1.num_batches_tracked"] = torch.zeros(2, dtype=torch.long)
    with pytest.raises(AttrError) as err:
        model.load_state_dict(state, layout="torch")
    msg = str(err.value)
    assert "missing keys: 3.bias" in msg and "unexpected keys: 9.weight" in msg
    assert "7.weight (got (128, 10), expected (10, 128))" in msg  # shapes in the layout asked for
    assert "1.num_batches_tracked (got (2,), expected ())" in msg
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name])

    only_shape = torch_cnn().state_dict()
    only_shape["0.weight"] = torch.zeros(8, 4, 5, 5)
    with pytest.raises(ShapeError, match=r"0\.weight \(got \(8, 4, 5, 5\), expected \(8, 4, 3, 3\)\)"):
        model.load_state_dict(only_shape, layout="torch")
    assert model.load_state_dict({"7.bias": torch.zeros(10)}, strict=False, layout="torch").unexpected_keys == []
    for bad in ("pytorch", None):
        with pytest.raises(AttrError, match="layout.*'kiln', 'torch'"):
            model.load_state_dict(state, layout=bad)
        with pytest.raises(AttrError, match="layout"):
            model.state_dict(layout=bad)


def test_a_tied_linear_weight_is_transposed_under_every_name():
    class Tied(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(3, 2)
            self.tied = self.fc.weight

    state = Tied().state_dict(layout="torch")
    assert state["fc.weight"].shape == state["tied"].shape == (2, 3)
    Tied().load_state_dict(state, layout="torch")


@pytest.mark.parametrize("kernel, options", [
    (2, dict(padding="same")),                          # an even span: the extra row and column go after
    ((3, 2), dict(padding="same", dilation=(1, 3), groups=2)),
    (3, dict(padding="valid", stride=2, bias=False)),
    ((1, 3), dict(padding=(0, 1), groups=4)),           # depthwise
])
def test_conv_forward_and_gradients_match_torch(kernel, options):
    kiln.manual_seed(1)
    conv = nn.Conv(4, 4, kernel, **options)
    ref = torch.nn.Conv2d(4, 4, kernel, **options)
    ref.load_state_dict(torch_tensors(conv.state_dict(layout="torch")))
    x = kiln.Tensor(IMAGES, requires_grad=True)
    xt = torch.from_numpy(IMAGES).requires_grad_()
    y, yt = conv(x), ref(xt)
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    g = RNG.standard_normal(yt.shape).astype("float32")
    (y * kiln.Tensor(g)).sum().backward()
    (yt * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(conv.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_conv_keeps_its_half_kernel_default_padding_and_refuses_bad_arguments():
    assert nn.Conv(1, 1, 3).padding == (1, 1) and nn.Conv(1, 1, 2).padding == (1, 1)  # kernel // 2, not 0
    assert nn.Conv(1, 1, 3, dilation=2).padding == (2, 2)  # (dilation * (kernel - 1) + 1) // 2
    assert nn.Conv(1, 1, 3, padding=0).padding == (0, 0) and nn.Conv(1, 1, 3, padding="same").padding == "same"
    assert nn.Conv(4, 6, 3, groups=2).weight.shape == (6, 2, 3, 3)
    for options, match in [(dict(padding="full"), r"padding.*'full'.*'same' or 'valid'"),
                           (dict(padding="same", stride=2), "stride 1"),
                           (dict(padding=-1), "padding"),
                           (dict(padding_mode="reflect"), r"padding_mode.*'reflect'.*zeros only"),
                           (dict(padding_mode="mirror"), r"padding_mode.*'mirror'.*PyTorch's"),
                           (dict(groups=3), r"groups.*divisor of both"),
                           (dict(groups=0), "groups")]:
        with pytest.raises(AttrError, match=match):
            nn.Conv(4, 6, 3, **options)
    with pytest.raises(AttrError, match="padding.*'full'"):
        F.conv2d(kiln.Tensor(IMAGES), kiln.Tensor(np.ones((1, 4, 3, 3), "float32")), padding="full")


@pytest.mark.parametrize("kiln_pool, torch_pool", [
    (lambda: nn.MaxPool2d(3, stride=2, padding=1, dilation=1, ceil_mode=True),
     lambda: torch.nn.MaxPool2d(3, stride=2, padding=1, dilation=1, ceil_mode=True)),
    (lambda: nn.MaxPool2d(2, dilation=2), lambda: torch.nn.MaxPool2d(2, dilation=2)),
    (lambda: nn.AvgPool2d(3, 2, 1), lambda: torch.nn.AvgPool2d(3, 2, 1)),  # the padding counts, as in PyTorch
    (lambda: nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
     lambda: torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False)),
])
def test_pooling_takes_torchs_arguments_and_agrees(kiln_pool, torch_pool):
    x = IMAGES[:, :, :9, :9]
    np.testing.assert_allclose(kiln_pool()(kiln.Tensor(x)).numpy(), torch_pool()(torch.from_numpy(x)).numpy(),
                               rtol=1e-5, atol=1e-6)


def test_pooling_and_batchnorm_refuse_what_kiln_lacks_and_take_both_names():
    x = kiln.Tensor(IMAGES)
    with pytest.raises(AttrError, match="return_indices"):
        nn.MaxPool2d(2, return_indices=True)(x)
    with pytest.raises(AttrError, match="divisor_override"):
        nn.AvgPool2d(2, divisor_override=3)(x)
    assert nn.BatchNorm2d(num_features=3, eps=1e-3, momentum=0.2).dim == 3
    assert nn.BatchNorm1d(dim=5).num_features == 5  # kiln's earlier name
    with pytest.raises(AttrError, match="pass one"):
        nn.BatchNorm2d(3, dim=3)
    with pytest.raises(AttrError, match="num_features"):
        nn.BatchNorm2d()
    with pytest.raises(AttrError, match="momentum.*cumulative"):
        nn.BatchNorm2d(3, momentum=None)
    linear = nn.Linear(in_features=3, out_features=2, bias=False)
    assert linear.bias is None and list(linear.state_dict(layout="torch")) == ["weight"]
