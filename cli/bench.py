"""``kiln bench``: an op's kernel against numpy, or a whole suite against its
references (numpy/OpenBLAS at full speed, PyTorch, ONNX Runtime), measured in
the same run, warmed up, interleaved, with the spread."""
from __future__ import annotations

import shlex

from ..errors import AttrError, KilnError
from .args import add_op_arguments, apply_records_arg, input_dtypes, input_shapes, parse_attrs, positive_int


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench", help="time an op's kernel against numpy, or run a benchmark suite (--suite)",
        description="`kiln bench OP --shape S`: one kernel against its numpy reference. "
                    "`kiln bench --suite cpu|train|inference|models|int8|all`: a suite against its references "
                    "(`--suite models --int8`: the models quantized, against ONNX Runtime's int8 and kiln's float). "
                    "ratio = kiln's speed / the reference's: above 1 kiln is faster.")
    add_op_arguments(parser, required=False)
    parser.add_argument("--repeat", type=positive_int, default=None,
                        help="interleaved timed samples of each side (default 10; 3 with --quick)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--suite", metavar="SUITES",
                        help="run suites instead of one op: cpu, train, inference, models, int8 (comma-separated) or all")
    parser.add_argument("--int8", action="store_true",
                        help="with --suite models: the models quantized (kiln.quantize) against ONNX Runtime's int8 "
                             "models and kiln's float ones (the int8 suite)")
    parser.add_argument("--quick", action="store_true", help="suites: small sizes and 3 samples (a smoke test)")
    parser.add_argument("--markdown", metavar="FILE",
                        help="suites: also write the results as Markdown; {cpu} in FILE becomes the LLVM CPU "
                             "name (benchmarks/results/{cpu}.md)")
    parser.add_argument("--plot", metavar="PNG", help="suites: draw the ratios as a bar chart (needs matplotlib)")
    parser.set_defaults(func=run)


def _output_path(text: str, flag: str) -> str:
    """``text`` with ``{cpu}`` filled in, checked writable before anything is measured."""
    from ..outputs import check_output_path, check_plot_path
    from ..runtime import cpu

    check = check_plot_path if flag == "--plot" else check_output_path
    return str(check(text.replace("{cpu}", cpu().mcpu), flag))


def run(args) -> int:
    apply_records_arg(args)  # kiln.build, in the op and the suites alike, uses these tuned configs too
    if args.suite:
        return _run_suites(args)
    suite_only = [f for f, v in (("--quick", args.quick), ("--markdown", args.markdown), ("--plot", args.plot),
                                 ("--int8", args.int8)) if v]
    if suite_only:
        raise AttrError(f"{', '.join(suite_only)}: for --suite only, not for one op", arg=suite_only[0])
    if not args.op or not args.shape:
        raise KilnError("kiln bench needs an op and its --shape (kiln bench matmul --shape 1024x1024x1024) "
                        "or --suite cpu|train|inference|models|all")
    return _run_op(args)


def _run_op(args) -> int:
    from ..bench.op import compare_op
    from ..bench.report import to_json

    shapes = input_shapes(args.op, args.shape)
    res = compare_op(args.op, shapes, input_dtypes(args.dtype, len(shapes)), parse_attrs(args.op, args.attr),
                     target=args.target, repeat=args.repeat or 10)
    if args.json:
        print(to_json(res))
        return 0
    key = "gflops" if res["unit"] == "GFLOPS" else "gbps"
    blas = ", ".join(f"{b['internal_api']} {b['architecture']}" for b in res["blas"]) or "no BLAS"
    where = f"{res['device']}, numpy on {res['threads']} CPU threads" if res["target"].startswith("cuda") \
        else f"{res['threads']} threads"
    print(f"{res['op']} {res['shapes']} {res['dtypes']} on {res['target']} ({where})")
    for side in ("kiln", "numpy"):
        s = res[side]
        warm = f"warmed up in {s['warmup']['samples']} samples" + ("" if s["warmup"]["stable"] else " (not stable)")
        print(f"  {side:<6} {s[key]:10.1f} {res['unit']:<7} median {s['median_s'] * 1e3:.3f} ms "
              f"(min {s['min_s'] * 1e3:.3f}, max {s['max_s'] * 1e3:.3f}, spread {100 * s['spread']:.0f}%; {warm})")
    print(f"  ratio  {res['ratio']:.2f}x (kiln speed / numpy speed; numpy {res['numpy_version']} on {blas})"
          + ("  [noisy: a spread above 10%]" if res["noisy"] else ""))
    return 0


def _run_suites(args) -> int:
    from ..bench import report, suites

    names = suites.parse_suites(args.suite)
    if args.int8:
        if "models" not in names:
            raise AttrError(f"applies to --suite models, got --suite {args.suite}", arg="--int8")
        names = list(dict.fromkeys("int8" if n == "models" else n for n in names))
    if args.op or args.shape or args.target != "cpu":
        raise AttrError("the suites run on the CPU, without an op, --shape or --target", arg="--suite")
    markdown_path = _output_path(args.markdown, "--markdown") if args.markdown else None
    plot_path = _output_path(args.plot, "--plot") if args.plot else None
    result = suites.run(names, quick=args.quick, repeat=args.repeat)
    text = report.markdown(result, _command(names, args))
    if markdown_path:
        report.write_file(markdown_path, text)
    if plot_path:
        report.plot(result, plot_path)
    print(report.to_json(result) if args.json else text)
    return 0


def _command(names: list[str], args) -> str:
    """The command line that ran the suites, as the report shows it: one a shell can run again."""
    return "kiln bench --suite " + ",".join(names) + (" --quick" if args.quick else "") + \
        (f" --repeat {args.repeat}" if args.repeat else "") + \
        (f" --markdown {shlex.quote(args.markdown)}" if args.markdown else "")
