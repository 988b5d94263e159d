"""Where the work runs: independent tasks on Dask, and NumPyro's chains on JAX's devices.

:func:`map_tasks` is the one execution engine of the embarrassingly parallel work
(:func:`specbayes.validate.leave_n_out`, :func:`specbayes.sim.build_dataset`). Where a task
runs never changes what it returns: each task carries its own seed (a fold's fit its
sampler seed, a sweep group the dataset seed it derives every point's seed from), so the
results are the serial run's whatever the scheduler and the number of workers, and they
come back in task order.

Schedulers (``scheduler=``; the CLI's ``--scheduler``):

``None`` / ``"serial"``
    One task after another in this process (the default when one worker is asked for).
``"local"``
    A :class:`distributed.LocalCluster` started for the call — ``workers`` processes of one
    thread each (default: every CPU) — and closed after it. The default when more than one
    worker is asked for.
``"processes"``
    Dask's local multiprocessing scheduler (no cluster, no dashboard), ``workers`` processes.
an address (``tcp://host:8786``, ``host:8786``, ``tls://…``)
    A running Dask cluster (``dask scheduler`` plus ``dask worker`` on each machine, or any
    deployment of ``dask-jobqueue``, ``dask-kubernetes``, …); its workers need specbayes
    installed. ``workers`` is then ignored.
a :class:`distributed.Client`
    Used as it is, left open (for callers who manage their own cluster).

Progress: one tqdm bar per call on stderr, advanced as tasks complete (in any order).

:func:`jax_chain_method` chooses how NumPyro runs its chains (``sampler="numpyro"`` of
:func:`specbayes.fit.fit` and of :func:`specbayes.model.sampling.sample`).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = [
    "CONNECT_TIMEOUT",
    "SCHEDULERS",
    "SCHEDULER_HELP",
    "check_scheduler",
    "default_workers",
    "jax_chain_method",
    "map_tasks",
    "scheduler_arg",
]

#: Scheduler names besides an address (module docstring).
SCHEDULERS = ("serial", "local", "processes")
#: How long to try to reach a cluster at an address before giving up.
CONNECT_TIMEOUT = "10s"

_ADDRESS = re.compile(r"^(?:(?:tcp|tls|ucx|inproc|ws|wss)://)?[\w.\-\[\]:]*[\w\]]:\d{1,5}/?$")


def default_workers() -> int:
    """Workers when none are given: the CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_scheduler(spec: Any) -> Any:
    """``spec`` if it names a scheduler (a name, an address, a ``Client`` or ``None``).

    Raises
    ------
    ValueError
        Anything else, naming the accepted forms.
    """
    if spec is None or not isinstance(spec, str):
        return spec
    if spec in SCHEDULERS or (":" in spec and _ADDRESS.match(spec)):
        return spec
    raise ValueError(
        f"--scheduler {spec!r}: not a scheduler — give serial, local, processes or a Dask "
        "scheduler's address such as tcp://10.0.0.5:8786"
    )


def jax_chain_method(chains: int) -> str:
    """Import JAX and NumPyro and choose how NumPyro runs ``chains`` chains.

    On CPU, JAX sees one device unless told otherwise before its import, and NumPyro then
    draws the chains one after another; so, when JAX is not imported yet, it is given one
    host device per chain (``XLA_FLAGS=--xla_force_host_platform_device_count``, unless the
    user set it) and the chains run in parallel (``pmap``), one thread each. On an
    accelerator with fewer devices than chains the chains run as one batch (``vmap``):
    NumPyro's recommendation for a GPU. Otherwise sequentially.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={chains}"
    try:
        import jax
        import numpyro  # noqa: F401
    except ImportError as exc:
        raise ValueError(
            "sampler 'numpyro' needs the optional packages jax and numpyro — install them "
            "with `pip install specbayes[jax]`, or use sampler 'nutpie' or 'pymc'"
        ) from exc
    _register_jax_erfcx()
    from specbayes.model import marginal, rows

    rows.register_jax()
    marginal.register_jax()
    if jax.local_device_count() >= chains:
        return "parallel"
    return "sequential" if jax.default_backend() == "cpu" else "vectorized"


def _register_jax_erfcx() -> None:
    r"""Give PyTensor's JAX backend the scaled complementary error function
    :math:`\operatorname{erfcx}(x) = e^{x^2}\operatorname{erfc}(x)`.

    PyTensor rewrites :math:`\log\operatorname{erfc}` — the normal log CDF of a
    ``TruncatedNormal`` (the next model core's sweep ratios) — into ``erfcx`` for stability,
    and lowers ``erfcx`` to JAX only through TensorFlow Probability. Without it:
    :math:`x < 0` directly, :math:`x \ge 0` as :math:`2\exp(x^2 + \log\Phi(-\sqrt2 x))`
    (relative error below 1e-9 up to :math:`x = 100`, growing as :math:`x^2` ulp beyond), each
    branch on inputs clamped to its side so neither overflows into the other's gradient.
    """
    import importlib.util

    if importlib.util.find_spec("tensorflow_probability") is not None:
        return  # PyTensor's own lowering works
    import jax.numpy as jnp
    from jax.scipy.special import erfc, log_ndtr
    from pytensor.link.jax.dispatch import jax_funcify
    from pytensor.scalar.math import Erfcx

    def erfcx(x):
        neg = jnp.minimum(x, 0.0)
        pos = jnp.maximum(x, 0.0)
        right = 2.0 * jnp.exp(pos * pos + log_ndtr(-jnp.sqrt(2.0) * pos))
        return jnp.where(x < 0, jnp.exp(neg * neg) * erfc(neg), right)

    jax_funcify.register(Erfcx)(lambda op, **kwargs: erfcx)


def scheduler_arg(text: str) -> str:
    """``argparse`` type of ``--scheduler``: a name or an address (:func:`check_scheduler`)."""
    import argparse

    try:
        return check_scheduler(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a scheduler: {text!r} (give serial, local, processes or a Dask scheduler's "
            "address such as tcp://10.0.0.5:8786)"
        ) from None


#: ``--help`` text of ``--scheduler`` (``validate``, ``simulate``).
SCHEDULER_HELP = (
    "where the tasks run: serial; local (a Dask LocalCluster of --jobs/--workers processes, "
    "the default when more than one is asked for); processes (dask's multiprocessing "
    "scheduler); or a running Dask cluster's address, e.g. tcp://10.0.0.5:8786"
)


def _resolve(scheduler: Any, workers: int | None) -> Any:
    """The scheduler to use: ``"serial"``, a name, an address or a ``Client``."""
    scheduler = check_scheduler(scheduler)
    if scheduler is None:
        return "local" if workers is not None and workers > 1 else "serial"
    return scheduler


def map_tasks(
    fn: Callable[..., Any],
    tasks: Sequence[Any],
    *,
    common: dict[str, Any] | None = None,
    scheduler: Any = None,
    workers: int | None = None,
    progress: bool = False,
    desc: str = "tasks",
    unit: str = "task",
    label: Callable[[Any], str] | None = None,
) -> list[Any]:
    """``[fn(task, **common) for task in tasks]``, run on ``scheduler``.

    Parameters
    ----------
    fn : callable
        A module-level function (it is pickled to the workers).
    tasks : sequence
        One argument per task.
    common : dict, optional
        Keyword arguments shared by every task (a large frame, say): sent to a cluster's
        workers once, not once per task.
    scheduler : None, str or distributed.Client
        Where to run (module docstring). ``None``: ``"local"`` when ``workers > 1``, else
        serial.
    workers : int, optional
        Workers of a ``"local"`` or ``"processes"`` scheduler (default: every CPU).
    progress : bool
        A tqdm bar on stderr, advanced as each task completes.
    desc, unit : str
        The bar's description and unit.
    label : callable, optional
        ``label(task)`` shown beside the bar for the last task finished.

    Returns
    -------
    list
        The results, in the order of ``tasks``.

    Raises
    ------
    ValueError
        An unknown scheduler, or no cluster reachable at an address. A task's own error is
        raised as it is.
    """
    from tqdm.auto import tqdm

    tasks = list(tasks)
    common = dict(common or {})
    scheduler = _resolve(scheduler, workers)
    bar = tqdm(
        total=len(tasks), desc=desc, unit=unit, file=sys.stderr, disable=not (progress and tasks)
    )
    results: list[Any] = [None] * len(tasks)

    def done(i: int, value: Any) -> None:
        results[i] = value
        if label is not None:
            bar.set_postfix_str(label(tasks[i]))
        bar.update()

    try:
        if not tasks:
            pass
        elif scheduler == "serial":
            for i, task in enumerate(tasks):
                done(i, fn(task, **common))
        elif scheduler == "processes":
            _run_processes(fn, tasks, common, workers or default_workers(), done)
        else:
            with _client(scheduler, workers) as client:
                _run_distributed(client, fn, tasks, common, done)
    finally:
        bar.close()
    return results


@contextmanager
def _client(scheduler: Any, workers: int | None) -> Iterator[Any]:
    """A ``distributed.Client`` for ``scheduler``: a new ``LocalCluster`` (closed after), a
    connection to an address (closed after), or the given client (left open)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:  # a trimmed install
        raise ValueError(
            f"scheduler {scheduler!r} needs dask's distributed package — "
            "pip install 'dask[distributed]', or run serially"
        ) from exc
    if isinstance(scheduler, Client):
        yield scheduler
        return
    if scheduler == "local":
        import logging

        # one thread per worker: a task (a fit) brings its own threads, and the simulator's
        # pure-Python loop would only contend for the GIL
        import dask

        # non-daemonic workers: a task may start processes of its own (PyMC's sampler does)
        with dask.config.set({"distributed.worker.daemon": False}):
            cluster = LocalCluster(
                n_workers=workers or default_workers(),
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",  # a free port (no dashboard without bokeh anyway)
                silence_logs=logging.ERROR,
            )
        try:
            with Client(cluster) as client:
                yield client
        finally:
            cluster.close()
        return
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError) as exc:
        raise ValueError(
            f"--scheduler {scheduler}: no Dask scheduler answered there within "
            f"{CONNECT_TIMEOUT} ({type(exc).__name__}) — start one (`dask scheduler`, then "
            "`dask worker ADDRESS` on each machine), or use local or processes"
        ) from None
    with client:
        yield client


def _run_distributed(client, fn, tasks, common, done) -> None:
    import numpy as np
    import pandas as pd
    from distributed import as_completed

    # the data go to every worker once; small arguments travel with each task (scatter
    # takes a tuple or list as many objects, and an empty one fails)
    shared = {
        k: client.scatter(v, broadcast=True) if isinstance(v, pd.DataFrame | np.ndarray) else v
        for k, v in common.items()
    }
    # pure=False: tasks whose arguments tokenize alike are still distinct tasks
    futures = [client.submit(fn, task, pure=False, **shared) for task in tasks]
    index = {f.key: i for i, f in enumerate(futures)}
    try:
        for future in as_completed(futures):
            done(index[future.key], future.result())
    finally:
        client.cancel(futures)


def _run_processes(fn, tasks, common, workers, done) -> None:
    import dask
    from dask.callbacks import Callback

    shared = {k: dask.delayed(v) for k, v in common.items()}
    lazy = [dask.delayed(fn, pure=False)(task, **shared) for task in tasks]
    index = {d.key: i for i, d in enumerate(lazy)}

    class _Progress(Callback):  # dask calls posttask in this process as each task ends
        def _posttask(self, key, result, dsk, state, worker_id):
            if key in index:
                done(index[key], result)

    with _Progress():
        dask.compute(*lazy, scheduler="processes", num_workers=workers)
