"""The model zoo (``kiln.nn.zoo``): the ResNet's shape, its export (BatchNorms
folded, residual adds fused, same outputs as its eval forward) and a few
training steps; names the zoo does not know are refused."""
import numpy as np
import pytest

import kiln
from kiln.errors import AttrError
from kiln.nn import modules as M
from kiln.nn.train import MODELS, build_model
from kiln.nn.zoo import BasicBlock

from devices import cpu_level  # noqa: F401 - a fixture
from helpers import conv_blocks

IMAGE = (1, 8, 8)  # the digits
BATCH = 7  # one batch size for most checks, so that they share their compiled kernels


def resnet_with_statistics(seed: int = 0):
    """The zoo's resnet in eval mode, its BatchNorms given random affine
    parameters and running statistics (fresh ones are the identity, which
    would hide a BatchNorm folded wrongly)."""
    kiln.nn.init.manual_seed(seed)
    model = build_model("resnet", IMAGE, 10)
    rng = np.random.default_rng(seed)
    state = model.state_dict()
    for name, bn in model.named_parameters() + model.named_buffers():
        if bn.ndim != 1 or name.endswith("6.bias"):  # the BatchNorms' vectors; 6 is the classifier
            continue
        low, high = (0.5, 2.0) if name.endswith(("running_var", "weight")) else (-0.5, 0.5)
        state[name] = rng.uniform(low, high, bn.shape).astype("float32")
    model.load_state_dict(state)
    return model.eval()


def test_resnet_is_a_stem_two_basic_blocks_pooling_and_a_classifier():
    assert "resnet" in MODELS
    kiln.nn.init.manual_seed(0)
    model = build_model("resnet", IMAGE, 10)
    layers = model.modules
    assert [type(m) for m in layers] == [M.Conv, M.BatchNorm2d, M.ReLU, BasicBlock, BasicBlock, M.GlobalAvgPool2d,
                                         M.Linear]
    assert isinstance(layers[3].shortcut, M.Identity)  # same width: the identity
    assert [type(m) for m in layers[4].shortcut.modules] == [M.Conv, M.BatchNorm2d]  # 16 -> 32, stride 2
    assert layers[4].shortcut.modules[0].stride == (2, 2) and layers[6].in_features == 32
    x = np.random.default_rng(0).random((BATCH,) + IMAGE, dtype=np.float32)
    assert model(kiln.Tensor(x)).shape == (BATCH, 10)
    assert model.eval()(kiln.Tensor(x)).shape == (BATCH, 10)


def test_the_zoo_refuses_unknown_names_and_flat_inputs_for_image_models():
    with pytest.raises(AttrError, match="resnet") as info:
        build_model("vgg", IMAGE, 10)
    assert info.value.arg == "model"
    with pytest.raises(AttrError, match=r"\(channels, height, width\)") as info:
        build_model("resnet", (64,), 10)
    assert info.value.arg == "in_shape"


def test_exported_resnet_folds_its_batchnorms_fuses_its_adds_and_matches_its_eval_forward(tmp_path, cpu_level):
    from kiln.graph.export import export, optimize
    from kiln.graph.trace import trace

    model = resnet_with_statistics()
    graph = optimize(trace(model, np.zeros((1,) + IMAGE, "float32")))
    # 6 convs (stem, 2 per block, the projection; the 3x3 stride-1 ones past the stem as Winograd), the
    # classifier: no elementwise kernel left, the pooling computed in the last conv's tasks; the convs hand each other channel blocks, converted back to NCHW once, after the
    # pooling (graph.layout). A conv fused with its residual add takes the add's place: the second block's
    # projection comes before the conv its output is added to. The second block's first conv runs in the
    # last conv's tasks where those write one channel block (graph.fuse.fuse_prologues), else before it
    packed, winograd = "conv2d_packed", "conv2d_winograd"
    one_block = conv_blocks((1, 32, 4, 4), (32, 32, 3, 3))[1] == 1
    last = "conv2d_winograd_add_add_relu_global_avg_pool2d"
    convs = [packed, winograd, winograd, packed] + ([winograd] if one_block else [packed, winograd])
    assert [n.op.name for n in graph.nodes] == convs + ["from_blocked", "reshape", "dense_packed"]
    if one_block:
        assert graph.nodes[4].name == "conv2d_packed_add_relu_" + last
        assert graph.nodes[4].prologue.attrs["stride"] == (2, 2)
    else:
        assert graph.nodes[5].name == last and graph.nodes[4].attrs["stride"] == (2, 2)
    epilogues = [(op.name, others) for n in graph.nodes for m in ([n.prologue] if n.prologue else []) + [n]
                 for op, _, others in m.epilogue]
    # BatchNorm's subtract and multiply: folded
    assert {name for name, _ in epilogues} == {"add", "relu", "global_avg_pool2d"}
    residual_adds = [name for name, others in epilogues if any(not v.is_const for v in others)]
    assert residual_adds == ["add", "add"]  # one per block, in a conv's write-back
    predictor = kiln.runtime.Predictor(export(model, np.zeros((1,) + IMAGE, "float32"), tmp_path / "resnet.so"))
    rng = np.random.default_rng(1)
    for batch in (1, BATCH, 64):
        x = rng.random((batch,) + IMAGE, dtype=np.float32)
        # measured: |difference| <= 1.1e-6 for logits up to 5.6 (folding changes the rounding)
        np.testing.assert_allclose(predictor(x), model(kiln.Tensor(x)).numpy(), rtol=1e-5, atol=1e-5)


def test_torch_twin_computes_what_the_resnet_computes():
    torch = pytest.importorskip("torch", reason="the twins are PyTorch models")
    from kiln.bench.twins import torch_twin

    model = resnet_with_statistics()
    x = np.random.default_rng(0).random((BATCH,) + IMAGE, dtype=np.float32)
    with torch.inference_mode():
        expected = torch_twin(model).eval()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(kiln.Tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_resnet_training_steps_lower_the_loss():
    kiln.nn.init.manual_seed(0)
    model = build_model("resnet", IMAGE, 10)
    data = kiln.data.digits("train", flatten=False)
    x, y = data.arrays[0][:BATCH], data.arrays[1][:BATCH]
    optimizer = kiln.optim.SGD(model.parameters(), lr=0.1)  # Adam would compile 6 times the update kernels
    loss_fn = M.SoftmaxLoss()
    losses = []
    for _ in range(5):  # one batch, again and again: the loss must fall
        optimizer.zero_grad()
        loss = loss_fn(model(kiln.Tensor(x)), kiln.Tensor(y))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.6 * losses[0], losses
    assert all(p.grad is not None for p in model.parameters())
