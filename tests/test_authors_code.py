"""Each token-interaction method against its authors' published code, on tiny float64 models of
two families whose biases and layer-norm parameters are random and non-zero (the default
initialisation sets them to 0 and 1, which hides every bias term).

The reference functions below are written from reading the authors' repositories, step by step
in their own way: on the unmodified Hugging Face model (eager attention, forward hooks where
their code patches the model), not through attnlab's intervention point.

    rollout, flow       samiraabnar/attention_flow      compute_joint_attention, get_adjmat,
                                                        compute_flows (Edmonds-Karp, networkx)
    attention_norm      gorokoba560/norm-analysis-of-transformer (BertNormOutput:
                                                        summed_weighted_norm)
    alti                mt-upc/transformer-contributions (ModelWrapper.get_contributions,
                                                        normalize_contributions min_sum,
                                                        compute_joint_attention)
    globenc             mohsenfayyaz/GlobEnc            (post_ln2_norm, AttentionRollout)
    value_zeroing       hmohebbi/ValueZeroing           (scoring/value_zeroing.py)
    attattr             YRdddream/attattr               (examples/generate_attrscore.py and
                                                        examples/prune_head_with_attr.py:
                                                        scaled_input and the per-layer loop;
                                                        pytorch_pretrained_bert/model_attr.py:
                                                        BertSelfAttention's tmp_score,
                                                        BertForSequenceClassification.forward;
                                                        model_prune_head.py's are alike)

Float64 throughout, so the only differences left are rounding: ≤ 1e-6 is asserted (flow: the
compiled maximum flow's integer scaling is bounded in attnlab.methods.flow, far below that;
attattr: sums of at most 64 gradients in another order, about 1e-16 apart).
"""

from __future__ import annotations

import copy

import networkx as nx
import numpy as np
import pytest
import torch
from tiny_models import tiny_batch, tiny_classifier, without_labels
from torch import nn

from attnlab.engine import models
from attnlab.engine.attribution import attribute
from attnlab.engine.capture import capture
from attnlab.methods import alti, attention_graph, globenc
from attnlab.methods.attention_norm import attention_norm
from attnlab.methods.flow import flow
from attnlab.methods.method import Variants
from attnlab.methods.rollout import rollout
from attnlab.methods.sublayer_parts import sublayers
from attnlab.methods.value_zeroing import normalise_rows, value_zeroing

# the modules the authors' wrappers hook, per family (their `modules_config`)
MODULES = {
    "bert": {"base": "bert", "layers": "encoder.layer", "value": "attention.self.value",
             "dense": "attention.output.dense", "ln1": "attention.output.LayerNorm",
             "ln2": "output.LayerNorm"},
    "distilbert": {"base": "distilbert", "layers": "transformer.layer",
                   "value": "attention.v_lin", "dense": "attention.out_lin",
                   "ln1": "sa_layer_norm", "ln2": "output_layer_norm"},
}
CASES = [(family, seed) for family in MODULES for seed in (0, 1, 2)]
TOLERANCE = 1e-6


def _get(module: nn.Module, dotted: str) -> nn.Module:
    for name in dotted.split("."):
        module = getattr(module, name)
    return module


def random_biased(family: str, seed: int) -> nn.Module:
    """A tiny float64 classifier whose every bias and layer-norm parameter is random."""
    model = tiny_classifier(family, seed=seed, init=0.3, dtype=torch.float64)
    g = torch.Generator().manual_seed(100 + seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.copy_(1 + 0.5 * torch.randn(module.weight.shape, generator=g,
                                                          dtype=torch.float64))
            if isinstance(module, nn.LayerNorm | nn.Linear) and module.bias is not None:
                module.bias.copy_(0.3 * torch.randn(module.bias.shape, generator=g,
                                                    dtype=torch.float64))
    return model


class Recorded:
    """The authors' view of one example: the model's outputs, and each layer's value vectors
    and the inputs of its two layer norms, read by forward hooks."""

    def __init__(self, model: nn.Module, family: str, inputs: dict[str, torch.Tensor]):
        names = MODULES[family]
        self.layers = list(_get(_get(model, names["base"]), names["layers"]))
        self.names = names
        self.values, self.pre_ln, self.pre_ln2 = [], [], []
        hooks = []
        for layer in self.layers:
            hooks.append(_get(layer, names["value"]).register_forward_hook(
                lambda _m, _i, out: self.values.append(out[0])))
            hooks.append(_get(layer, names["ln1"]).register_forward_pre_hook(
                lambda _m, args: self.pre_ln.append(args[0][0])))
            hooks.append(_get(layer, names["ln2"]).register_forward_pre_hook(
                lambda _m, args: self.pre_ln2.append(args[0][0])))
        with torch.no_grad():
            out = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                        output_attentions=True, output_hidden_states=True)
        for hook in hooks:
            hook.remove()
        self.attentions = torch.stack([a[0] for a in out.attentions])  # (L, H, n, n)
        self.hidden = [h[0] for h in out.hidden_states]  # [e^0..e^L], each (n, d)
        self.heads = self.attentions.shape[1]

    def module(self, layer: int, key: str) -> nn.Module:
        return _get(self.layers[layer], self.names[key])

    def summed_weighted_layer(self, layer: int) -> torch.Tensor:
        """Σ_h α f(x) per (i, j), as Kobayashi et al.'s BertNormOutput builds it: (n, n, d)."""
        value = self.values[layer]  # (n, H·d_v)
        n, width = value.shape
        value = value.view(n, self.heads, width // self.heads).permute(1, 0, 2)  # (H, n, d_v)
        dense = self.module(layer, "dense").weight.view(width, self.heads, width // self.heads)
        transformed = torch.einsum("hsv,dhv->hsd", value, dense)
        weighted = torch.einsum("hks,hsd->hksd", self.attentions[layer], transformed)
        return weighted.sum(dim=0)

    def residual_weighted_layer(self, layer: int) -> torch.Tensor:
        residual = torch.einsum("sk,sd->skd", torch.eye(len(self.hidden[layer]),
                                                         dtype=torch.float64),
                                self.hidden[layer])
        return self.summed_weighted_layer(layer) + residual


# ---- the references ---------------------------------------------------------------------

def reference_joint_attention(att_mat: np.ndarray, add_residual: bool) -> np.ndarray:
    """attention_flow's compute_joint_attention."""
    if add_residual:
        aug = att_mat + np.eye(att_mat.shape[1])[None, ...]
        aug = aug / aug.sum(axis=-1)[..., None]
    else:
        aug = att_mat
    joint = np.zeros(aug.shape)
    joint[0] = aug[0]
    for i in np.arange(1, aug.shape[0]):
        joint[i] = aug[i].dot(joint[i - 1])
    return joint


def reference_flow(att_mat: np.ndarray, normalise: bool = True) -> np.ndarray:
    """attention_flow's get_adjmat and compute_flows on the residual head-mean attention, as
    its bert_example notebook calls them; returned as [l, i, j] (node L(l+1)_i, input j)."""
    res = att_mat + np.eye(att_mat.shape[1])[None, ...]
    res = res / res.sum(axis=-1)[..., None]
    n_layers, length, _ = res.shape
    adj = np.zeros(((n_layers + 1) * length, (n_layers + 1) * length))
    for i in np.arange(1, n_layers + 1):
        for k_f in np.arange(length):
            for k_t in np.arange(length):
                adj[i * length + k_f][(i - 1) * length + k_t] = res[i - 1][k_f][k_t]
    graph = nx.from_numpy_array(adj, create_using=nx.DiGraph(), edge_attr="capacity")
    out = np.zeros((n_layers, length, length))
    for layer in range(n_layers):
        for i in range(length):
            u = (layer + 1) * length + i
            for v in range(length):
                out[layer, i, v] = nx.maximum_flow_value(
                    graph, u, v, flow_func=nx.algorithms.flow.edmonds_karp)
            if normalise:
                out[layer, i] /= out[layer, i].sum()
    return out


def reference_attention_norm(rec: Recorded) -> np.ndarray:
    return torch.stack([rec.summed_weighted_layer(layer).norm(dim=-1)
                        for layer in range(len(rec.layers))]).numpy()


def _l_transform(x: torch.Tensor, w_ln: torch.Tensor) -> torch.Tensor:
    """transformer-contributions' l_transform: mean removal, then the norm's weight."""
    ln_param = torch.diag(w_ln)
    ln_mean = torch.eye(w_ln.size(0), dtype=w_ln.dtype) - 1 / w_ln.size(0) * torch.ones_like(
        ln_param)
    return torch.einsum("... e , e f , f g -> ... g", x, ln_mean, ln_param)


def reference_alti(rec: Recorded, include_biases: bool = True) -> np.ndarray:
    """transformer-contributions: get_contributions (post-LN branch), normalize_contributions
    with scaling min_sum and the resultants' L1 norms, compute_joint_attention."""
    contributions = []
    for layer in range(len(rec.layers)):
        ln1, dense = rec.module(layer, "ln1"), rec.module(layer, "dense")
        transformed = _l_transform(rec.residual_weighted_layer(layer), ln1.weight)
        attn_output = transformed.sum(dim=1)
        ln_std_coef = 1 / (rec.pre_ln[layer] + ln1.eps).std(-1, unbiased=False).view(-1, 1)
        if include_biases:
            resultant = ((attn_output + _l_transform(dense.bias, ln1.weight)) * ln_std_coef
                         + ln1.bias)
            # their assertion: the expression rebuilds the attention block's output
            assert torch.allclose(resultant, ln1(rec.pre_ln[layer]), atol=1e-8)
        else:
            resultant = attn_output * ln_std_coef
        vectors = transformed * ln_std_coef.unsqueeze(-1)
        # their call keeps torch's default eps = 1e-6, which pairwise_distance adds to every
        # coordinate of the difference (a guard against division by zero in other norms, not
        # part of the method): it moves the normalised contributions by about 1e-6
        importance = -torch.nn.functional.pairwise_distance(vectors, resultant.unsqueeze(1),
                                                            p=1, eps=0)
        resultant_norm = torch.norm(resultant, p=1, dim=-1)
        normalised = torch.clip(importance + resultant_norm.unsqueeze(1), min=0)
        contributions.append(normalised / normalised.sum(dim=-1, keepdim=True))
    return reference_joint_attention(torch.stack(contributions).numpy(), add_residual=False)


def reference_globenc(rec: Recorded) -> np.ndarray:
    """GlobEnc's modeling_bert: post_ln_layer through the first layer norm, post_ln2_norm
    through the second, then AttentionRollout (no pre-processing)."""
    norms = []
    for layer in range(len(rec.layers)):
        ln1, ln2 = rec.module(layer, "ln1"), rec.module(layer, "ln2")
        residual_weighted = rec.residual_weighted_layer(layer)
        pre = rec.pre_ln[layer]
        var = (pre - pre.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True).unsqueeze(1)
        normalized = (residual_weighted - residual_weighted.mean(-1, keepdim=True)) / (
            var + ln1.eps) ** 0.5
        post_ln = torch.einsum("skd,d->skd", normalized, ln1.weight)
        pre2 = rec.pre_ln2[layer]
        var2 = (pre2 - pre2.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True).unsqueeze(1)
        normalized2 = (post_ln - post_ln.mean(-1, keepdim=True)) / (var2 + ln2.eps) ** 0.5
        norms.append(torch.einsum("skd,d->skd", normalized2, ln2.weight).norm(dim=-1))
    return reference_joint_attention(torch.stack(norms).numpy(), add_residual=False)


def reference_value_zeroing(rec: Recorded) -> np.ndarray:
    """ValueZeroing's scoring loop: zero value vector t of layer l (their customised
    attention's zero_value_index, here a forward hook), rerun the layer from the original
    hidden state, cosine distance to the original output; rows normalised to sum 1."""
    n = len(rec.hidden[0])
    scores = np.zeros((len(rec.layers), n, n))
    for layer, module in enumerate(rec.layers):
        for t in range(n):
            def zero_value(_m, _i, out, t=t):
                out = out.clone()
                out[:, t] = 0
                return out

            hook = rec.module(layer, "value").register_forward_hook(zero_value)
            with torch.no_grad():
                out = module(rec.hidden[layer][None])
            hook.remove()
            out = (out[0] if isinstance(out, tuple) else out)[0]
            x, y = out.numpy(), rec.hidden[layer + 1].numpy()
            cos = (x * y).sum(-1) / np.linalg.norm(x, axis=-1) / np.linalg.norm(y, axis=-1)
            scores[layer, :, t] = 1 - cos
    return scores / scores.sum(axis=-1, keepdims=True)


def reference_scaled_input(emb: torch.Tensor, batch_size: int,
                           num_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """attattr's scaled_input with its zero baseline: the points i/m · A for i = 0..m−1 (a left
    Riemann sum), m = batch_size · num_batch, and the step A/m."""
    baseline = torch.zeros_like(emb)
    num_points = batch_size * num_batch
    scale = 1.0 / num_points
    step = (emb.unsqueeze(0) - baseline.unsqueeze(0)) * scale
    res = torch.cat([torch.add(baseline.unsqueeze(0), step * i) for i in range(num_points)],
                    dim=0)
    return res, step[0]


def reference_gradient(model: nn.Module, inputs: dict[str, torch.Tensor], tar_layer: int,
                       tmp_score: torch.Tensor, pred_label: int) -> torch.Tensor:
    """attattr's model_attr BertForSequenceClassification.forward given tmp_score: layer
    tar_layer's BertSelfAttention uses tmp_score (b, H, S, S) as its probabilities (here a
    forward hook on the unmodified module replaces its output by their context_layer), the
    other layers run as they are; the gradient of the label's softmax probability."""
    def use_tmp_score(module, args, _output):
        value_layer = module.value(args[0])
        value_layer = value_layer.view(*value_layer.shape[:-1], module.num_attention_heads,
                                       module.attention_head_size).permute(0, 2, 1, 3)
        # their batch of one example broadcasts against the b scaled copies from here on
        context_layer = torch.matmul(tmp_score, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(*context_layer.shape[:-2], -1), None

    hook = model.bert.encoder.layer[tar_layer].attention.self.register_forward_hook(
        use_tmp_score)
    try:
        logits = model(**inputs).logits
    finally:
        hook.remove()
    prob = torch.nn.functional.softmax(logits, dim=1)  # their softmax(logits): dim 1 of 2-D
    return torch.autograd.grad(torch.unbind(prob[:, pred_label]), tmp_score)[0]


def reference_attattr(model: nn.Module, inputs: dict[str, torch.Tensor], *, batch_size: int,
                      num_batch: int, label: int | None = None) -> torch.Tensor:
    """attattr's attribution loop for one example (batch of one, padded), per layer: the
    unmodified pass's attention and prediction, m scaled copies of that layer's attention in
    num_batch batches, the gradients summed, times the step, cut to the real tokens.
    generate_attrscore attributes the predicted label (label None), prune_head_with_attr the
    gold one. Their model's own layer-norm eps (1e-5) and −10000 padding mask belong to the
    model, not the method: both sides run one Hugging Face model. Returns (L, H, n, n)."""
    input_len = int(inputs["attention_mask"][0].sum())
    res_attr = []
    for tar_layer in range(model.config.num_hidden_layers):
        with torch.no_grad():
            out = model(**inputs, output_attentions=True)
        att, baseline_logits = out.attentions[tar_layer][0], out.logits
        pred_label = int(torch.argmax(baseline_logits)) if label is None else label
        scale_att, step = reference_scaled_input(att.data, batch_size, num_batch)
        scale_att.requires_grad_(True)
        attr_all = None
        for j_batch in range(num_batch):
            one_batch_att = scale_att[j_batch * batch_size:(j_batch + 1) * batch_size]
            grad = reference_gradient(model, inputs, tar_layer, one_batch_att, pred_label)
            grad = grad.sum(dim=0)
            attr_all = grad if attr_all is None else torch.add(attr_all, grad)
        attr_all = attr_all[:, 0:input_len, 0:input_len] * step[:, 0:input_len, 0:input_len]
        res_attr.append(attr_all.data)
    return torch.stack(res_attr)


# ---- the comparisons ----------------------------------------------------------------------

@pytest.fixture(scope="module", params=CASES, ids=[f"{f}-{s}" for f, s in CASES])
def case(request):
    """The authors' recording and attnlab's capture of one example on one biased model."""
    family, seed = request.param
    reference = random_biased(family, seed)
    ours = models.prepare_model(copy.deepcopy(reference))
    inputs = tiny_batch(family, lengths=(7,), seed=seed)
    inputs = without_labels(inputs)
    return Recorded(reference, family, inputs), ours, capture(ours, inputs, target=1)


def test_the_models_have_random_biases_and_layer_norm_weights(case):
    _, model, _ = case
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert all((m.bias.abs() > 0).all() and (m.weight - 1).abs().max() > 0.1 for m in norms)


def test_both_sides_see_the_same_forward_pass(case):
    rec, _, example = case
    assert torch.allclose(example.probs, rec.attentions, atol=1e-12)
    for ours, theirs in zip(example.states, rec.hidden, strict=True):
        assert torch.allclose(ours[0], theirs, atol=1e-12)


def test_rollout_and_flow_as_abnar_and_zuidema_compute_them(case):
    rec, _, example = case
    attention = attention_graph.head_mean(example.probs.numpy())
    theirs = rec.attentions.mean(dim=1).numpy()
    assert np.abs(rollout(attention) - reference_joint_attention(theirs, True)).max() < TOLERANCE
    assert np.abs(flow(attention) - reference_flow(theirs)).max() < TOLERANCE
    # the kept variant: each output node's flows as they are, unnormalised
    unnormalised = flow(attention, normalised=False)
    assert np.abs(unnormalised - reference_flow(theirs, normalise=False)).max() < TOLERANCE
    assert np.abs(unnormalised.sum(axis=-1) - 1).max() > 0.1  # so the variant differs


@torch.no_grad()
def test_attention_norm_as_kobayashi_et_al_compute_it(case):
    rec, model, example = case
    ours = torch.stack([attention_norm(s.probs, s.transformed)
                        for s in sublayers(model, example)]).numpy()
    assert np.abs(ours - reference_attention_norm(rec)).max() < TOLERANCE


@torch.no_grad()
def test_alti_as_ferrando_et_al_compute_it_and_the_bias_free_variant(case):
    rec, model, example = case
    ours = alti.score(model=model, captured=example, variants=Variants())
    assert np.abs(ours - reference_alti(rec)).max() < TOLERANCE
    bias_free = alti.score(model=model, captured=example, variants=Variants(alti_biases=False))
    assert np.abs(bias_free - reference_alti(rec, include_biases=False)).max() < TOLERANCE
    # with non-zero biases the two differ: the bias terms are not negligible here
    assert np.abs(bias_free - ours).max() > 1e-3


@torch.no_grad()
def test_globenc_as_modarressi_et_al_compute_it(case):
    rec, model, example = case
    ours = globenc.score(model=model, captured=example)
    # GlobEnc's products of unnormalised norms grow with depth: the tolerance is relative
    assert np.abs(ours - reference_globenc(rec)).max() < TOLERANCE * max(1, np.abs(ours).max())


@torch.no_grad()
def test_value_zeroing_as_mohebbi_et_al_compute_it(case):
    rec, model, example = case
    ours = normalise_rows(value_zeroing(model, example.states)).numpy()
    assert np.abs(ours - reference_value_zeroing(rec)).max() < TOLERANCE


# attattr's two attribution paths: (batch_size, num_batch, target) — generate_attrscore's
# defaults and the predicted label; prune_head_with_attr's defaults and the gold label
ATTATTR_SCRIPTS = {"generate_attrscore": (16, 4, "pred"), "prune_head_with_attr": (20, 1, "gold")}
REAL, MAX_SEQ_LENGTH = 7, 10  # their examples are padded to max_seq_length


@pytest.mark.parametrize("script", ATTATTR_SCRIPTS)
@pytest.mark.parametrize("seed", (0, 1, 2))
def test_attattr_as_hao_et_al_compute_it(seed, script):
    batch_size, num_batch, target = ATTATTR_SCRIPTS[script]
    steps = batch_size * num_batch
    reference = random_biased("bert", seed)
    ours = models.prepare_model(copy.deepcopy(reference))
    batch = tiny_batch("bert", lengths=(REAL,), seed=seed)
    padding = (0, MAX_SEQ_LENGTH - REAL)
    inputs = {"input_ids": nn.functional.pad(batch["input_ids"], padding),
              "attention_mask": nn.functional.pad(batch["attention_mask"], padding)}
    inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
    with torch.no_grad():
        predicted = int(reference(**inputs).logits.argmax())
    # a gold label other than the prediction, so that attributing the wrong one would show
    label = None if target == "pred" else (predicted + 1) % 3
    theirs = reference_attattr(reference, inputs, batch_size=batch_size, num_batch=num_batch,
                               label=label)
    if label is not None:
        inputs["labels"] = torch.tensor([label])
    result = attribute(ours, inputs, target, "riemann_left", steps, batch_size)
    assert (result.attr[0, :, :, :REAL, :REAL] - theirs).abs().max() < TOLERANCE
    # what their cut leaves out is padding, where attnlab's attributions are zero
    assert not result.attr[0, :, :, REAL:].any() and not result.attr[0, ..., REAL:].any()
    # the paper's right Riemann sum is another rule here: ∂F/∂(αA) changes along the path
    right = attribute(ours, inputs, target, "riemann_right", steps, batch_size)
    assert (right.attr[0, :, :, :REAL, :REAL] - theirs).abs().max() > 1e-3
