"""A small decoder-only transformer language model in plain JAX.

Parameters live in a *flat* ``dict[str, jax.Array]`` (name -> float32 array) so
that the distributed-training code can treat every tensor uniformly (fragment
it, average it, compute per-tensor statistics) without walking nested trees.

Architecture (GPT-2 style, pre-LayerNorm):

* ``embed`` [V, d] token embedding and ``pos_embed`` [T, d] learned positional
  embedding, summed;
* ``n_layers`` blocks, each ``x += attn(ln1(x)); x += mlp(ln2(x))`` with
  causal multi-head self-attention (fused ``wqkv`` [d, 3d], output ``wo``
  [d, d], no attention biases) and a GELU MLP (``w1`` [d, ff], ``b1`` [ff],
  ``w2`` [ff, d], ``b2`` [d]);
* a final LayerNorm ``ln_f`` and an *untied* output projection ``unembed``
  [d, V].  Untied so that ``embed`` is the only tensor listed in
  :data:`EMBEDDING_TENSORS` and its gradient is purely the input-side one.

Parameter names::

    embed, pos_embed,
    block{i}.ln1.scale, block{i}.ln1.bias, block{i}.attn.wqkv, block{i}.attn.wo,
    block{i}.ln2.scale, block{i}.ln2.bias, block{i}.mlp.w1, block{i}.mlp.b1,
    block{i}.mlp.w2, block{i}.mlp.b2,
    ln_f.scale, ln_f.bias, unembed

Example:
    >>> cfg = MODEL_SIZES["tiny"]
    >>> params = init_params(cfg, seed=0)
    >>> tokens = jnp.zeros((2, cfg.seq_len), jnp.int32)
    >>> apply(params, cfg, tokens).shape
    (2, 64, 64)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

Params = dict[str, jax.Array]

#: Names of the token-embedding tensors (the output projection is untied and
#: therefore *not* listed here).
EMBEDDING_TENSORS: tuple[str, ...] = ("embed",)

_INIT_STD = 0.02
_LN_EPS = 1e-5


@dataclass(frozen=True)
class ModelConfig:
    """Static shape hyper-parameters of the transformer.

    Frozen (hence hashable), so it can be passed as a static argument to
    ``jax.jit``.

    Example:
        >>> ModelConfig(vocab_size=64, seq_len=64, d_model=64, n_layers=2,
        ...             n_heads=4, d_ff=256).d_model
        64
    """

    vocab_size: int
    seq_len: int  # context length T (max positions)
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    # The matmuls' dtype: "bfloat16" computes in bf16 from fp32 master weights (gradients and optimizer state stay
    # fp32); the logits and the loss are fp32 either way.
    compute_dtype: str = "float32"

    def __post_init__(self) -> None:
        # Fail at construction rather than with an obscure reshape error later.
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model={self.d_model} not divisible by n_heads={self.n_heads}")
        for name in ("vocab_size", "seq_len", "d_model", "n_heads", "d_ff"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        # n_layers == 0 is allowed: embeddings + unembedding, i.e. a bigram model.
        if self.n_layers < 0:
            raise ValueError("n_layers must be >= 0")
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(f"compute_dtype must be one of {COMPUTE_DTYPES}, got {self.compute_dtype!r}")


COMPUTE_DTYPES = ("float32", "bfloat16")


MODEL_SIZES: dict[str, ModelConfig] = {
    # 76,800 params; T=32 and a narrower MLP halve the compute of "tiny": a
    # jitted batch-16 AdamW step takes ~6 ms on one CPU thread.
    "nano": ModelConfig(vocab_size=64, seq_len=32, d_model=64, n_layers=2, n_heads=4, d_ff=128),
    # 111,872 params (V = 64); the per-change tests' model: a jitted batch-16 AdamW step takes ~12-19 ms on one
    # CPU thread (compute bound: ~0.7 GFLOP per step).
    "tiny": ModelConfig(vocab_size=64, seq_len=64, d_model=64, n_layers=2, n_heads=4, d_ff=256),
    # 3,319,296 params (V = 256): a GPT-style decoder of realistic proportions (d_ff = 4 d, head width 32, 4
    # layers, T = 128) as large as lets a built-in chaos run in containers finish within 10 minutes on a 2-core
    # machine (docs/trainer.md, "Model presets"); ~0.6 s per batch-16 step on one CPU thread.
    "small": ModelConfig(vocab_size=256, seq_len=128, d_model=256, n_layers=4, n_heads=8, d_ff=1024),
    # 6,629,376 params (V = 256): 26.5 MB of fp32 parameters, 53 MB with the syncer's outer momentum: state whose
    # transfer, checkpoints and restarts take measurable time (the nightly's rejoin at size).
    "wide": ModelConfig(vocab_size=256, seq_len=128, d_model=512, n_layers=2, n_heads=8, d_ff=2048),
}


def sized(size: str, vocab_size: int | None = None, compute_dtype: str = "float32") -> ModelConfig:
    """A named model size, its vocabulary replaced by the data's when the run sets one (``data.vocab_size``, or 256
    for real text), computing in ``compute_dtype``.

    Example:
        >>> sized("tiny").vocab_size, sized("tiny", 256).vocab_size, sized("tiny", 256).d_model
        (64, 256, 64)
        >>> sized("small", compute_dtype="bfloat16").compute_dtype
        'bfloat16'
    """
    base = MODEL_SIZES[size]
    if vocab_size is not None:
        base = dataclasses.replace(base, vocab_size=vocab_size)
    return base if compute_dtype == base.compute_dtype else dataclasses.replace(base, compute_dtype=compute_dtype)


def param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape for every parameter of ``cfg`` (single source of truth)."""
    d, ff, v = cfg.d_model, cfg.d_ff, cfg.vocab_size
    shapes: dict[str, tuple[int, ...]] = {
        "embed": (v, d),
        "pos_embed": (cfg.seq_len, d),
        "ln_f.scale": (d,),
        "ln_f.bias": (d,),
        "unembed": (d, v),
    }
    for i in range(cfg.n_layers):
        p = f"block{i}"
        shapes |= {
            f"{p}.ln1.scale": (d,),
            f"{p}.ln1.bias": (d,),
            f"{p}.attn.wqkv": (d, 3 * d),
            f"{p}.attn.wo": (d, d),
            f"{p}.ln2.scale": (d,),
            f"{p}.ln2.bias": (d,),
            f"{p}.mlp.w1": (d, ff),
            f"{p}.mlp.b1": (ff,),
            f"{p}.mlp.w2": (ff, d),
            f"{p}.mlp.b2": (d,),
        }
    return dict(sorted(shapes.items()))


def init_params(cfg: ModelConfig, seed: int) -> Params:
    """Initialise parameters deterministically from ``seed``.

    Matrices are N(0, 0.02^2); the residual-stream output projections
    (``attn.wo``, ``mlp.w2``) are further scaled by ``1/sqrt(2 * n_layers)``
    (GPT-2) so the residual variance does not grow with depth.  LayerNorm
    scales are 1, biases 0.  Each tensor's key is ``fold_in(seed_key, i)``
    with ``i`` its index in the sorted name list, so a tensor's init does not
    depend on the iteration order of anything but the (stable) name set.
    Returned dict has sorted keys.

    Example:
        >>> p = init_params(MODEL_SIZES["tiny"], seed=0)
        >>> p["embed"].shape, p["embed"].dtype
        ((64, 64), dtype('float32'))
    """
    root = jax.random.PRNGKey(seed)
    resid_scale = 1.0 / math.sqrt(2.0 * max(cfg.n_layers, 1))
    params: Params = {}
    for i, (name, shape) in enumerate(param_shapes(cfg).items()):
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "scale":
            params[name] = jnp.ones(shape, jnp.float32)
        elif leaf in ("bias", "b1", "b2"):
            params[name] = jnp.zeros(shape, jnp.float32)
        else:
            std = _INIT_STD * (resid_scale if leaf in ("wo", "w2") else 1.0)
            key = jax.random.fold_in(root, i)
            params[name] = std * jax.random.normal(key, shape, jnp.float32)
    return params


def _layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    """LayerNorm over the last axis (its statistics in fp32 whatever the compute dtype)."""
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
    return ((x32 - mean) * jax.lax.rsqrt(var + _LN_EPS)).astype(x.dtype) * scale + bias


def _attention(params: Params, prefix: str, cfg: ModelConfig, x: jax.Array) -> jax.Array:
    """Causal multi-head self-attention on ``x`` [B, T, d]."""
    b, t, d = x.shape
    h = cfg.n_heads
    dh = d // h
    qkv = (x @ params[f"{prefix}.attn.wqkv"]).reshape(b, t, 3, h, dh)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # each [B, T, H, Dh]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(dh)
    causal = jnp.tril(jnp.ones((t, t), dtype=bool))
    # A finite large negative (not -inf) keeps gradients NaN-free.
    scores = jnp.where(causal, scores, jnp.finfo(scores.dtype).min)
    weights = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(v.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, t, d)
    return out @ params[f"{prefix}.attn.wo"]


def _mlp(params: Params, prefix: str, x: jax.Array) -> jax.Array:
    """GELU MLP on ``x`` [B, T, d]."""
    hidden = jax.nn.gelu(x @ params[f"{prefix}.mlp.w1"] + params[f"{prefix}.mlp.b1"])
    return hidden @ params[f"{prefix}.mlp.w2"] + params[f"{prefix}.mlp.b2"]


def apply(params: Params, cfg: ModelConfig, tokens: jax.Array) -> jax.Array:
    """Causal forward pass: int tokens [B, T] -> float32 logits [B, T, V].

    ``T`` may be anything in ``1..cfg.seq_len``; logits at position ``t``
    depend only on ``tokens[:, :t+1]``.

    Example:
        >>> cfg = MODEL_SIZES["tiny"]
        >>> logits = apply(init_params(cfg, 0), cfg, jnp.zeros((1, 8), jnp.int32))
        >>> logits.shape, logits.dtype
        ((1, 8, 64), dtype('float32'))
    """
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [B, T], got shape {tokens.shape}")
    t = tokens.shape[1]
    if t > cfg.seq_len:
        raise ValueError(f"sequence length {t} exceeds cfg.seq_len={cfg.seq_len}")
    if cfg.compute_dtype != "float32":
        params = {k: v.astype(cfg.compute_dtype) for k, v in params.items()}  # fp32 master weights stay outside
    x = params["embed"][tokens] + params["pos_embed"][:t][None]
    for i in range(cfg.n_layers):
        p = f"block{i}"
        h = _layer_norm(x, params[f"{p}.ln1.scale"], params[f"{p}.ln1.bias"])
        x = x + _attention(params, p, cfg, h)
        h = _layer_norm(x, params[f"{p}.ln2.scale"], params[f"{p}.ln2.bias"])
        x = x + _mlp(params, p, h)
    x = _layer_norm(x, params["ln_f.scale"], params["ln_f.bias"])
    return (x @ params["unembed"]).astype(jnp.float32)


def loss_fn(params: Params, cfg: ModelConfig, batch: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy (nats) over all ``B*T`` predictions.

    ``batch`` is int [B, T+1]: inputs ``batch[:, :-1]``, targets ``batch[:, 1:]``.

    Example:
        >>> cfg = MODEL_SIZES["tiny"]
        >>> batch = jnp.zeros((2, cfg.seq_len + 1), jnp.int32)
        >>> float(loss_fn(init_params(cfg, 0), cfg, batch)) > 0
        True
    """
    inputs, targets = batch[:, :-1], batch[:, 1:]
    logp = jax.nn.log_softmax(apply(params, cfg, inputs), axis=-1)
    nll = -jnp.take_along_axis(logp, targets[..., None].astype(jnp.int32), axis=-1)
    return jnp.mean(nll)


def param_count(params: Params) -> int:
    """Total number of scalar parameters.

    Example:
        >>> param_count({"a": jnp.zeros((2, 3)), "b": jnp.zeros((4,))})
        10
    """
    return int(sum(int(np.prod(v.shape)) for v in params.values()))


def param_specs(params: Params) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, dtype string), in sorted name order.

    Example:
        >>> param_specs({"w": jnp.zeros((2, 3), jnp.float32)})
        {'w': ((2, 3), 'float32')}
    """
    return {k: (tuple(int(s) for s in params[k].shape), str(params[k].dtype)) for k in sorted(params)}
