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

__all__ = ["PARAM", "OPT", "encode_arrays", "decode_params", "decode_opt_state"]

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
