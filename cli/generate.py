"""``kiln generate``: sample text from a character language model that
``kiln train --dataset text --save`` wrote."""
from __future__ import annotations

import json
import sys

from ..errors import CheckpointError
from .args import _number, positive_int, seed_int

temperature_float = _number(float, "a temperature >= 0", 0.0)


def register(subparsers) -> None:
    parser = subparsers.add_parser("generate", help="sample text from a language model trained by kiln train "
                                   "--dataset text")
    parser.add_argument("checkpoint", metavar="CKPT.npz", help="the checkpoint kiln train --dataset text --save wrote")
    parser.add_argument("--prompt", default="\n", help="the text to continue (default: a new line)")
    parser.add_argument("--tokens", type=positive_int, default=200, metavar="N",
                        help="characters to generate (default 200)")
    parser.add_argument("--temperature", type=temperature_float, default=0.8, metavar="T",
                        help="divides the logits before sampling: lower is more conservative, 0 always takes the "
                             "likeliest character (default 0.8)")
    parser.add_argument("--top-k", type=positive_int, default=None, metavar="K",
                        help="sample among the K likeliest characters only")
    parser.add_argument("--seed", type=seed_int, default=0, metavar="S", help="seeds the sampling (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (prompt, text)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..nn.checkpoint import load_checkpoint, read_checkpoint
    from ..nn.generate import generate
    from ..nn.text import CharVocab

    _, spec = read_checkpoint(args.checkpoint)
    if spec.get("dataset") != "text" or not isinstance(spec.get("vocab"), str):
        raise CheckpointError(f"{args.checkpoint} holds a {spec.get('model', 'model')!r} trained on "
                              f"{spec.get('dataset', 'unknown data')}: kiln generate samples from a language model "
                              "(kiln train --dataset text --save CKPT.npz)")
    model, spec = load_checkpoint(args.checkpoint)
    vocab = CharVocab(spec["vocab"])
    ids = generate(model, vocab.encode(args.prompt, "--prompt"), args.tokens, args.temperature, args.seed,
                   args.top_k)
    text = vocab.decode(ids)
    if args.json:
        print(json.dumps({"prompt": args.prompt, "text": text, "model": spec["model"],
                          "temperature": args.temperature, "seed": args.seed}))
    else:
        sys.stdout.write(args.prompt + text + "\n")
    return 0
