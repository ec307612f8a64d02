"""The LSTM step's fused elementwise kernel and its gradient."""
from helpers import Case

CASES = [
    Case("lstm_cell", [(4, 32), (4, 8)]),
    Case("lstm_cell", [(3, 20), (3, 5)], "float64"),
    Case("lstm_cell", [(2, 12), (2, 3)], ["float32", "float64"], grad=False),
    # a language model's step: batch 32, hidden 256
    Case("lstm_cell", [(32, 1024), (32, 256)], grad=False),
    # state widths of several remainders against 4, 8 and 16 lanes (the sweep cannot vary them: the gates are 4x)
    *(Case("lstm_cell", [(3, 4 * h), (3, h)], grad=False) for h in (1, 3, 10, 100)),
    Case("lstm_cell_grad", [(3, 400), (3, 100), (3, 100), (3, 100)], grad=False),  # odd vector remainders
    Case("lstm_cell_grad", [(4, 32), (4, 8), (4, 8), (4, 8)], grad=False),
    Case("lstm_cell_grad", [(3, 20), (3, 5), (3, 5), (3, 5)], "float64", grad=False),
]
