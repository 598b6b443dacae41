"""A syncer checkpoint's arrays: the global parameters and each fragment's outer-optimizer state, by name.

:meth:`~trainer.core.syncer_state.SyncerState.to_checkpoint` writes them beside its metadata
(:class:`~trainer.core.checkpoint_meta.CheckpointMeta`); a restore reads them back into a fresh state's
optimizer structure, leaf by leaf, so the names are the whole format: ``param/<tensor>`` and
``opt/<fragment>/<leaf index>``.

Example:
    >>> import numpy as np, optax
    >>> params = {"w": np.ones(2, np.float32)}
    >>> opt = optax.sgd(0.1, momentum=0.9).init(params)
    >>> arrays = encode_arrays(params, [opt])
    >>> sorted(arrays), decode_params(arrays)["w"].tolist()
    (['opt/0/0', 'param/w'], [1.0, 1.0])
    >>> decode_opt_state(arrays, 0, opt)[0].trace["w"].tolist()
    [0.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

__all__ = ["PARAM", "OPT", "encode_arrays", "decode_params", "decode_opt_state", "restore_problems"]

PARAM, OPT = "param/", "opt/"


def encode_arrays(params: Mapping[str, np.ndarray], opt_states: Sequence[Any]) -> dict[str, np.ndarray]:
    """Every parameter and every leaf of each fragment's optimizer state, named."""
    arrays = {f"{PARAM}{n}": v for n, v in params.items()}
    for p, st in enumerate(opt_states):
        for i, leaf in enumerate(jax.tree_util.tree_leaves(st)):
            arrays[f"{OPT}{p}/{i}"] = np.asarray(leaf)
    return arrays


def decode_params(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The parameters a checkpoint holds (copies)."""
    return {k.split("/", 1)[1]: np.array(v) for k, v in arrays.items() if k.startswith(PARAM)}


def decode_opt_state(arrays: Mapping[str, np.ndarray], fragment: int, template: Any) -> Any:
    """Fragment ``fragment``'s optimizer state, in the structure of ``template`` (a fresh state's)."""
    leaves, treedef = jax.tree_util.tree_flatten(template)
    return jax.tree_util.tree_unflatten(
        treedef, [np.array(arrays[f"{OPT}{fragment}/{i}"]) for i in range(len(leaves))]
    )


def restore_problems(arrays: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> list[str]:
    """What keeps a checkpoint's arrays from being served (docs/security.md, ``restore-integrity``): names the model
    does not have or lacks, a shape or dtype not the model's, NaN or Inf. ``expected``: a fresh state's arrays.

    >>> want = {"param/w": np.zeros(2, np.float32)}
    >>> restore_problems({"param/w": np.ones(2, np.float32)}, want)
    []
    >>> restore_problems({"param/w": np.ones(3, np.float32), "param/x": np.ones(1)}, want)
    ['param/x is not in the model', 'param/w has shape (3,), the model has (2,)']
    >>> restore_problems({"param/w": np.array([1.0, np.nan], np.float32)}, want)
    ['param/w holds NaN or Inf']
    """
    problems = [f"{k} is not in the model" for k in sorted(set(arrays) - set(expected))]
    problems += [f"{k} is missing" for k in sorted(set(expected) - set(arrays))]
    for k in sorted(set(arrays) & set(expected)):
        a, e = arrays[k], expected[k]
        if a.shape != e.shape:
            problems.append(f"{k} has shape {a.shape}, the model has {e.shape}")
        elif a.dtype != e.dtype:
            problems.append(f"{k} has dtype {a.dtype}, the model has {e.dtype}")
        elif np.issubdtype(a.dtype, np.inexact) and not np.all(np.isfinite(a)):
            problems.append(f"{k} holds NaN or Inf")
    return problems
