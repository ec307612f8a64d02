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
CASES += [  # inference with a pre-packed weight: panels of bn columns, the last one padded past N
    Case("pack_dense_weight", [(5, 20)], attrs={"bn": 16}),
    Case("pack_dense_weight", [(3, 32)], "float64", attrs={"bn": 8}),
    Case("dense_packed", [(4, 5), (2, 5, 16), (20,)]), Case("dense_packed", [(1, 6), (1, 6, 8), (8,)], "float64"),
    Case("dense_packed", [(33, 70), (1, 70, 32), (20,)], attrs={"relu": True}),
    Case("dense_packed", [(7, 64), (4, 64, 32), (128,)], attrs={"relu": True}),
]
