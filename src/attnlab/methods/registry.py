"""The token-interaction methods, in the order the tables list them (scores [l, i, j]: layer
l, query i, key j).

Adding a method is its module, attnlab.methods.<name> with its function `score`, and its
entry here: its `Method` in `METHODS` and its module among the imports below. Everything else
reads this table: the config's schema (the names `interaction_methods.methods` allows and its
default, filled in by attnlab.plumbing.config), the tests' lists of methods and the methods'
table of docs/interaction_methods.md (docs/generate_configuration.py).

A decoder language model (causal attention, pre-LN) gets the methods whose `decoders` is true:
ALTI and GlobEnc decompose an encoder's post-LN attention sublayer, which a decoder does not
have (`chosen`).

This module imports no torch: the workflow reads it for the schema when it plans its jobs,
and each method's module is imported when its scores are first asked for (`Method.score`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from attnlab.methods.method import GRADIENTS, Method
from attnlab.plumbing.errors import ConfigError

if TYPE_CHECKING:
    # Never run: named for attnlab.plumbing.code_version, which follows import statements, so
    # that the rules that score the methods rerun when a method's module changes.
    from attnlab.methods import (  # noqa: F401
        alti,
        attattr,
        attention,
        attention_norm,
        attention_x_gradient,
        flow,
        globenc,
        occlusion,
        rollout,
        value_zeroing,
    )

# the sources of the methods that read the classifier's forward pass of the example
FORWARD = frozenset({"model", "captured"})

METHODS: tuple[Method, ...] = (
    Method("attention", "A^l = (1/H) Σ_h A^l_h (head mean)", "—", frozenset({"attention"})),
    Method("attattr",
           "a^l_ij = Σ_h A^l_h,ij ∫₀¹ ∂F(αA^l)/∂A^l_h,ij dα, by the engine with the run's "
           "`attribution` settings",
           "Hao, Dong, Wei & Xu 2021 (AAAI)", FORWARD | {"engine", GRADIENTS}, target=True),
    Method("attention_x_gradient",
           "g^l_ij = Σ_h A^l_h,ij ∂F(A)/∂A^l_h,ij (AttAttr's one node α = 1)",
           "baseline", FORWARD | {GRADIENTS}, target=True),
    Method("rollout", "Ã^l = ½A^l + ½I; R^0 = Ã^0, R^l = Ã^l R^{l−1}",
           "Abnar & Zuidema 2020 (ACL); samiraabnar/attention_flow `compute_joint_attention`",
           frozenset({"attention"})),
    Method("flow",
           "maximum flow M^l_ij from input token j to position i after layer l in the layered "
           "graph with capacities Ã, normalised per output node: F^l_ij = M^l_ij / Σ_k M^l_ik",
           "Abnar & Zuidema 2020 (ACL); `compute_flows`", frozenset({"attention", "variants"})),
    Method("attention_norm", "‖Σ_h α^h_ij f^h(x_j)‖, f^h(x) = (x W_V^h + b_V^h) W_O^h",
           "Kobayashi, Kuribayashi, Yokoi & Inui 2020 (EMNLP); "
           "gorokoba560/norm-analysis-of-transformer", FORWARD),
    Method("alti",
           "layer-wise c^l_ij = max(0, ‖y_i‖₁ − ‖y_i − T_ij‖₁) normalised, T_ij token j's "
           "layer-norm-decomposed part of the attention sublayer's output (residual included), "
           "y_i that whole output, bias terms included; ALTI^l = C^l ALTI^{l−1}",
           "Ferrando, Gállego & Costa-jussà 2022 (EMNLP); mt-upc/transformer-contributions "
           "`get_contributions`", FORWARD | {"variants"}, decoders=False),
    Method("globenc",
           "N^l_ij = ‖γ₂ ⊙ (T_ij − mean T_ij)/σ₂_i‖₂: T_ij carried through the layer's second "
           "layer norm too; G^l = N^l G^{l−1}",
           "Modarressi, Fayyaz, Yaghoobzadeh & Pilehvar 2022 (NAACL); mohsenfayyaz/GlobEnc",
           FORWARD, decoders=False),
    Method("value_zeroing",
           "1 − cos(x̃_i^{¬j}, x̃_i): layer l's output at i with token j's value vector zeroed "
           "in every head, against the original; rows normalised",
           "Mohebbi, Zuidema, Chrupała & Alishahi 2023 (EACL); hmohebbi/ValueZeroing", FORWARD),
    Method("occlusion", "F(A) − F(A with edge i → j of layer l zeroed in every head)",
           "baseline", FORWARD | {"batch_size"}, target=True),
)


def chosen(names: Sequence[str], *, decoder: bool) -> tuple[list[Method], list[str]]:
    """The methods named by the config key interaction_methods.methods, in the tables' order,
    and the names left out. For a decoder, every method (the key's default) means every one
    that applies to a decoder; naming one that does not is refused in one line."""
    named = [method for method in METHODS if method.name in names]
    if not decoder:
        return named, []
    apply = [method.name for method in METHODS if method.decoders]
    left_out = [method.name for method in named if not method.decoders]
    if left_out and {method.name for method in named} != {method.name for method in METHODS}:
        raise ConfigError(f"interaction_methods.methods: {', '.join(left_out)} "
                          "(decomposing an encoder's post-LN attention sublayer) cannot score "
                          f"a decoder language model; the methods that can: {', '.join(apply)}")
    return [method for method in named if method.decoders], left_out
