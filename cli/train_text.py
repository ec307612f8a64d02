"""``kiln train --dataset text``: a character language model (``--model
transformer`` or ``lstm``) on a text file, or without ``--data-file`` on
the help texts of ``pydoc_data.topics`` that every Python ships. Each epoch's
row gives the training and validation loss, their perplexity and the
validation's next-character error; ``--save`` keeps the vocabulary in the
checkpoint's spec, which ``kiln generate`` samples from."""
from __future__ import annotations

import sys

from ..errors import AttrError
from .train_run import export_checked, fit_until_stopped, plot_losses, report

HEADER = (f"{'epoch':>5} | {'train loss':>10} | {'train ppl':>9} | {'val loss':>8} | {'val ppl':>8} | "
          f"{'val err':>7} | {'time':>6}\n" + "-" * 72)
#: the learning rates a language model starts from (the classifiers' would diverge)
LEARNING_RATES = {"adam": 3e-3, "sgd": 0.5}


def row(stats) -> str:
    """One epoch's line of the table under ``HEADER``."""
    from ..nn.language_model import perplexity

    return (f"{stats.epoch:>5} | {stats.train_loss:>10.4f} | {perplexity(stats.train_loss):>9.2f} | "
            f"{stats.test_loss:>8.4f} | {perplexity(stats.test_loss):>8.2f} | {stats.test_error:>7.4f} | "
            f"{stats.seconds:>5.1f}s")


def run(args) -> int:
    from .. import nn
    from ..nn import data, train
    from ..nn.checkpoint import save_checkpoint, sequence_dynamic
    from ..nn.language_model import perplexity
    from ..nn.text import char_datasets, pydoc_corpus, read_text
    from ..nn.zoo import TEXT_MODELS
    from ..runtime import cache

    model_name = "transformer" if args.model is None else args.model
    if model_name not in TEXT_MODELS:
        raise AttrError(f"got --model {model_name} with --dataset text, expected one of {', '.join(TEXT_MODELS)}",
                        arg="--model")
    text = read_text(args.data_file) if args.data_file else pydoc_corpus()
    source = args.data_file or "pydoc_data.topics"
    train_set, val_set, vocab = char_datasets(text, args.seq_len)
    compiled_before, disk_before = cache.stats.compiled, cache.stats.disk_hits
    nn.init.manual_seed(args.seed)
    model = train.build_model(model_name, (args.seq_len,), classes=len(vocab))
    spec = {"model": model_name, "in_shape": [args.seq_len], "classes": len(vocab), "dataset": "text",
            "vocab": vocab.chars, "source": source}
    lr = args.lr if args.lr is not None else LEARNING_RATES[args.optimizer]
    opt = (nn.optim.SGD(model.parameters(), lr=lr, momentum=0.9) if args.optimizer == "sgd"
           else nn.optim.Adam(model.parameters(), lr=lr))
    train_loader = data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True, seed=args.seed)
    val_loader = data.DataLoader(val_set, batch_size=args.batch_size)
    epochs = args.epochs if args.epochs is not None else 2
    print(f"kiln train: {model_name} language model on {source} ({len(text)} characters, {len(vocab)} distinct; "
          f"{len(train_set)} train / {len(val_set)} validation windows of {args.seq_len}), {args.optimizer} "
          f"lr={lr}, batch {args.batch_size}, {epochs} epochs", file=sys.stderr, flush=True)
    print(HEADER, file=sys.stderr if args.json else sys.stdout, flush=True)
    history = fit_until_stopped(args, model, (train_loader, val_loader), opt, epochs, len(vocab), row, spec)
    if history is None:
        return 130
    last = history.epochs[-1]
    result = {"model": model_name, "dataset": "text", "source": source, "vocab_size": len(vocab),
              "epochs": [dict(vars(e), train_perplexity=perplexity(e.train_loss),
                              val_perplexity=perplexity(e.test_loss)) for e in history.epochs],
              "val_perplexity": perplexity(last.test_loss)}
    if args.save:
        result["checkpoint"] = str(save_checkpoint(model, args.save, spec))
    if args.export:
        result["export"] = _export(model, val_set, args.export, sequence_dynamic(spec))
    if args.plot:
        result["plot"] = plot_losses(history, args.plot, "validation loss", "cross-entropy (nats)")
    result["kernels"] = {"compiled": cache.stats.compiled - compiled_before,
                         "from_disk_cache": cache.stats.disk_hits - disk_before}
    def exported(e):
        low, high = e["sequence"]
        length = f"sequences of {high}" if low == high else f"sequences of {low} to {high}"
        return (f"exported {e['path']} ({e['seconds']:.1f}s, {length}); its next-character predictions for {e['windows']} "
                f"validation windows are the model's: {'yes' if e['matches_model'] else 'NO'}")
    return report(args, result, f" (sample from it: kiln generate {result.get('checkpoint')} --prompt 'def ')",
                  exported)


def _export(model, windows, path: str, dynamic: bool) -> dict:
    """Export (any sequence length up to the model's with ``dynamic``), then
    check the module's next-character predictions on a few windows against
    the model's."""
    import numpy as np

    count = min(4, len(windows))
    tokens = np.stack([windows[i][0] for i in range(count)]).astype("int32")
    return {**export_checked(model, tokens[:min(2, count)], tokens, path, dynamic), "windows": count,
            "sequence": [1, model.max_len] if dynamic else [tokens.shape[1]] * 2}
