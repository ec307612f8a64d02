"""Dispatch: the first template for (op, target) that accepts the workload
schedules it, a declining template leaves the schedule to the next one, and
the name recorded is that of the template that ran."""
import pytest
import tvm
from tvm import te

import kiln
from kiln.errors import BuildError, ScheduleError
from kiln.runtime.lower import declare
from kiln.schedules import NOT_APPLICABLE, Config, apply, dispatch
from kiln.schedules.cuda.reduction import schedule_auto_cuda
from kiln.schedules.generic import schedule_auto
from kiln.te import get_op, sym

CPU, CUDA = kiln.cpu(), kiln.cuda("sm_80")


def _prepared(name, shapes, attrs=None, target=CPU):
    """(op, schedule, output block, fresh config) of one float32 workload, unscheduled."""
    workload = get_op(name).check(shapes, "float32", attrs)
    inputs, outs = declare(workload)
    sch = tvm.s_tir.Schedule(te.create_prim_func([*inputs, *outs]))
    return workload.op, sch, sch.get_sblock(outs[0].op.name), Config(target, workload=workload)


DECLINED = [  # workloads a specific template declines, and the fallback that takes them
    ("conv2d", [(1, 3, 8, 8), (sym("c"), 3, 3, 3)], {"padding": 1}, CPU, schedule_auto),
    ("conv2d", [(1, 3, 8, sym("w")), (4, 3, 3, 3)], {"padding": 1}, CPU, schedule_auto),
    ("softmax", [(4, 6, 5)], {"axis": 1}, CPU, schedule_auto),
    ("conv2d", [(1, 8, 8, 3), (4, 3, 3, 3)], {"layout": "NHWC"}, CUDA, schedule_auto_cuda),
    ("log_softmax", [(4, 6, 5)], {"axis": 0}, CUDA, schedule_auto_cuda),
]


def _id(value) -> str:
    """A parameter's test id: a function by its name (its repr holds an address, which differs between runs)."""
    return getattr(value, "__name__", None) or str(value)[:40]


@pytest.mark.parametrize("name, shapes, attrs, target, fallback", DECLINED, ids=_id)
def test_a_declined_workload_gets_exactly_the_fallback_schedule(name, shapes, attrs, target, fallback):
    op, sch, block, cfg = _prepared(name, shapes, attrs, target)
    assert apply(op, target.kind, sch, block, cfg) == dispatch.template_name(fallback)
    _, ref, ref_block, ref_cfg = _prepared(name, shapes, attrs, target)
    fallback(ref, ref_block, ref_cfg)
    tvm.ir.assert_structural_equal(sch.mod, ref.mod)
    assert cfg.resolved() == ref_cfg.resolved()


@pytest.mark.parametrize("name, shapes, attrs, target, expected", [
    ("conv2d", [(sym("n"), sym("c"), 8, 8), (4, sym("c"), 3, 3)], {"padding": 1}, CPU, "conv2d.schedule_conv2d"),
    ("softmax", [(4, 6, 5)], {}, CPU, "softmax.schedule_softmax"),
    ("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3)], {}, CUDA, "conv2d.schedule_conv2d_cuda"),
    ("matmul", [(8, 16), (16, 4)], {}, CUDA, "matmul.schedule_matmul_cuda"),
], ids=lambda v: str(v)[:40])
def test_a_suited_workload_keeps_its_specific_template(name, shapes, attrs, target, expected):
    op, sch, block, cfg = _prepared(name, shapes, attrs, target)
    assert apply(op, target.kind, sch, block, cfg) == expected
    assert cfg.space  # the specific template declared its knobs


def test_a_declining_template_passes_to_the_next(monkeypatch):
    ran = []

    def decline(sch, block, cfg):
        ran.append("decline")
        return NOT_APPLICABLE

    def accept(sch, block, cfg):
        ran.append("accept")
        cfg.define_knob("k", (0, 1))

    monkeypatch.setitem(dispatch._BY_OP, ("add", "cpu"), decline)
    monkeypatch.setitem(dispatch._BY_FAMILY, ("injective", "cpu"), accept)
    op, sch, block, cfg = _prepared("add", [(4, 5), (4, 5)])
    assert apply(op, "cpu", sch, block, cfg) == "test_dispatch.accept"
    assert ran == ["decline", "accept"] and list(cfg.space) == ["k"]
    monkeypatch.setitem(dispatch._BY_FAMILY, ("injective", "cpu"), decline)
    op, sch, block, cfg = _prepared("add", [(4, 5), (4, 5)])
    assert apply(op, "cpu", sch, block, cfg) == "generic.schedule_auto"


def test_the_kernel_records_the_template_that_ran():
    conv = kiln.build("conv2d", [(1, 3, 8, 8), (sym("c"), 3, 3, 3)], attrs={"padding": 1})
    assert conv.template == "generic.schedule_auto"
    assert kiln.build("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3)], attrs={"padding": 1}).template == \
        "conv2d.schedule_conv2d"


def test_the_fallback_never_declines(monkeypatch):
    monkeypatch.setitem(dispatch._FALLBACK, "cpu", lambda sch, block, cfg: NOT_APPLICABLE)
    op, sch, block, cfg = _prepared("add", [(4, 5), (4, 5)])
    with pytest.raises(ScheduleError, match="fallback template .* declined"):
        apply(op, "cpu", sch, block, cfg)


def _knob_then_decline(sch, block, cfg):
    cfg.define_knob("tile", (4, 8))
    return NOT_APPLICABLE


def _split_then_decline(sch, block, cfg):
    sch.split(sch.get_loops(block)[0], [None, 2])
    return NOT_APPLICABLE


@pytest.mark.parametrize("late", [_knob_then_decline, _split_then_decline], ids=lambda f: f.__name__)
def test_declining_after_a_knob_or_a_schedule_change_is_an_error(monkeypatch, late):
    monkeypatch.setitem(dispatch._BY_OP, ("add", "cpu"), late)
    op, sch, block, cfg = _prepared("add", [(4, 5), (4, 5)])
    with pytest.raises(ScheduleError, match=f"op 'add', argument 'template': template test_dispatch.{late.__name__} "
                                            "declined the workload after declaring knobs or changing the schedule"):
        apply(op, "cpu", sch, block, cfg)


def test_a_tvm_error_in_a_template_names_it(monkeypatch):
    def broken(sch, block, cfg):
        sch.get_sblock("no_such_block")

    monkeypatch.setitem(dispatch._BY_OP, ("add", "cpu"), broken)
    op, sch, block, cfg = _prepared("add", [(4, 5), (4, 5)])
    with pytest.raises(BuildError, match="op 'add', argument 'config': template test_dispatch.broken failed"):
        apply(op, "cpu", sch, block, cfg)
