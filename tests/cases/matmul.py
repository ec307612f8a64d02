from helpers import Case

CASES = [
    Case("matmul", [(5, 7), (7, 3)]), Case("matmul", [(1, 4), (4, 1)]), Case("matmul", [(2, 3, 4), (4, 5)]),
    Case("matmul", [(3, 4), (2, 4, 5)]), Case("matmul", [(2, 1, 3, 4), (3, 4, 2)]), Case("matmul", [(4,), (4, 3)]),
    Case("matmul", [(3, 4), (4,)]), Case("matmul", [(5,), (5,)]), Case("matmul", [(3, 4), (4, 6)], "float64"),
    Case("matmul", [(6, 5), (5, 7)], "int32", grad=False), Case("matmul", [(4, 3), (3, 2)], ["float32", "float64"]),
    Case("matmul", [(129, 67), (67, 33)], grad=False), Case("matmul", [(64, 100), (100, 10)], grad=False),
    Case("dense", [(4, 5), (5, 3), (3,)]), Case("dense", [(4, 5), (5, 3), (3,)], attrs={"relu": True}),
    Case("dense", [(1, 6), (6, 2), (2,)], "float64"),
    Case("dense", [(33, 70), (70, 20), (20,)], attrs={"relu": True}, grad=False),
]
CASES += [
    Case("matmul", [(7, 5), (7, 3)], attrs={"transpose_a": True}), Case("matmul", [(5, 7), (3, 7)], attrs={"transpose_b": True}),
    Case("matmul", [(2, 7, 5), (3, 7)], attrs={"transpose_a": True, "transpose_b": True}),
    Case("matmul", [(130, 67), (33, 130)], attrs={"transpose_a": True, "transpose_b": True}, grad=False),
    Case("matmul", [(64, 100), (10, 100)], attrs={"transpose_b": True}, grad=False),
]
