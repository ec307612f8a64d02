from helpers import Case

CASES = []
for name in ["sum", "max", "mean", "logsumexp"]:
    CASES += [
        Case(name, [(7, 13)], attrs={"axis": 1}), Case(name, [(7, 13)], attrs={"axis": 0, "keepdims": True}),
        Case(name, [(3, 4, 5)], attrs={"axis": (0, 2)}), Case(name, [(3, 4, 5)], attrs={"axis": -1, "keepdims": True}),
        Case(name, [(6, 5)]), Case(name, [(1, 9)], attrs={"axis": 0}), Case(name, [(4, 1, 3)], "float64", attrs={"axis": (1,)}),
        Case(name, [(5, 6)], "int32", attrs={"axis": 1}, grad=False),
        Case(name, [(33, 70)], attrs={"axis": 1}, grad=False), Case(name, [(70, 33)], attrs={"axis": 0}, grad=False),
        Case(name, [(4, 5)], attrs={"axis": ()}, grad=False),
    ]
