"""Unit tests for trainer.model (the plain-JAX decoder-only transformer).

Run: XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
     python -m pytest tests/unit/test_model.py -q
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from trainer.data import MarkovSource, eval_set, learner_batches
from trainer.model import (
    EMBEDDING_TENSORS,
    MODEL_SIZES,
    ModelConfig,
    Params,
    apply,
    init_params,
    loss_fn,
    param_count,
    param_specs,
)

TINY = MODEL_SIZES["tiny"]

# cfg is a frozen (hashable) dataclass, so it can be a static jit argument.
apply_jit = jax.jit(apply, static_argnums=1)
loss_jit = jax.jit(loss_fn, static_argnums=1)


def _random_tokens(cfg: ModelConfig, seed: int, batch: int, length: int) -> jax.Array:
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.integers(0, cfg.vocab_size, (batch, length)), dtype=jnp.int32)


def _expected_names(n_layers: int) -> set[str]:
    names = {"embed", "pos_embed", "ln_f.scale", "ln_f.bias", "unembed"}
    for i in range(n_layers):
        names |= {
            f"block{i}.{n}"
            for n in (
                "ln1.scale",
                "ln1.bias",
                "attn.wqkv",
                "attn.wo",
                "ln2.scale",
                "ln2.bias",
                "mlp.w1",
                "mlp.b1",
                "mlp.w2",
                "mlp.b2",
            )
        }
    return names


@pytest.fixture(scope="module")
def tiny_params() -> Params:
    return init_params(TINY, seed=0)


def test_init_is_deterministic_per_seed(tiny_params: Params) -> None:
    again = init_params(TINY, seed=0)
    assert list(again) == list(tiny_params)
    for name in tiny_params:
        np.testing.assert_array_equal(np.asarray(again[name]), np.asarray(tiny_params[name]))


def test_init_differs_across_seeds(tiny_params: Params) -> None:
    other = init_params(TINY, seed=1)
    random_tensors = [n for n in tiny_params if not n.endswith((".scale", ".bias", ".b1", ".b2"))]
    assert len(random_tensors) == 3 + 4 * TINY.n_layers
    for name in random_tensors:
        assert not np.allclose(np.asarray(other[name]), np.asarray(tiny_params[name])), name


def test_param_names_sorted_float32_and_specs(tiny_params: Params) -> None:
    assert set(tiny_params) == _expected_names(TINY.n_layers)
    assert list(tiny_params) == sorted(tiny_params)
    assert set(EMBEDDING_TENSORS) <= set(tiny_params)
    specs = param_specs(tiny_params)
    assert list(specs) == sorted(tiny_params)
    for name, arr in tiny_params.items():
        assert arr.dtype == jnp.float32, name
        assert specs[name] == (tuple(arr.shape), "float32")
    d, v = TINY.d_model, TINY.vocab_size
    assert specs["embed"][0] == (v, d)
    assert specs["pos_embed"][0] == (TINY.seq_len, d)
    assert specs["unembed"][0] == (d, v)
    assert specs["block0.attn.wqkv"][0] == (d, 3 * d)
    assert specs["block1.mlp.w1"][0] == (d, TINY.d_ff)


def test_init_statistics(tiny_params: Params) -> None:
    # Norm scales 1, biases 0; matrices ~N(0, 0.02^2), residual outputs scaled down.
    for name, arr in tiny_params.items():
        a = np.asarray(arr)
        if name.endswith(".scale"):
            np.testing.assert_array_equal(a, 1.0)
        elif name.endswith((".bias", ".b1", ".b2")):
            np.testing.assert_array_equal(a, 0.0)
    assert abs(float(np.std(tiny_params["embed"])) - 0.02) < 0.002
    resid_std = 0.02 / math.sqrt(2 * TINY.n_layers)
    assert abs(float(np.std(tiny_params["block0.attn.wo"])) - resid_std) < 0.15 * resid_std
    assert abs(float(np.std(tiny_params["block1.mlp.w2"])) - resid_std) < 0.15 * resid_std


def test_param_counts() -> None:
    tiny = param_count(init_params(MODEL_SIZES["tiny"], 0))
    small = param_count(init_params(MODEL_SIZES["small"], 0))
    assert 50_000 <= tiny <= 150_000
    assert 1_000_000 <= small <= 10_000_000
    # Closed form: embeddings + per-block (2 LNs, qkv, wo, mlp) + final LN.
    c = TINY
    per_block = 4 * c.d_model + 4 * c.d_model**2 + 2 * c.d_model * c.d_ff + c.d_ff + c.d_model
    expected = 2 * c.vocab_size * c.d_model + c.seq_len * c.d_model + 2 * c.d_model
    assert tiny == expected + c.n_layers * per_block
    assert param_count({"a": jnp.zeros((2, 3)), "b": jnp.zeros((5,))}) == 11


def test_config_validation_and_hashable() -> None:
    with pytest.raises(ValueError):
        ModelConfig(vocab_size=64, seq_len=8, d_model=30, n_layers=1, n_heads=4, d_ff=64)
    assert hash(TINY) == hash(ModelConfig(**TINY.__dict__))


def test_apply_shapes_and_dtype(tiny_params: Params) -> None:
    for length in (TINY.seq_len, 7):
        tokens = _random_tokens(TINY, seed=0, batch=3, length=length)
        logits = apply_jit(tiny_params, TINY, tokens)
        assert logits.shape == (3, length, TINY.vocab_size)
        assert logits.dtype == jnp.float32
        assert bool(jnp.all(jnp.isfinite(logits)))


def test_apply_rejects_too_long_sequence(tiny_params: Params) -> None:
    with pytest.raises(ValueError):
        apply(tiny_params, TINY, jnp.zeros((1, TINY.seq_len + 1), jnp.int32))


def test_causality(tiny_params: Params) -> None:
    tokens = _random_tokens(TINY, seed=1, batch=2, length=TINY.seq_len)
    pos = 20
    changed = tokens.at[:, pos].set((tokens[:, pos] + 1) % TINY.vocab_size)
    a = np.asarray(apply_jit(tiny_params, TINY, tokens))
    b = np.asarray(apply_jit(tiny_params, TINY, changed))
    np.testing.assert_allclose(a[:, :pos], b[:, :pos], rtol=0, atol=1e-6)
    # The change must be visible at and after the changed position.
    assert np.abs(a[:, pos] - b[:, pos]).max() > 1e-4
    assert np.abs(a[:, -1] - b[:, -1]).max() > 1e-6


def test_prefix_consistency(tiny_params: Params) -> None:
    # Running on a prefix gives the same logits as the full sequence there.
    tokens = _random_tokens(TINY, seed=2, batch=2, length=TINY.seq_len)
    full = np.asarray(apply_jit(tiny_params, TINY, tokens))
    prefix = np.asarray(apply_jit(tiny_params, TINY, tokens[:, :10]))
    np.testing.assert_allclose(full[:, :10], prefix, rtol=0, atol=1e-5)


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_initial_loss_near_log_vocab(size: str) -> None:
    cfg = MODEL_SIZES[size]
    params = init_params(cfg, seed=0)
    batch = _random_tokens(cfg, seed=3, batch=4, length=cfg.seq_len + 1)
    loss = float(loss_jit(params, cfg, batch))
    assert abs(loss - math.log(cfg.vocab_size)) < 0.15


def test_loss_matches_manual_cross_entropy(tiny_params: Params) -> None:
    batch = _random_tokens(TINY, seed=4, batch=2, length=TINY.seq_len + 1)
    logits = np.asarray(apply_jit(tiny_params, TINY, batch[:, :-1]), dtype=np.float64)
    logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    targets = np.asarray(batch[:, 1:])
    picked = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    expected = float(np.mean(logz - picked))
    assert abs(float(loss_jit(tiny_params, TINY, batch)) - expected) < 1e-4


def test_gradients_finite_and_reach_every_tensor(tiny_params: Params) -> None:
    batch = _random_tokens(TINY, seed=5, batch=2, length=TINY.seq_len + 1)
    grads = jax.jit(jax.grad(loss_fn), static_argnums=1)(tiny_params, TINY, batch)
    assert set(grads) == set(tiny_params)
    for name, g in grads.items():
        g = np.asarray(g)
        assert g.shape == tiny_params[name].shape
        assert np.all(np.isfinite(g)), name
        assert np.abs(g).max() > 0, name


def test_short_adamw_run_approaches_loss_floor() -> None:
    cfg = TINY
    source = MarkovSource.create(cfg.vocab_size, order=1, concentration=0.1, seed=0)
    floor = source.loss_floor(cfg.seq_len)
    log_v = math.log(cfg.vocab_size)
    evals = jnp.asarray(eval_set(source, seed=0, n_batches=4, batch=16, seq_len=cfg.seq_len))

    opt = optax.adamw(3e-3)
    params = init_params(cfg, seed=0)
    opt_state = opt.init(params)

    @jax.jit
    def step(p: Params, s: optax.OptState, b: jax.Array) -> tuple[Params, optax.OptState]:
        grads = jax.grad(loss_fn)(p, cfg, b)
        updates, s = opt.update(grads, s, p)
        return optax.apply_updates(p, updates), s

    @jax.jit
    def eval_loss(p: Params) -> jax.Array:
        return jnp.mean(jax.vmap(lambda b: loss_fn(p, cfg, b))(evals))

    initial = float(eval_loss(params))
    batches = learner_batches(source, seed=0, learner_id=0, incarnation=0, batch=16, seq_len=cfg.seq_len)
    for _ in range(200):
        params, opt_state = step(params, opt_state, jnp.asarray(next(batches)))
    final = float(eval_loss(params))

    assert abs(initial - log_v) < 0.15
    assert final < initial - 1.0
    # Ends closer to the entropy floor than to the uniform-guess loss.
    assert final - floor < log_v - final
    # And it cannot beat the floor by more than evaluation noise.
    assert final > floor - 0.1


def test_the_data_vocabulary_sizes_the_model_in_training_and_in_the_simulator() -> None:
    # data.vocab_size replaces the size's vocabulary wherever a model is built: the trainer's setup (params,
    # source, batches) and the simulator's tensor shapes must agree, or uploads would not match the syncer's specs.
    from chaos.sim.runner import model_shapes
    from trainer.config import build_config
    from trainer.training import TrainingSetup

    setup = TrainingSetup.from_config(build_config({"data": {"vocab_size": 256}}))
    params = setup.init_params()
    assert setup.model.vocab_size == setup.source.vocab_size == 256
    assert params["embed"].shape == (256, 64) and params["unembed"].shape == (64, 256)
    assert {k: v.shape for k, v in params.items()} == model_shapes("tiny", 256)
    batch = next(setup.batches("learner-0", 0))
    assert batch.max() < 256 and batch.max() >= 64  # tokens beyond the tiny model's own 64 occur
    assert TrainingSetup.from_config(build_config({})).model == MODEL_SIZES["tiny"]
