"""Folds and dataset builds on Dask equal the serial run; scheduler mistakes; the numpyro path.

The distributed runs use small clusters started here (two in-process workers for the folds,
two worker processes for the dataset), so the default tier checks in seconds what a real
cluster does: tasks pickled to workers, seeded by themselves, gathered back in task order.
"""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from specbayes import parallel, validate
from specbayes.cli import main
from specbayes.model.simulate import simulate_sweeps

TINY = {"draws": 20, "tune": 20, "chains": 2}


def _without_timing(folds: pd.DataFrame) -> pd.DataFrame:
    return folds.drop(columns=["wall_s"])


@pytest.fixture(scope="module")
def sweeps() -> pd.DataFrame:
    return simulate_sweeps(seed=3)[0]


def _serial_and_on_a_local_cluster(sweeps: pd.DataFrame, **args):
    """``leave_n_out`` serially and on a two-worker in-process LocalCluster."""
    distributed = pytest.importorskip("distributed")
    serial = validate.leave_n_out(sweeps, **args)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        spread = validate.leave_n_out(sweeps, **args, scheduler=client)
        assert len(client.scheduler_info()["workers"]) == 2
    return serial, spread


def test_two_folds_on_a_local_cluster_equal_the_serial_run(sweeps):
    """The fold machinery on a LocalCluster, in seconds: the curve_fit folds."""
    serial, spread = _serial_and_on_a_local_cluster(sweeps, n=1, repeats=2, methods=("baseline",))
    assert len(serial.folds) == 2
    pd.testing.assert_frame_equal(_without_timing(serial.folds), _without_timing(spread.folds))
    pd.testing.assert_frame_equal(serial.predictions, spread.predictions)


@pytest.mark.slow
def test_two_fitted_folds_on_a_local_cluster_equal_the_serial_run(sweeps):
    """The same with the specbayes fits (four nutpie compiles: minutes, so the slow tier)."""
    serial, spread = _serial_and_on_a_local_cluster(sweeps, n=1, repeats=2, sampler_config=TINY)
    assert len(serial.folds) == 4  # 2 folds x (specbayes, curve_fit)
    assert set(serial.folds.method) == {"specbayes sd", "curve_fit trends"}
    pd.testing.assert_frame_equal(_without_timing(serial.folds), _without_timing(spread.folds))
    pd.testing.assert_frame_equal(serial.predictions, spread.predictions)
    pd.testing.assert_frame_equal(
        serial.overall.drop(columns="wall_s"), spread.overall.drop(columns="wall_s")
    )


def test_baseline_folds_on_the_process_scheduler_equal_serial_at_any_worker_count(sweeps):
    pytest.importorskip("dask")
    args = dict(n=(1, 2), repeats=2, methods=("baseline",))
    serial = validate.leave_n_out(sweeps, **args)
    for workers in (1, 3):
        spread = validate.leave_n_out(sweeps, **args, scheduler="processes", n_jobs=workers)
        pd.testing.assert_frame_equal(_without_timing(serial.folds), _without_timing(spread.folds))
        pd.testing.assert_frame_equal(serial.predictions, spread.predictions)


@pytest.mark.slow  # two builds of the demo set and a LocalCluster's start: ~15 s
def test_demo_dataset_built_on_a_local_cluster_equals_the_serial_build():
    pytest.importorskip("distributed")
    from specbayes.sim import build_dataset

    serial = build_dataset("demo", progress=False, workers=1)
    spread = build_dataset("demo", progress=False, workers=2)  # a LocalCluster by default
    pd.testing.assert_frame_equal(serial, spread)
    assert spread.attrs["source"] == serial.attrs["source"]


def _divide(a: int, *, b: int) -> tuple[int, int]:
    return divmod(a, b)


@pytest.mark.parametrize("scheduler", [None, "processes"])
def test_map_tasks_keeps_task_order_shares_common_arguments_and_reports_progress(scheduler, capsys):
    if scheduler:
        pytest.importorskip("dask")
    tasks = [7, 9, 11, 2, 5]
    out = parallel.map_tasks(
        _divide, tasks, common=dict(b=4), scheduler=scheduler, workers=2, progress=True, desc="toy"
    )
    assert out == [divmod(t, 4) for t in tasks]
    err = capsys.readouterr().err
    assert "toy" in err and "5/5" in err
    with pytest.raises(ZeroDivisionError):  # a task's own error comes back as it is
        parallel.map_tasks(_divide, [1], common=dict(b=0), scheduler=scheduler)


@pytest.mark.parametrize("spec", ["tcp://10.0.0.5:8786", "scheduler:8786", "local", None])
def test_scheduler_names_and_addresses_are_accepted(spec):
    assert parallel.check_scheduler(spec) == spec


@pytest.mark.parametrize("spec", ["lcoal", "tcp://", "10.0.0.5", "http//x:1", ""])
def test_scheduler_mistakes_are_refused(spec):
    with pytest.raises(ValueError, match="not a scheduler"):
        parallel.check_scheduler(spec)


@pytest.fixture
def sweep_csv(tmp_path, sweeps):
    path = tmp_path / "sweeps.csv"
    sweeps.to_csv(path, index=False)
    return path


def _one_error_line(capfd, command: str, *fragments: str) -> None:
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"specbayes {command}: ")
    assert " — " in err[0] and "Traceback" not in err[0]
    for text in fragments:
        assert text in err[0]


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse errors
        return int(exc.code)


@pytest.mark.parametrize("command", ["validate", "simulate"])
def test_cli_refuses_a_malformed_scheduler_in_one_line(command, sweep_csv, tmp_path, capfd):
    out = tmp_path / "out"
    argv = (
        ["validate", str(sweep_csv), "--out", str(out)]
        if command == "validate"
        else ["simulate", "--dataset", "demo", "--out", str(out / "d.parquet")]
    )
    assert _exit_code([*argv, "--scheduler", "lcoal"]) == 2
    _one_error_line(capfd, command, "--scheduler", "'lcoal'", "tcp://")
    assert not out.exists()


def test_cli_unreachable_scheduler_is_one_line_and_writes_nothing(
    sweep_csv, tmp_path, capfd, monkeypatch
):
    pytest.importorskip("distributed")
    monkeypatch.setattr(parallel, "CONNECT_TIMEOUT", "1s")
    out = tmp_path / "val"
    # port 9 (discard) on the loopback: nothing listens there
    argv = ["validate", str(sweep_csv), "--no-baseline", "--out", str(out), "--quiet"]
    assert _exit_code([*argv, "--scheduler", "tcp://127.0.0.1:9"]) == 2
    _one_error_line(capfd, "validate", "tcp://127.0.0.1:9", "no Dask scheduler answered")
    assert not out.exists()


def test_numpyro_without_jax_is_one_clear_error_before_any_work(sweeps, monkeypatch):
    from specbayes.fit import fit

    monkeypatch.setitem(sys.modules, "jax", None)  # import jax raises ImportError
    with pytest.raises(ValueError, match=r"specbayes\[jax\]"):
        fit(sweeps, sampler_config={"sampler": "numpyro"})


def test_jax_gradient_of_the_graph_is_pytensors_at_the_initial_point(sweeps):
    """What NumPyro samples (the model lowered to JAX) is the density nutpie samples (the
    PyTensor graph), and what it differentiates (JAX's autodiff of it) is PyTensor's symbolic
    gradient: finite, and equal to ``compile_dlogp`` at the initial point. The sweep
    cost truncation bounds sit far from their location there — the case where a switch's
    unselected branch (erfcx overflowing, log1p(-1)) once made JAX's gradient NaN."""
    pytest.importorskip("numpyro")
    from jax_gradient import assert_jax_gradient_is_pymcs

    from specbayes.model import build_design, build_model
    from specbayes.model.fitted import prepare_table

    assert parallel.jax_chain_method(2) in ("parallel", "sequential", "vectorized")
    assert_jax_gradient_is_pymcs(build_model(build_design(prepare_table(sweeps, "sd"), "sd")))


def test_truncated_normaliser_is_pymcs_with_finite_jax_gradients():
    """The normal log CDFs of :mod:`specbayes.model.truncated` are PyMC's on both sides
    of every switch and far out, and their JAX gradients are finite there (PyMC's are NaN
    wherever the unselected branch is infinite)."""
    pytest.importorskip("jax")
    import jax
    import numpy as np
    import pytensor
    import pytensor.tensor as pt
    from pymc.distributions import dist_math
    from pymc.sampling.jax import get_jaxified_graph

    from specbayes.model import truncated

    parallel.jax_chain_method(1)  # registers the erfcx lowering
    x, y = pt.dvector("x"), pt.dvector("y")
    zs = np.array([-400.0, -40.0, -9.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 9.0, 40.0, 400.0])
    lo = np.concatenate([zs[:-1], zs[:-1] - 0.25])
    hi = np.concatenate([zs[1:], zs[:-1]])
    for name, args, values in [
        ("normal_lcdf", (0.0, 1.0, x), (zs,)),
        ("normal_lccdf", (0.0, 1.0, x), (zs,)),
        ("log_diff_normal_cdf", (0.0, 1.0, x, y), (hi, lo)),
    ]:
        inputs = [x, y][: len(values)]
        ours = getattr(truncated, name)(*args)
        theirs = getattr(dist_math, name)(*args)
        # the one-bound normalisers compile to the same operations; the two-bound one's
        # rewritten graph may round differently in the last place
        np.testing.assert_allclose(
            pytensor.function(inputs, ours)(*values),
            pytensor.function(inputs, theirs)(*values),
            rtol=0 if len(values) == 1 else 1e-15,
        )
        f = get_jaxified_graph(inputs=inputs, outputs=[pt.sum(ours)])
        grads = jax.grad(lambda *v, f=f: f(*v)[0], argnums=tuple(range(len(values))))(*values)
        assert all(np.isfinite(np.asarray(g)).all() for g in grads), name


def test_interval_transform_is_pymcs_with_finite_jax_gradients_at_an_infinite_bound():
    """:class:`specbayes.model.truncated.Interval` gives PyMC's values and log Jacobian
    where a graph bound is finite or infinite (a closed-loop sweep's wall), and its JAX
    gradient is finite where PyMC's is NaN (the unselected two-bound form at b = inf)."""
    pytest.importorskip("jax")
    import jax
    import numpy as np
    import pytensor
    import pytensor.tensor as pt
    from pymc.distributions.transforms import Interval as PyMCInterval
    from pymc.sampling.jax import get_jaxified_graph

    from specbayes.model.truncated import Interval

    x, a, b = pt.dvector("x"), pt.dvector("a"), pt.dvector("b")
    values = (
        np.array([-3.0, 0.0, 2.0, -3.0, 0.0, 2.0, 0.5]),
        np.array([-2.0, -2.0, -2.0, -2.0, -np.inf, 1.0, -np.inf]),
        np.array([1.0, 1.0, 1.0, np.inf, 4.0, np.inf, np.inf]),
    )

    def bounds(*args):
        return args[0], args[1]

    pymcs = PyMCInterval(bounds_fn=bounds)
    want = pytensor.function([x, a, b], [pymcs.backward(x, a, b), pymcs.log_jac_det(x, a, b)])
    for t, finite in [(Interval(bounds_fn=bounds), True), (pymcs, False)]:
        outs = [t.backward(x, a, b), t.log_jac_det(x, a, b)]
        got = pytensor.function([x, a, b], outs)(*values)
        for g, w in zip(got, want(*values), strict=True):
            np.testing.assert_array_equal(g, w)
        f = get_jaxified_graph(inputs=[x, a, b], outputs=[pt.sum(outs[0]) + pt.sum(outs[1])])
        # in the value and in both bounds (an upper bound is a graph of log c2 in the model)
        grads = jax.grad(lambda *v, f=f: f(*v)[0], argnums=(0, 1, 2))(*values)
        assert all(np.isfinite(np.asarray(g)).all() for g in grads) == finite, (t, grads)


def test_erfcx_lowered_to_jax_matches_scipy_with_finite_gradients():
    pytest.importorskip("jax")
    import numpy as np
    import pytensor
    import pytensor.tensor as pt
    from scipy.special import erfcx

    parallel.jax_chain_method(1)  # registers the lowering
    x = pt.dvector("x")
    f = pytensor.function([x], pt.erfcx(x), mode="JAX")
    grad = pytensor.function([x], pytensor.grad(pt.sum(pt.log(pt.erfcx(x))), x), mode="JAX")
    xs = np.concatenate([-np.logspace(-3, 1.4, 40), [0.0], np.logspace(-3, 2, 40)])
    np.testing.assert_allclose(f(xs), erfcx(xs), rtol=2e-9)
    assert np.isfinite(grad(np.array([-30.0, -1.0, 0.0, 1.0, 50.0]))).all()


@pytest.mark.slow
def test_numpyro_fits_the_demo_healthy_on_cpu():
    """The JAX path on the bundled demo at the default settings: the same health bar as
    nutpie's (0 divergences, R-hat <= 1.01, bulk ESS >= 400; benchmarks/scale.md)."""
    pytest.importorskip("numpyro")
    from specbayes.datasets import load_dataset
    from specbayes.fit import fit

    result = fit(load_dataset("demo"), model="sd", sampler_config={"sampler": "numpyro"})
    summary = result.summary()
    assert summary["sampler_config"]["sampler"] == "numpyro"
    assert summary["healthy"], summary
