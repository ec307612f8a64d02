"""Environment variables: each one kiln reads is validated, and a bad value is
refused at first use with an error naming it — never at import, never ignored."""
import os
import pickle
import subprocess
import sys

import pytest

import kiln
from kiln import config
from kiln.cli import main
from kiln.errors import ConfigError, KilnError
from kiln.runtime import Predictor

BAD = [("KILN_NUM_THREADS", "abc"), ("KILN_NUM_THREADS", "0"), ("KILN_NUM_THREADS", "100000"),
       ("KILN_NUM_THREADS", "-2"), ("KILN_NUM_THREADS", "2.5"), ("TVM_NUM_THREADS", "many"),
       ("KILN_ENGINE", "bogus"), ("KILN_ENGINE", "0"), ("KILN_ENGINE", "100000"), ("KILN_DISK_CACHE", "maybe"),
       ("KILN_KEEP_MEMORY", "sometimes"), ("KILN_WINOGRAD", "perhaps"),
       ("KILN_CPU", "Zen 3"), ("KILN_CPU", "native;rm")]


@pytest.fixture
def clean_env(monkeypatch):
    for name in config.VARIABLES:
        if name not in ("HOME", "KILN_CACHE_DIR"):
            monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("name,value", BAD)
def test_a_bad_value_names_the_variable_the_value_and_what_is_expected(clean_env, name, value):
    clean_env.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        config.check()
    err = info.value
    assert isinstance(err, KilnError) and err.variable == name and err.arg == name
    assert f"{name}={value!r}" in str(err) and "expected" in str(err)


@pytest.mark.parametrize("inside", [False, True])
def test_a_cache_dir_that_is_a_file_is_refused(clean_env, tmp_path, inside):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    clean_env.setenv("KILN_CACHE_DIR", str(blocker / "sub" if inside else blocker))
    with pytest.raises(ConfigError, match="KILN_CACHE_DIR=.*expected a directory") as info:
        config.check()
    assert (f"{blocker} is a file" in str(info.value)) == inside


def test_the_thread_cap_is_four_times_the_usable_cores(clean_env):
    limit = 4 * config.usable_cores()
    assert config.max_threads() == limit
    clean_env.setenv("KILN_NUM_THREADS", str(limit))
    assert config.num_threads() == limit
    clean_env.setenv("KILN_NUM_THREADS", str(limit + 1))
    with pytest.raises(ConfigError, match=f"from 1 to {limit}"):
        config.num_threads()


def test_valid_values_and_empty_ones(clean_env, tmp_path):
    clean_env.setenv("KILN_NUM_THREADS", " 1 ")
    clean_env.setenv("TVM_NUM_THREADS", "junk")  # KILN_NUM_THREADS wins; TVM_NUM_THREADS is not read
    assert config.num_threads() == 1
    clean_env.setenv("KILN_NUM_THREADS", "")      # empty = unset
    clean_env.setenv("TVM_NUM_THREADS", "2")
    assert config.num_threads() == 2
    clean_env.setenv("KILN_ENGINE", "Serial")
    assert config.engine_workers() == 0
    clean_env.setenv("KILN_ENGINE", "3")
    assert config.engine_workers() == 3
    for value, on in [("OFF", False), ("no", False), ("0", False), ("yes", True), ("", True)]:
        clean_env.setenv("KILN_DISK_CACHE", value)
        assert config.disk_cache_enabled() is on
    clean_env.delenv("KILN_CACHE_DIR")
    clean_env.setenv("XDG_CACHE_HOME", "relative/dir")  # the XDG spec: a relative path is ignored
    assert config.cache_dir() == config.Path.home() / ".cache" / "kiln"
    clean_env.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert config.cache_dir() == tmp_path / "kiln"


def test_configure_thread_pool_leaves_an_invalid_setting_to_first_use(clean_env):
    clean_env.setenv("TVM_NUM_THREADS", "7")
    clean_env.setenv("KILN_NUM_THREADS", "abc")
    assert config.configure_thread_pool() is None and os.environ["TVM_NUM_THREADS"] == "7"
    clean_env.setenv("KILN_NUM_THREADS", "1")
    assert config.configure_thread_pool() == 1 and os.environ["TVM_NUM_THREADS"] == "1"


def test_configure_thread_pool_runs_every_share_on_a_pinned_worker_unless_told(clean_env):
    """TVM pins its workers but not the caller, which can then share a
    worker's core: kiln gives every share to a worker (TVM_EXCLUDE_WORKER0=0)
    unless the variable is set."""
    clean_env.delenv("TVM_EXCLUDE_WORKER0", raising=False)
    config.configure_thread_pool()
    assert os.environ["TVM_EXCLUDE_WORKER0"] == "0"
    clean_env.setenv("TVM_EXCLUDE_WORKER0", "1")
    config.configure_thread_pool()
    assert os.environ["TVM_EXCLUDE_WORKER0"] == "1"


@pytest.mark.parametrize("name,value", [("KILN_ENGINE", "bogus"), ("KILN_NUM_THREADS", "100000")])
def test_the_cli_prints_one_line_and_exits_2(clean_env, capsys, name, value):
    clean_env.setenv(name, value)
    assert main(["ops"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kiln: error: environment variable {name}=") and err.count("\n") == 1


def test_predictor_checks_the_environment_first(clean_env, tmp_path):
    clean_env.setenv("KILN_NUM_THREADS", "0")
    with pytest.raises(ConfigError, match="KILN_NUM_THREADS"):
        Predictor(tmp_path / "model.so")


def test_config_error_survives_pickling():  # errors travel back from worker processes
    err = pickle.loads(pickle.dumps(ConfigError("KILN_ENGINE", "x", "'serial'")))
    assert err.variable == "KILN_ENGINE" and str(err) == "environment variable KILN_ENGINE='x': expected 'serial'"


def test_the_first_build_refuses_a_bad_value(clean_env):
    clean_env.setenv("KILN_NUM_THREADS", "100000")
    with pytest.raises(ConfigError, match="KILN_NUM_THREADS='100000'"):
        kiln.build("exp", [(37, 5)])


def test_import_succeeds_and_the_command_refuses(tmp_path):
    """`import kiln` with a bad value must work (tools import kiln just to look);
    the kiln command then refuses the value in one line."""
    env = {**os.environ, "KILN_NUM_THREADS": "100000"}
    res = subprocess.run([sys.executable, "-m", "kiln", "ops"], capture_output=True, text=True, env=env,
                         timeout=120, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("kiln: error: environment variable KILN_NUM_THREADS")
    assert "Traceback" not in res.stderr


def test_the_allocator_keeps_freed_memory_for_the_next_step():
    # a training step's outputs, freed and allocated again, come from the heap: no fresh pages per step
    # (glibc's defaults gave the zoo CNN about 1,000 page faults per step at batch 64)
    import resource

    import numpy as np

    from kiln.nn.train import build_model

    if not config.keep_freed_memory():
        pytest.skip("not glibc: the allocator is left as it is")
    model = build_model("cnn", (1, 8, 8), 10)
    opt, loss_fn = kiln.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), kiln.nn.SoftmaxLoss()
    x = kiln.Tensor(np.random.default_rng(0).random((64, 1, 8, 8), "float32"))
    y = kiln.Tensor(np.arange(64, dtype="int32") % 10)

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        loss.numpy()

    for _ in range(3):
        step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        step()
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5 < 100
