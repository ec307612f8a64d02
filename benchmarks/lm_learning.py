"""Learning curves of a character language model, kiln against PyTorch.

The same ``TransformerLM`` (or ``LSTMLM``) is trained by kiln (compiled
steps) and by a PyTorch twin holding the same initial weights
(``kiln.bench.lm_twins``), on the same batches in the same order
(``pydoc_data.topics``'s text, windows of ``--seq-len``), with Adam at the
same learning rate and no dropout. Every ``--every`` steps both models'
validation loss is measured on the same validation windows. Prints the
table, the final validation perplexities and their ratio, and with
``--plot`` draws both curves.

    python benchmarks/lm_learning.py --model transformer --steps 600 --plot docs/_static/lm_learning.png
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def _val_loss(evaluate, val_x, val_y, batch: int) -> float:
    total = 0.0
    for i in range(0, len(val_x), batch):
        total += evaluate(val_x[i:i + batch], val_y[i:i + batch]) * len(val_x[i:i + batch])
    return total / len(val_x)


def main() -> None:
    import torch

    import kiln
    from kiln import nn
    from kiln.bench.lm_twins import lstm_twin, transformer_twin
    from kiln.nn.language_model import LSTMLM, TransformerLM, perplexity
    from kiln.nn.text import char_datasets, pydoc_corpus

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("transformer", "lstm"), default="transformer")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--val-windows", type=int, default=256)
    parser.add_argument("--plot", metavar="PNG")
    args = parser.parse_args()
    torch.set_num_threads(2)

    train_set, val_set, vocab = char_datasets(pydoc_corpus(), args.seq_len)
    x_all, y_all = train_set.arrays
    val_x, val_y = (a[:args.val_windows] for a in val_set.arrays)
    kiln.manual_seed(0)
    model = (TransformerLM(len(vocab), max_len=args.seq_len, dropout=0.0) if args.model == "transformer"
             else LSTMLM(len(vocab), dropout=0.0))
    twin = (transformer_twin if args.model == "transformer" else lstm_twin)(torch, model)
    opt = nn.optim.Adam(model.parameters(), lr=args.lr)
    ref_opt = torch.optim.Adam(twin.parameters(), lr=args.lr)
    loss_fn = nn.SoftmaxLoss()
    step = kiln.compile(lambda a, b: loss_fn(model(a), b), opt)
    evaluate = kiln.compile(lambda a, b: loss_fn(model(a), b))

    def ref_eval(a, b):
        with torch.no_grad():
            return torch.nn.functional.cross_entropy(twin(torch.from_numpy(a)), torch.from_numpy(b.reshape(-1).astype(
                "int64"))).item()

    order = np.random.default_rng(0).permutation(len(x_all))
    rows, seconds = [], {"kiln": 0.0, "PyTorch": 0.0}
    for s in range(args.steps + 1):
        if s % args.every == 0:
            model.eval()
            twin.eval()
            rows.append((s, _val_loss(lambda a, b: float(evaluate(a, b).numpy()), val_x, val_y, args.batch),
                         _val_loss(ref_eval, val_x, val_y, args.batch)))
            model.train()
            twin.train()
            print(f"step {s:5d}  val loss kiln {rows[-1][1]:.4f}  PyTorch {rows[-1][2]:.4f}", flush=True)
        if s == args.steps:
            break
        idx = order[(s * args.batch) % len(order):][:args.batch]
        if len(idx) < args.batch:
            idx = order[:args.batch]
        x, y = x_all[idx], y_all[idx]
        start = time.perf_counter()
        float(step(x, y).numpy())
        if s == 0:  # the first call records and compiles the step
            seconds["kiln compile"] = time.perf_counter() - start
        else:
            seconds["kiln"] += time.perf_counter() - start
        start = time.perf_counter()
        ref_opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(twin(torch.from_numpy(x)), torch.from_numpy(y.reshape(-1).astype(
            "int64")))
        loss.backward()
        ref_opt.step()
        loss.item()
        seconds["PyTorch"] += (time.perf_counter() - start) if s else 0.0
    ppl = perplexity(rows[-1][1]), perplexity(rows[-1][2])
    print(f"\n{args.model}: after {args.steps} steps of batch {args.batch}, validation perplexity kiln {ppl[0]:.3f}, "
          f"PyTorch {ppl[1]:.3f} (kiln / PyTorch {ppl[0] / ppl[1]:.4f}); steps 2.. took kiln {seconds['kiln']:.1f} s, "
          f"PyTorch {seconds['PyTorch']:.1f} s (kiln's first step, which compiles it: {seconds['kiln compile']:.1f} s)")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        steps = [r[0] for r in rows]
        ax.plot(steps, [perplexity(r[1]) for r in rows], label="kiln", linewidth=2)
        ax.plot(steps, [perplexity(r[2]) for r in rows], label="PyTorch", linestyle="--")
        ax.set_xlabel("training step (batch %d, seq %d)" % (args.batch, args.seq_len))
        ax.set_ylabel("validation perplexity")
        ax.set_yscale("log")
        ax.set_title(f"{args.model} character LM on pydoc_data.topics")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
