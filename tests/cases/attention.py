"""Scaled dot-product attention: layouts, masks, causal, sizes the CPU template tiles and the fallback takes."""
from helpers import Case

CASES = [
    Case("attention", [(2, 3, 8, 16), (2, 3, 8, 16), (2, 3, 8, 16)]),
    # BERT's padding mask (B, 1, 1, Sk), keys longer than queries, v narrower than q
    Case("attention", [(2, 2, 6, 8), (2, 2, 10, 8), (2, 2, 10, 4), (2, 1, 1, 10)]),
    # the projections' layout (B, S, H, D), a (S, Sk) mask and a scale of its own
    Case("attention", [(1, 12, 2, 8), (1, 12, 2, 8), (1, 12, 2, 8), (12, 12)], attrs={"layout": "bshd", "scale": 0.5}),
    Case("attention", [(2, 5, 3, 4), (2, 7, 3, 4), (2, 7, 3, 6)], "float64", attrs={"layout": "bshd", "causal": True}),
    Case("attention", [(1, 2, 9, 5), (1, 2, 9, 5), (1, 2, 9, 5), (1, 2, 9, 9)], "float64", attrs={"causal": True}),
    # one query and one key: the template's unit loops, which the fallback takes
    Case("attention", [(1, 2, 1, 16), (1, 2, 1, 16), (1, 2, 1, 16)], grad=False),
    # a head of a transformer's width: the register tiles and the partial max and sum
    Case("attention", [(1, 2, 64, 64), (1, 2, 64, 64), (1, 2, 64, 64), (1, 1, 1, 64)], grad=False),
]
