from helpers import Case

CASES = [
    Case("reshape", [(4, 6)], attrs={"shape": (3, 8)}), Case("reshape", [(4, 6)], attrs={"shape": (-1, 2)}),
    Case("reshape", [(2, 3, 4)], "int32", attrs={"shape": (24,)}, grad=False),
    Case("reshape", [(5,)], attrs={"shape": (1, 5, 1)}),
    Case("broadcast_to", [(3, 1)], attrs={"shape": (2, 3, 4)}), Case("broadcast_to", [(1,)], attrs={"shape": (7,)}),
    Case("broadcast_to", [(4,)], "int32", attrs={"shape": (3, 4)}, grad=False),
]
