"""More than one process: start JAX's distributed runtime so that training and evaluation span machines.

:func:`initialize` calls :func:`jax.distributed.initialize` with the coordinator's address, the
number of processes and this process's id, taken from its arguments or, where an argument is
None, from the environment variables ``DIFFMJX_COORDINATOR`` (``host:port`` of process 0),
``DIFFMJX_NUM_PROCESSES`` and ``DIFFMJX_PROCESS_ID``. With none of them set (or one process) it
does nothing, so a script that calls it runs unchanged on one machine. ``detect=True`` leaves what
is unset to JAX's own cluster detection (SLURM, Open MPI, mpi4py, Cloud TPU). On CPU, processes
exchange their collectives through gloo (``jax_cpu_collectives_implementation``, set when unset).

Once initialised, ``jax.devices()`` lists every process's devices: :func:`diffmjx.sysid.identify`'s
Adam (:func:`diffmjx.sysid.train.adam_loop`) shards each minibatch over all of them, each process
placing only its own rows (its start, end and held-out losses run on each process's first device). :func:`process_settings` checks settings without starting anything.
"""

import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = [
    "ENV_COORDINATOR",
    "ENV_NUM_PROCESSES",
    "ENV_PROCESS_ID",
    "Processes",
    "batch_sharding",
    "initialize",
    "process_settings",
    "replicate",
    "sharded_rows",
]

ENV_COORDINATOR = "DIFFMJX_COORDINATOR"
"""Environment variable: ``host:port`` of process 0, where the coordinator listens (all processes the same)."""
ENV_NUM_PROCESSES = "DIFFMJX_NUM_PROCESSES"
"""Environment variable: the number of processes (all processes the same)."""
ENV_PROCESS_ID = "DIFFMJX_PROCESS_ID"
"""Environment variable: this process's id, 0 to ``DIFFMJX_NUM_PROCESSES - 1`` (0 runs the coordinator)."""


class Processes(NamedTuple):
    """Where this process stands: what :func:`process_settings` resolved or :func:`initialize` started."""

    process_id: int
    num_processes: int
    coordinator_address: str | None  # None: a single process, nothing to coordinate


def _integer(name: str, env: str, value: object, lowest: int) -> int | None:
    """An integer >= ``lowest`` from an int or its decimal text; None or empty text: unset."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number: int | None = int(value)
    else:
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
    if number is None or number < lowest:
        raise ValueError(f"{name} ({env})={value!r} is invalid; expected an integer >= {lowest}")
    return number


def _address(value: object) -> str | None:
    """``host:port`` with a port in 1..65535; None or empty text: unset."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    host, sep, port = value.strip().rpartition(":") if isinstance(value, str) else ("", "", "")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(
            f"coordinator_address ({ENV_COORDINATOR})={value!r} is invalid; expected HOST:PORT with a port in "
            "1..65535, the address of process 0 (e.g. node001:12355)"
        )
    return value.strip()  # type: ignore[union-attr]


def _resolve(coordinator_address, num_processes, process_id, environ) -> tuple[str | None, int | None, int | None]:
    """Each setting from its argument or else its variable, checked on its own and the id against the count."""
    env = os.environ if environ is None else environ
    address = _address(env.get(ENV_COORDINATOR) if coordinator_address is None else coordinator_address)
    count = _integer(
        "num_processes", ENV_NUM_PROCESSES, env.get(ENV_NUM_PROCESSES) if num_processes is None else num_processes, 1
    )
    pid = _integer("process_id", ENV_PROCESS_ID, env.get(ENV_PROCESS_ID) if process_id is None else process_id, 0)
    if count is not None and pid is not None and pid >= count:
        raise ValueError(
            f"process_id ({ENV_PROCESS_ID})={pid} is not allowed with num_processes={count}; "
            f"expected one of 0..{count - 1}"
        )
    return address, count, pid


def process_settings(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> Processes:
    """Resolve and check the settings of a run without starting anything.

    Each argument that is None is read from its environment variable (:data:`ENV_COORDINATOR`,
    :data:`ENV_NUM_PROCESSES`, :data:`ENV_PROCESS_ID`; empty counts as unset).

    Arguments:
        coordinator_address: ``host:port`` of process 0, reachable from every process.
        num_processes: how many processes take part (1 or unset: a single process).
        process_id: this process's id in ``0 .. num_processes - 1``.
        environ: where to read the variables; default ``os.environ``.

    Returns:
        :class:`Processes`; a single process is ``Processes(0, 1, None)``.

    Raises:
        ValueError: a value that is not an integer or an address, an id outside
            ``0 .. num_processes - 1``, or settings that contradict each other (an id or a coordinator
            without a number of processes, more than one process without a coordinator or an id),
            naming the argument and its variable.
    """
    address, count, pid = _resolve(coordinator_address, num_processes, process_id, environ)
    if count is None:
        if pid not in (None, 0) or address is not None:
            given = f"process_id={pid}" if pid not in (None, 0) else f"coordinator_address={address!r}"
            raise ValueError(
                f"{given} is set but num_processes ({ENV_NUM_PROCESSES}) is not; set all three of "
                f"{ENV_COORDINATOR}, {ENV_NUM_PROCESSES} and {ENV_PROCESS_ID} (or the arguments), or none"
            )
        return Processes(0, 1, None)
    if count == 1:
        return Processes(0, 1, None)
    missing = [
        f"{arg} ({var})"
        for arg, var, v in (("coordinator_address", ENV_COORDINATOR, address), ("process_id", ENV_PROCESS_ID, pid))
        if v is None
    ]
    if missing:
        raise ValueError(f"num_processes={count} needs {' and '.join(missing)} as well; every process sets all three")
    return Processes(pid, count, address)  # type: ignore[arg-type]


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    detect: bool = False,
) -> Processes:
    """Start JAX's distributed runtime for this process (see the module docstring).

    Call it first, before any JAX computation, in every process, with the same coordinator and
    number of processes. Each argument that is None is read from its environment variable
    (:func:`process_settings`).

    Arguments:
        coordinator_address: ``host:port`` of process 0 (which runs the coordinator there).
        num_processes: how many processes take part; None or 1 with ``detect`` off: nothing to do.
        process_id: this process's id in ``0 .. num_processes - 1``.
        detect: leave whatever is still unset to JAX's cluster detection (SLURM, Open MPI,
            mpi4py, Cloud TPU) instead of running as a single process.

    Returns:
        :class:`Processes`: this process's id, the number of processes and the coordinator
        (``Processes(0, 1, None)`` when nothing was started).

    Raises:
        ValueError: bad or contradictory settings (:func:`process_settings`).
        RuntimeError: JAX has already computed something in this process (its backends are fixed
            then), or its distributed runtime was started already with other settings.
    """
    want: Processes | None = None
    if detect:  # what is given is checked; JAX's cluster detection fills in the rest
        address, count, pid = _resolve(coordinator_address, num_processes, process_id, None)
    else:
        want = process_settings(coordinator_address, num_processes, process_id)
        if want.num_processes == 1 and not jax.distributed.is_initialized():
            return want
        address, count, pid = want.coordinator_address, want.num_processes, want.process_id
    if jax.distributed.is_initialized():  # started before: fine if as asked (or nothing was asked)
        now = Processes(jax.process_index(), jax.process_count(), address)
        if want is not None and want.num_processes > 1 and now[:2] != want[:2]:
            raise RuntimeError(
                f"JAX's distributed runtime already runs as process {now.process_id} of {now.num_processes}; "
                f"asked for process {want.process_id} of {want.num_processes}"
            )
        return now
    if jax.config.jax_cpu_collectives_implementation is None:  # CPU devices talk across processes through gloo
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # raises RuntimeError if this process has computed anything with JAX already
    jax.distributed.initialize(coordinator_address=address, num_processes=count, process_id=pid)
    return Processes(jax.process_index(), jax.process_count(), address)


def batch_sharding(
    batch_size: int, devices: Sequence | None = None, *, knob: str = "batch_size"
) -> tuple[NamedSharding, NamedSharding]:
    """Shardings of a minibatch over ``devices`` (default: all visible, every process's when several
    run, :mod:`diffmjx.sysid.distributed`): a 1-D mesh ``("batch",)``.

    ``knob`` names the setting the batch size came from in the error message.

    Returns:
        ``(batch, replicated)``: ``NamedSharding(mesh, P("batch"))`` for arrays whose first axis is
        the batch, and ``NamedSharding(mesh, P())`` for everything else.

    Raises:
        ValueError: ``batch_size`` is not a multiple of the device count.
    """
    devices = list(jax.devices() if devices is None else devices)
    if batch_size % len(devices):
        raise ValueError(
            f"{knob}={batch_size} is not divisible by the {len(devices)} visible devices; minibatches are "
            f"sharded over the batch axis, so choose a multiple of {len(devices)}"
        )
    mesh = Mesh(np.asarray(devices), ("batch",))
    return NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())


def sharded_rows(data: np.ndarray, idx: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """The global array ``data[idx]`` laid out by ``sharding``; each process gathers and copies only
    the rows its own devices hold."""
    return jax.make_array_from_callback(
        (len(idx), *data.shape[1:]), sharding, lambda index: data[idx[index[0]]][(slice(None), *index[1:])]
    )


def replicate(tree: Any, sharding: NamedSharding) -> Any:
    """Every leaf of ``tree`` on every device of ``sharding``, each process copying its own value to its
    own devices: no exchange between processes (they compute the same values from the same config)."""
    return jax.tree.map(lambda x: jax.make_array_from_callback(np.shape(x), sharding, lambda i: np.asarray(x)[i]), tree)
