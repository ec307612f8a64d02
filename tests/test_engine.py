"""The dependency engine's guarantees: conflicting pushes run in push order,
readers run concurrently, errors reach the next wait, nothing deadlocks."""
import random
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.runtime.engine import Engine, EngineError


@pytest.fixture
def engine():
    eng = Engine(workers=4)
    yield eng
    eng.shutdown()


ops_strategy = st.lists(st.tuples(st.sets(st.integers(0, 5), max_size=3), st.sets(st.integers(0, 5), max_size=2)),
                        min_size=1, max_size=60)


@settings(max_examples=40, deadline=None)
@given(ops_strategy)
def test_conflicting_pushes_run_in_push_order(ops):
    eng = Engine(workers=4)
    variables = [eng.new_var(f"v{i}") for i in range(6)]
    spans = [None] * len(ops)

    def work(i):
        def run():
            start = time.perf_counter()
            time.sleep(random.random() * 1e-4)
            spans[i] = (start, time.perf_counter())
        return run

    for i, (reads, writes) in enumerate(ops):
        eng.push(work(i), reads=[variables[v] for v in reads], writes=[variables[v] for v in writes])
    eng.wait_for_all()
    eng.shutdown()
    for j, (reads_j, writes_j) in enumerate(ops):
        for i in range(j):
            reads_i, writes_i = ops[i]
            if writes_i & (reads_j | writes_j) or writes_j & reads_i:
                assert spans[i][1] <= spans[j][0], f"op {i} {ops[i]} overlapped later op {j} {ops[j]}"


def test_readers_of_one_var_run_concurrently(engine):
    var = engine.new_var()
    barrier = threading.Barrier(3, timeout=10)  # only passes if all three readers run at once
    for _ in range(3):
        engine.push(barrier.wait, reads=[var])
    engine.wait_for_all()


def test_a_writer_waits_for_earlier_readers_and_later_readers_wait_for_it(engine):
    var, log = engine.new_var(), []
    engine.push(lambda: (time.sleep(0.05), log.append("read 1")), reads=[var])
    engine.push(lambda: log.append("write"), writes=[var])
    engine.push(lambda: log.append("read 2"), reads=[var])
    engine.wait_for_var(var)
    assert log == ["read 1", "write", "read 2"]


def test_ten_thousand_pushes_from_four_threads(engine):
    variables = [engine.new_var() for _ in range(16)]
    counters = [0] * 16  # each written only under its var's write ordering: no lock needed

    def pusher(seed):
        rng = random.Random(seed)
        for _ in range(2500):
            i = rng.randrange(16)
            reads = [variables[j] for j in rng.sample(range(16), 2) if j != i]

            def bump(i=i):
                counters[i] += 1
            engine.push(bump, reads=reads, writes=[variables[i]])

    threads = [threading.Thread(target=pusher, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (engine.wait_for_all(), done.set()))
    waiter.start()
    assert done.wait(120), "the engine deadlocked"
    assert sum(counters) == 10_000


def test_an_error_reaches_the_next_wait_and_skips_dependent_work(engine):
    a, b, c = engine.new_var("a"), engine.new_var("b"), engine.new_var("c")
    ran = []

    def boom():
        raise ValueError("boom")

    engine.push(boom, writes=[a])
    engine.push(lambda: ran.append("uses a"), reads=[a], writes=[b])
    engine.push(lambda: ran.append("independent"), writes=[c])
    with pytest.raises(ValueError, match="boom"):
        engine.wait_for_var(b)  # the error travels along a -> b
    engine.wait_for_var(c)
    assert ran == ["independent"]
    with pytest.raises(ValueError, match="boom"):
        engine.wait_for_all()
    engine.wait_for_all()  # reported once
    engine.push(lambda: ran.append("fresh a"), writes=[a])  # a new value clears the error
    engine.wait_for_var(a)
    assert ran[-1] == "fresh a"


def test_push_async_completes_on_its_callback(engine):
    var, log = engine.new_var(), []

    def start(done):
        threading.Timer(0.05, lambda: (log.append("async"), done())).start()

    engine.push_async(start, writes=[var], on_complete=lambda: log.append("complete"))
    engine.push(lambda: log.append("after"), reads=[var])
    engine.wait_for_var(var)
    assert log == ["async", "complete", "after"]
    engine.push_async(lambda done: done(RuntimeError("late failure")), writes=[var])
    with pytest.raises(RuntimeError, match="late failure"):
        engine.wait_for_var(var)
    with pytest.raises(RuntimeError, match="late failure"):
        engine.wait_for_all()


def test_delete_var_runs_after_earlier_work_and_refuses_later_pushes(engine):
    var, log = engine.new_var("x"), []
    engine.push(lambda: (time.sleep(0.05), log.append("write")), writes=[var])
    engine.delete_var(var, on_delete=lambda: log.append("freed"))
    with pytest.raises(EngineError, match="x was deleted"):
        engine.push(lambda: None, reads=[var])
    engine.wait_for_all()
    assert log == ["write", "freed"]


def test_pushes_from_inside_pushed_work(engine):
    var, log = engine.new_var(), []

    def outer():
        log.append("outer")
        engine.push(lambda: log.append("inner"), writes=[var])

    engine.push(outer, writes=[var])
    time.sleep(0.1)
    engine.wait_for_all()
    assert log == ["outer", "inner"]


def test_serial_engine_runs_inline_in_push_order():
    eng = Engine(workers=0)
    var, log = eng.new_var(), []
    eng.push(lambda: log.append(threading.current_thread().name), writes=[var])
    assert log == [threading.current_thread().name]  # already ran, here


def test_push_new_runs_inline_and_orders_a_concurrent_writer_after_its_read(engine):
    """``push_new`` (an eager op's path: its writes are new vars) runs here at
    once; a writer of a var it reads, pushed by another thread while it runs,
    waits for it; a pending writer of such a var makes it wait in turn."""
    src, out, log = engine.new_var(), engine.new_var(), []
    started, release = threading.Event(), threading.Event()

    def reading():
        log.append(("read", threading.current_thread().name))
        started.set()
        release.wait(5)
        log.append(("read done", None))

    def other_thread():
        started.wait(5)
        engine.push(lambda: log.append(("write", None)), writes=[src])
        time.sleep(0.05)  # the writer would have run by now, were it not ordered after the read
        release.set()

    helper = threading.Thread(target=other_thread)
    helper.start()
    engine.push_new(reading, [src], [out], "read")
    helper.join()
    engine.wait_for_var(src)
    assert log[0] == ("read", threading.current_thread().name)
    assert [e for e, _ in log] == ["read", "read done", "write"]

    gate = threading.Event()
    engine.push(lambda: gate.wait(5), writes=[src])  # pending: push_new must not run now
    later = engine.new_var()
    engine.push_new(lambda: log.append(("after", None)), [src], [later], "after")
    assert log[-1] == ("write", None)
    gate.set()
    engine.wait_for_var(later)
    assert log[-1] == ("after", None)


def test_push_new_error_reaches_its_outputs(engine):
    src, out = engine.new_var(), engine.new_var()

    def failing():
        raise ValueError("boom")

    engine.push_new(failing, [src], [out], "failing")
    with pytest.raises(ValueError, match="boom"):
        engine.wait_for_var(out)
    engine.wait_for_var(src)  # the read left no error behind
    with pytest.raises(ValueError):
        engine.wait_for_all()
