"""Test error of trained models after ``kiln.quantize``: the zoo's CNN and
ResNet (residual blocks with BatchNorm) trained on scikit-learn's 8x8 digits,
each quantized for a CPU with AVX-512 VNNI (8-bit weights) and for an AVX2 one
(7-bit weights, ``vpmaddubsw``'s range), per observer, each variant exported
and run on the 359 test images (the AVX2 code runs on any x86 host with AVX2).

Run: ``python benchmarks/int8_accuracy.py [--epochs 15] [--models cnn resnet]``.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

import kiln
from kiln.nn import data
from kiln.nn.train import fit
from kiln.nn.zoo import build_model
from kiln.runtime import Predictor

#: what each variant is quantized for: (label, target CPU)
TARGETS = (("VNNI, 8-bit weights", "znver4"), ("AVX2, 7-bit weights", "znver3"))
OBSERVERS = ("minmax", "percentile")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--models", nargs="+", default=["cnn", "resnet"])
    args = parser.parse_args()
    train_set, test_set = data.digits("train", flatten=False), data.digits("test", flatten=False)
    train_x, _ = train_set.arrays
    test_x, test_y = test_set.arrays
    calibration = [train_x[i:i + 64] for i in range(0, 256, 64)]
    print("| model | float | " + " | ".join(f"{o}, {t}" for t, _ in TARGETS for o in OBSERVERS) + " |")
    print("|---" * (2 + len(TARGETS) * len(OBSERVERS)) + "|")
    with tempfile.TemporaryDirectory(prefix="kiln-int8-accuracy-") as folder:
        for name in args.models:
            kiln.nn.init.manual_seed(0)
            model = build_model(name, (1, 8, 8), 10)
            fit(model, data.DataLoader(train_set, batch_size=64, shuffle=True, seed=0),
                data.DataLoader(test_set, batch_size=256), kiln.optim.Adam(model.parameters(), lr=0.01),
                args.epochs)
            model.eval()

            def error(net, label: str) -> str:
                module = Predictor(kiln.export(net, test_x[:1], os.path.join(folder, f"{name}_{label}.so")))
                return f"{100 * np.mean(module(test_x).argmax(axis=1) != test_y):.2f}%"

            cells = [error(model, "float")]
            for label, mcpu in TARGETS:
                for observer in OBSERVERS:
                    variant = kiln.quantize(model, calibration, observer=observer, target=kiln.cpu(mcpu))
                    cells.append(error(variant, f"{mcpu}_{observer}"))
            print(f"| {name} ({args.epochs} epochs) | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
