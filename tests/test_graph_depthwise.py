"""A MobileNetV2 block through the graph passes: the depthwise conv runs
packed in channel blocks between the packed 1x1 convs, the blocks carried
from the expansion to the projection (a depthwise multiplier of 2 stays a
direct NCHW grouped conv), its BatchNorm folds and its ReLU fuses, and the
export matches numpy."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.graph import optimize, trace

from helpers import bn_stats as _stats, exported_matches as _exported_matches, node_names as _ops


class InvertedResidual(nn.Module):
    """MobileNetV2's block: a 1x1 expansion, a 3x3 depthwise conv (``groups``
    = its channels, ``multiplier`` outputs each) and a 1x1 projection, each
    followed by an eval BatchNorm (a ReLU after the first two); the input is
    added back where the shapes allow."""

    def __init__(self, channels: int, hidden: int, multiplier: int = 1, stride: int = 1):
        self.hidden, self.stride = hidden, stride
        self.expand, self.bn1 = nn.Conv(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden)
        self.depthwise = nn.Parameter(nn.init.kaiming_uniform(9, 9, shape=(hidden * multiplier, 1, 3, 3)))
        self.bn2 = nn.BatchNorm2d(hidden * multiplier)
        self.project, self.bn3 = nn.Conv(hidden * multiplier, channels, 1, bias=False), nn.BatchNorm2d(channels)

    def forward(self, x):
        y = nn.ReLU()(self.bn1(self.expand(x)))
        y = kiln.te.call("conv2d", y, self.depthwise, groups=self.hidden, padding=1, stride=self.stride)
        y = self.bn3(self.project(nn.ReLU()(self.bn2(y))))
        return y + x if self.stride == 1 else y

    def numpy(self, x):
        """The same forward in numpy, from the ops' references."""
        conv = kiln.te.get_op("conv2d")

        def bn(v, layer):
            scale = layer.weight.numpy() / np.sqrt(layer.running_var.numpy() + layer.eps)
            shift = layer.bias.numpy() - layer.running_mean.numpy() * scale
            return v * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)

        def apply(v, w, **attrs):
            return conv.reference(v, w.numpy(), **conv.parse_attrs(attrs))

        y = np.maximum(bn(apply(x, self.expand.weight), self.bn1), 0)
        y = apply(y, self.depthwise, groups=self.hidden, padding=1, stride=self.stride)
        y = bn(apply(np.maximum(bn(y, self.bn2), 0), self.project.weight), self.bn3)
        return y + x if self.stride == 1 else y


@pytest.mark.parametrize("multiplier, stride", [(1, 1), (2, 2)])
def test_a_depthwise_block_folds_fuses_and_matches_numpy(tmp_path, multiplier, stride):
    """The depthwise conv runs as ``depthwise_conv2d_packed`` reading and
    writing the channel blocks of the 1x1 convs around it
    (``kiln.strategy``'s ``depthwise``, ``graph.layout``); with a
    multiplier of 2 (not depthwise: more outputs than inputs) it runs
    directly in NCHW. Its BatchNorm folds into its weight along the output
    channels and its ReLU fuses; the export matches numpy's forward."""
    nn.init.manual_seed(6)
    x = np.random.default_rng(6).standard_normal((64, 8, 10, 10)).astype("float32")
    model = _stats(InvertedResidual(8, 16, multiplier, stride), x)
    graph = optimize(trace(model, x[:1]))
    expand, depthwise, project = graph.nodes[:3]
    packed = multiplier == 1
    assert _ops(graph)[:3] == ["conv2d_packed_add_relu", f"{'depthwise_' if packed else ''}conv2d{'_packed' * packed}"
                               "_add_relu", "conv2d_packed_add" + ("_add" if stride == 1 else "")]
    if packed:  # the expansion's blocks, read and written by the depthwise conv, read by the projection
        block = depthwise.inputs[1].shape[4]
        assert expand.outputs[0].shape[4] == block and depthwise.attrs["in_block"] == block
        assert depthwise.attrs["out_block"] and project.attrs["in_block"] == block
    else:
        assert depthwise.attrs["groups"] == 16 and tuple(depthwise.inputs[1].shape) == (32, 1, 3, 3)
        assert all(len(v.shape) == 4 for n in graph.nodes for v in n.outputs)  # no channel blocks
    predictor = _exported_matches(model, x, tmp_path)
    for batch in (1, 7):
        np.testing.assert_allclose(predictor(x[:batch]), model.numpy(x[:batch]), rtol=1e-4, atol=1e-4)
