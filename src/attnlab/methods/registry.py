"""The token-interaction methods, in the order the tables list them (scores [l, i, j]: layer
l, query i, key j; each defined in its module):

    attention             head-mean attention                      attention
    attattr               Hao et al. 2021                           attattr
    attention_x_gradient  attention × gradient                      attention_x_gradient
    rollout               Abnar & Zuidema 2020                      rollout
    flow                  Abnar & Zuidema 2020                      flow
    attention_norm        Kobayashi et al. 2020                     attention_norm
    alti                  Ferrando et al. 2022                      alti
    globenc               Modarressi et al. 2022                    globenc
    value_zeroing         Mohebbi et al. 2023                       value_zeroing
    occlusion             F drop when one edge is zeroed            occlusion

A decoder language model (causal attention, pre-LN) gets the methods whose `decoders` is true:
ALTI and GlobEnc decompose an encoder's post-LN attention sublayer, which a
decoder does not have (`chosen`).

Adding a method: a module here exposing one `attnlab.methods.method.Method` as `METHOD`, and
its line below. The modules are imported by name, so a rule's code version covers each.
"""

from __future__ import annotations

from collections.abc import Sequence

from attnlab.methods import (
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
from attnlab.methods.method import Method
from attnlab.plumbing.errors import ConfigError

METHODS: tuple[Method, ...] = (
    attention.METHOD,
    attattr.METHOD,
    attention_x_gradient.METHOD,
    rollout.METHOD,
    flow.METHOD,
    attention_norm.METHOD,
    alti.METHOD,
    globenc.METHOD,
    value_zeroing.METHOD,
    occlusion.METHOD,
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
