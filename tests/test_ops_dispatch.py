"""Platform dispatch of the selection ops: on CPU the compiled ops hold neither a sort nor
XLA's TopK (the sort-free backend runs); lowered for an accelerator, they are the
portable definitions (TopK, and the sort of the random permutation)."""

import jax
import jax.numpy as jnp
import pytest

from fedjax_sel import ops

N, K, B = 16, 4, 64

OPS = {
    "masked_top_k": lambda s, m, r: ops.masked_top_k(s, m, K, r),
    "uniform_subset": lambda s, m, r: ops.uniform_subset(m, K, r),
    "gumbel_top_k": lambda s, m, r: ops.gumbel_top_k(s, m, K, r),
    "top_k_mask": lambda s, m, r: ops.top_k_mask(s, m, K),
    "grouped_masked_top_k": lambda s, m, r: ops.grouped_masked_top_k(s, m, 2, r, 4),
    "count_true": lambda s, m, r: ops.count_true(m),
}


def _args():
    keys = jax.random.split(jax.random.PRNGKey(0), B)
    return jnp.zeros((B, N)), jnp.ones((B, N), bool), keys


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU backend's property")
@pytest.mark.parametrize("name", sorted(OPS))
def test_no_sort_in_compiled_op_on_cpu(name):
    text = jax.jit(jax.vmap(OPS[name])).lower(*_args()).compile().as_text()
    assert " sort(" not in text
    assert "topk" not in text.lower()


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
@pytest.mark.parametrize("name", ["masked_top_k", "uniform_subset", "top_k_mask"])
def test_other_platforms_lower_the_definition(name, platform):
    exported = jax.export.export(jax.jit(jax.vmap(OPS[name])), platforms=[platform])(*_args())
    text = exported.mlir_module()
    assert "chlo.top_k" in text
    assert "stablehlo.while" not in text  # no bit search, no Floyd's loop


def test_traced_k_lowers_the_definition_on_cpu():
    fn = jax.jit(jax.vmap(lambda s, m, r, k: ops.masked_top_k(s, m, k, r), (0, 0, 0, None)))
    text = fn.lower(*_args(), jnp.int32(K)).compile().as_text()
    assert " sort(" in text
