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

Adding a method: a module here exposing one `attnlab.methods.method.Method` as `METHOD`, and
its line below. The modules are imported by name, so a rule's code version covers each.
"""

from __future__ import annotations

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
