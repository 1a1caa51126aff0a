"""Convolutional zoo entries: ResNet- and MobileNet-shaped BatchNorm CNNs (eval, train,
wrapped), 1-D conv audio nets over raw signals and spectrograms, frames as symbols, and a
character CNN.

Images are 16 x 12 (non-square) and channel counts avoid every map side, so no reading
hides behind equal sizes. A record-level output (``n u``) on an image has one position
for 192 symbols, which the contract refuses.
"""

from __future__ import annotations

import torch
from torch import nn

from . import (
    Read,
    Refuse,
    encode_signals,
    encode_spectrograms,
    encode_strings,
    entry,
    images,
    seeded,
    signals,
    spectrograms,
    strings,
)

MAP, SEQ, VEC, CHW = Read("n u s s"), Read("n s u"), Read("n u"), Read("n u s")
TWICE = Refuse("LayerError", "called twice in one forward pass: which call is read?")


def _random_stats(module: nn.Module) -> nn.Module:
    """BatchNorm running statistics away from (0, 1), so eval and train modes differ."""
    g = torch.Generator().manual_seed(7)
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.3)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.num_batches_tracked.fill_(3)
    return module


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: one ReLU module called twice, a 1x1 conv shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))  # fmt: skip

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + idt)


class ResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 10, 3, 1, 1, bias=False), nn.BatchNorm2d(10),
                                  nn.ReLU())  # fmt: skip
        self.layer1 = BasicBlock(10, 10)
        self.layer2 = BasicBlock(10, 14, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(14, 5)

    def forward(self, x):
        x = self.pool(self.layer2(self.layer1(self.stem(x))))
        return self.fc(self.flatten(x))


RESNET = {
    "*relu": TWICE,
    "*conv?": MAP, "*bn?": MAP, "*stem*": MAP, "*downsample*": MAP,
    "*layer1": MAP,  # output shape = input shape: the producer's reading
    "*layer2": Refuse("LayerError", "a 4-D output of a module of no known kind"),
    "*pool": MAP,  # 1x1 map, resized to the image
    "*flatten": VEC, "*fc": VEC, "net": VEC,
}  # fmt: skip


def _resnet(train: bool) -> nn.Module:
    seeded(1)
    return _random_stats(ResNet()).train(train)


@entry("resnet-bn", images, RESNET, family="cnn")
def resnet_bn():
    return _resnet(False), {}


@entry("resnet-bn-train", images, RESNET, family="cnn")
def resnet_bn_train():
    return _resnet(True), {}


class Wrapper(nn.Module):
    """A user's fresh wrapper (train mode, as any new module) around a pretrained net."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.scale = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        return self.net(x * self.scale)


@entry("wrapper-train-around-eval", images, RESNET, family="cnn")
def wrapper_train():
    return Wrapper(_resnet(False)).train(), {}


@entry("wrapper-eval-around-train", images, RESNET, family="cnn")
def wrapper_eval():
    w = Wrapper(_resnet(False)).eval()
    w.net.train()  # a BN CNN left in train mode inside an eval-mode wrapper
    return w, {}


def _cbr(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: bool = True):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]  # fmt: skip
    return nn.Sequential(*layers, *([nn.ReLU6()] if act else []))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.residual = stride == 1 and cin == cout
        self.conv = nn.Sequential(_cbr(cin, mid, 1), _cbr(mid, mid, 3, stride, groups=mid),
                                  _cbr(mid, cout, 1, act=False))  # fmt: skip

    def forward(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _cbr(3, 10, 3, 2), InvertedResidual(10, 10, 1, 3), InvertedResidual(10, 14, 2, 2),
            InvertedResidual(14, 14, 1, 3),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(14, 5))

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


@entry("mobilenet-bn", images, {
    "features*": MAP,  # features.2 returns its conv's output tensor: that reading
    "pool": MAP, "classifier*": VEC,
}, family="cnn")  # fmt: skip
def mobilenet():
    seeded(2)
    return _random_stats(MobileNet()).eval(), {}


class AudioNet(nn.Module):
    """Conv1d + BatchNorm1d over a raw signal; a symbol is 4 samples (two stride-2 convs)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(1, 10, 5, 2, 2)
        self.bn1 = nn.BatchNorm1d(10)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv1d(10, 14, 5, 2, 2)
        self.bn2 = nn.BatchNorm1d(14)
        self.act2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.head = nn.Linear(14, 3)

    def forward(self, x):
        x = self.act2(self.bn2(self.conv2(self.act1(self.bn1(self.conv1(x))))))
        return self.head(self.pool(x).flatten(1))


@entry("audio-conv1d", signals, {"*": CHW, "head": VEC}, family="audio")
def audio_conv1d():
    seeded(3)
    kw = {"encode": encode_signals, "symbols": lambda r: len(r) // 4}
    return _random_stats(AudioNet()).eval(), kw


class SpecNet(nn.Module):
    """Conv1d over a spectrogram's mel bins (channels) and Conv2d over (mel, frames)."""

    def __init__(self, mel: int = 11) -> None:
        super().__init__()
        self.conv = nn.Conv1d(mel, 10, 3, 1, 1)
        self.bn = nn.BatchNorm1d(10)
        self.conv_mean = nn.Conv2d(1, 7, 3, 1, 1)
        self.conv_max = nn.Conv2d(7, 5, 3, 1, 1)
        self.conv_plain = nn.Conv2d(5, 4, 3, 1, 1)

    def forward(self, x):  # x: (N, 1, mel, frames)
        a = self.bn(self.conv(x[:, 0]))
        b = self.conv_plain(torch.relu(self.conv_max(torch.relu(self.conv_mean(x)))))
        return a.mean(1) + b.mean((1, 2))


@entry("spectrogram-conv", spectrograms, {
    "conv": CHW, "bn": CHW,
    "conv_mean": Read("n u r s", reduce="mean"), "conv_max": Read("n u r s", reduce="max"),
    "conv_plain": MAP,  # undeclared: 11 x frames pixels for `frames` symbols
}, family="audio", contract=True)  # fmt: skip
def spectrogram_conv():
    seeded(4)
    layouts = {"conv_mean": _layout("n u r s", reduce="mean"),
               "conv_max": _layout("n u r s", reduce="max")}  # fmt: skip
    return _random_stats(SpecNet()).eval(), {
        "encode": encode_spectrograms, "symbols": lambda r: r.shape[1], "layouts": layouts}


class FrameNet(nn.Module):
    """Every record's 16-sample frames on one batch axis (a per-frame classifier)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 6, 3, 2, 1)
        self.flat = nn.Flatten()
        self.fc1 = nn.Linear(48, 10)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(10, 12)

    def forward(self, frames):  # (F, 16)
        return self.fc2(self.act(self.fc1(self.flat(self.conv(frames[:, None])))))


def encode_frames(records: list) -> torch.Tensor:
    return torch.cat([torch.from_numpy(r).reshape(-1, 16) for r in records])


@entry("framed-audio", signals, {
    "conv": Read("f u r", reduce="max"), "flat": VEC, "fc1": Read("f u"), "act": Read("f u"),
    "fc2": Read("f u"),
}, family="audio", contract=True)  # fmt: skip
def framed_audio():
    seeded(5)
    layouts = {"conv": _layout("f u r", reduce="max"), "fc1": "f u", "fc2": "f u"}
    return FrameNet().eval(), {
        "encode": encode_frames, "symbols": lambda r: len(r) // 16, "layouts": layouts}


class CharCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(9, 8)
        self.conv = nn.Conv1d(8, 10, 3, 1, 1)
        self.act = nn.ReLU()
        self.proj = nn.Linear(10, 14)

    def forward(self, x):
        return self.proj(self.act(self.conv(self.embed(x).transpose(1, 2))).transpose(1, 2))


@entry("char-cnn", strings, {"embed": SEQ, "conv": CHW, "act": CHW, "proj": SEQ},
       family="cnn")  # fmt: skip
def char_cnn():
    seeded(6)
    return CharCNN().eval(), {"encode": encode_strings}


def _layout(spec: str, **kw):
    """``dl.Layout`` where the contract is in, else the spec (the entry is skipped then)."""
    import dni_lab as dl

    make = getattr(dl, "Layout", None)
    return make(spec, **kw) if make is not None else (spec, kw)
