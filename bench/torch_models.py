"""Reference models written in PyTorch, for the frontends' tests and the
models benchmark: torchvision's ResNet and MobileNetV2 architectures (its
wheel does not import beside the CPU build of PyTorch, so they are written
here, layer for layer) and Hugging Face's BERT and GPT-2 from configs
(random weights, nothing downloaded). ``width``/``depth`` shrink them for
CI; the defaults are the real sizes. Each function imports torch (an
optional dependency) when called.
"""
from __future__ import annotations


def resnet(layers=(3, 4, 6, 3), width: int = 64, classes: int = 1000, bottleneck: bool = True):
    """ResNet-50 by default (``layers=(2, 2, 2, 2), bottleneck=False``: ResNet-18)."""
    from torch import nn

    class Basic(nn.Module):
        expansion = 1

        def __init__(self, cin, planes, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = _shortcut(cin, planes, stride)

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + (x if self.downsample is None else self.downsample(x)))

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, planes, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = _shortcut(cin, planes * 4, stride)

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + (x if self.downsample is None else self.downsample(x)))

    def _shortcut(cin, cout, stride):
        if stride == 1 and cin == cout:
            return None
        return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    block = Bottleneck if bottleneck else Basic

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            cin, stages = width, []
            for i, count in enumerate(layers):
                planes = width * 2 ** i
                blocks = []
                for j in range(count):
                    blocks.append(block(cin, planes, 2 if (j == 0 and i > 0) else 1))
                    cin = planes * block.expansion
                stages.append(nn.Sequential(*blocks))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(self.avgpool(x).flatten(1))

    return _randomize_bn(ResNet().eval())


def mobilenet_v2(width: float = 1.0, classes: int = 1000, settings=None):
    """MobileNetV2 (torchvision's layers: ReLU6, depthwise 3x3, inverted residuals)."""
    from torch import nn

    def conv_bn(cin, cout, k, stride, groups=1, relu=True):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, nn.ReLU6(inplace=True)) if relu else nn.Sequential(*layers)

    class Inverted(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            layers = [conv_bn(cin, hidden, 1, 1)] if expand != 1 else []
            layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden), conv_bn(hidden, cout, 1, 1, relu=False)]
            self.conv = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.conv(x) if self.residual else self.conv(x)

    settings = settings or [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                            (6, 160, 3, 2), (6, 320, 1, 1)]
    cin = int(32 * width)
    last = max(int(1280 * width), 1280 if width >= 1 else int(1280 * width))
    features = [conv_bn(3, cin, 3, 2)]
    for t, c, n, s in settings:
        cout = int(c * width)
        for i in range(n):
            features.append(Inverted(cin, cout, s if i == 0 else 1, t))
            cin = cout
    features.append(conv_bn(cin, last, 1, 1))

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return self.classifier(x.flatten(1))

    return _randomize_bn(MobileNetV2().eval())


def _randomize_bn(model):
    """Running statistics away from (0, 1), so a BatchNorm that is folded wrong shows."""
    import torch
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
    return model


def bert(hidden: int = 768, layers: int = 12, heads: int = 12, intermediate: int = 3072, vocab: int = 30522):
    """``transformers.BertModel(BertConfig(...))``, random weights, eval mode."""
    import torch
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    config = BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=intermediate, vocab_size=vocab)
    config._attn_implementation = "eager"
    return BertModel(config).eval()


def gpt2(hidden: int = 768, layers: int = 12, heads: int = 12, vocab: int = 50257):
    """``transformers.GPT2Model(GPT2Config(...))`` (eager attention, no cache), random weights, eval mode."""
    import torch
    from transformers import GPT2Config, GPT2Model
    torch.manual_seed(0)
    config = GPT2Config(n_embd=hidden, n_layer=layers, n_head=heads, vocab_size=vocab, use_cache=False)
    config._attn_implementation = "eager"
    return GPT2Model(config).eval()


class HiddenStates:
    """Wraps a Hugging Face model so its forward takes tensors positionally
    and returns ``last_hidden_state`` alone (what the exporters take)."""

    def __new__(cls, model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask=None):
                out = self.model(input_ids=input_ids, attention_mask=attention_mask)
                return out.last_hidden_state

        return Wrapped().eval()


def bert_classifier(hidden: int = 512, layers: int = 4, heads: int = 8, intermediate: int = 2048,
                    vocab: int = 30522, labels: int = 2):
    """``transformers.BertForSequenceClassification`` (BERT-small by
    default: 4 layers of 512, 8 heads), random weights, no dropout (a
    training step is then the same computation in either mode); its forward
    takes ``(input_ids, attention_mask)`` and returns the logits."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    config = BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=intermediate, vocab_size=vocab, num_labels=labels,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config._attn_implementation = "eager"
    model = BertForSequenceClassification(config)

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).logits

    return Logits()
