"""Mean ablation, attribution patching (Nanda 2023) and rule induction_heads on the tiny Llama
of config/induction.yaml trained on the planted induction task (about 5 s): its next token
needs a previous-token head in layer 0 (head 1) and an induction head in layer 1 (Olsson et
al. 2022). Module cost: about 15 s on a free machine."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import gate_central_difference, gated_loss
from test_induction import SPEC, _trained

from attnlab.analyses import heads, induction_heads
from attnlab.data import induction
from attnlab.engine import attribution, models, next_token
from attnlab.engine.intervention import Intervention

N_DEV = 120


@pytest.fixture(scope="module")
def decoder():
    """The trained decoder and its first N_DEV held-out prompts (labels = target tokens) with
    B's first token positions."""
    trained = _trained(seed=0)
    model = models.prepare_model(trained.model)
    dev = induction.generate(N_DEV, seed=1)
    inputs = next_token.prompt_inputs(
        next_token.encode_prompts(dev, SPEC, trained.tokenizer, max_length=32))
    positions = torch.tensor(next_token.token_positions(dev, SPEC, trained.tokenizer,
                                                        "gt_induction"))
    return {"model": model, "inputs": inputs, "induction": positions}


def test_the_standard_protocol_repeats_t_random_words_after_a_document_start():
    """Synthetic kind repeat: the start, T distinct words, then the same words up to the
    second A; B (the target) follows A's first occurrence, and the repeat starts at 1 + T."""
    frame = induction.generate(200, seed=0, layout=induction.repeat(10))
    for row in frame.itertuples():
        words = row.text.split(" ")
        first, second = words[1:11], words[11:]
        assert words[0] == induction.DOCUMENT_START and len(set(first)) == 10
        assert second == first[: len(second)] and 1 <= len(second) <= 9
        assert words[row.gt_previous] == words[-1] and words[row.gt_induction] == row.target
        assert row.repeat_start == 11
    # every query position of the second copy is drawn
    assert frame["gt_induction"].nunique() == 9
    with pytest.raises(ValueError, match="2 to 64"):
        induction.repeat(65)


def test_a_masked_head_outputs_its_fill(decoder):
    """head_fill changes nothing where the mask keeps a head; a masked head with a zero fill is
    the plain mask; and mean-ablating a head equals replacing its output by the mean: the
    captured A·V of the head, summed with the fill's share, is what the model reads."""
    model, inputs = decoder["model"], {k: v[:8] for k, v in decoder["inputs"].items()}
    fill = heads.mean_head_outputs(model, decoder["inputs"], batch_size=32)
    assert fill[0].shape == (4, 16)
    keep = torch.ones(2, 4)
    with torch.no_grad():
        stock = models.logits(model, inputs)
        torch.testing.assert_close(
            models.logits(model, inputs, Intervention(head_mask=keep, head_fill=fill)), stock,
            rtol=0, atol=0)
        mask = keep.clone()
        mask[0, 1] = 0
        zero = {layer: torch.zeros_like(v) for layer, v in fill.items()}
        torch.testing.assert_close(
            models.logits(model, inputs, Intervention(head_mask=mask, head_fill=zero)),
            models.logits(model, inputs, Intervention(head_mask=mask)), rtol=0, atol=0)
        # the previous-token head is needed: zeroing or mean-ablating it costs the loss
        full, ablated = (gated_loss(model, inputs, m, fill).mean() for m in (keep, mask))
        assert ablated > full + 1.0


def test_attribution_patching_is_the_gradient_toward_the_mean(decoder):
    """attribution_patching = -E_x[dL/dξ] with each head gated as ξ·o + (1 - ξ)·mean: a
    central difference of that loss in float64 (float32 rounding of Llama's norms, as in
    tests/test_decoder_heads.py's Taylor check, sets the tolerance)."""
    model = copy.deepcopy(decoder["model"]).double()
    inputs = {k: v[:6] for k, v in decoder["inputs"].items()}
    scores = heads.attribution_patching_importance(model, inputs, batch_size=4)
    fill = heads.mean_head_outputs(model, inputs, batch_size=4)
    for layer, head in [(0, 1), (1, 1), (1, 3)]:
        numeric = gate_central_difference(model, inputs, layer, head, eps=1e-3, fill=fill).mean()
        assert scores[layer, head] == pytest.approx(-float(numeric), rel=1e-2, abs=2e-4)


def test_an_ablation_reads_both_copies_and_runs_from_its_first_ablated_layer(decoder):
    """`Evaluation.ablated` reads two positions of each prompt (the query's next token, and B's
    first occurrence predicted from A's) and runs only the layers from the first ablated one,
    from the whole model's hidden states there; as a whole pass of the model with the same
    mean ablation gives them (right padding: the real tokens' positions are the same)."""
    model, n = decoder["model"], 20
    inputs = {k: v[:n] for k, v in decoder["inputs"].items()}
    b = decoder["induction"][:n]
    fill = heads.mean_head_outputs(model, inputs)
    prompts = induction_heads.Evaluation(model, inputs, induction=b, batch_size=8)
    rows = torch.arange(n)
    query = inputs["attention_mask"].sum(dim=1) - 1
    # the planted task's B is its target: the same token in both copies
    assert torch.equal(inputs["input_ids"][rows, b], inputs["labels"])
    n_heads = models.head_shape(model)[1]
    for chosen in ([], [n_heads + 2], [1, n_heads + 2]):  # none; a layer-1 head; one of each
        out = prompts.ablated(chosen, fill)
        mask = torch.ones(models.head_shape(model))
        mask.view(-1)[chosen] = 0.0
        with torch.no_grad():
            logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                           attnlab=Intervention(head_mask=mask, head_fill=fill)).logits.double()
        second = torch.nn.functional.cross_entropy(logits[rows, query], inputs["labels"],
                                                   reduction="none")
        first = torch.nn.functional.cross_entropy(logits[rows, b - 1], inputs["labels"],
                                                  reduction="none")
        # float32 through differently batched passes: equal to their rounding
        np.testing.assert_allclose(out.loss, second.numpy(), atol=1e-4)
        np.testing.assert_allclose(out.first_copy_loss, first.numpy(), atol=1e-4)
        np.testing.assert_array_equal(
            out.right, (logits[rows, query].argmax(-1) == inputs["labels"]).double().numpy())


def test_the_heads_are_found_and_ablation_proves_them(decoder):
    """On the trained model: the raw-attention scores name the mechanism heads (the
    previous-token head in layer 0, every layer-1 head an induction head), and mean-ablating
    AttAttr's top head (the previous-token head, which the task cannot do without) raises the
    loss on held-out prompts far more than a random head or AttAttr's lowest."""
    model, inputs = decoder["model"], decoder["inputs"]
    n_rank = 60
    ranking = {k: v[:n_rank] for k, v in inputs.items()}
    result = attribution.attribute(model, ranking, target=ranking["labels"],
                                   quadrature="riemann_right", steps=20)
    lengths = ranking["attention_mask"].sum(dim=1).tolist()
    attattr = np.stack([result.attr[i, :, :, :n, :n].flatten(2).amax(dim=-1).double().numpy()
                        for i, n in enumerate(lengths)])
    out = induction_heads.head_analysis(
        model, ranking, {k: v[n_rank:] for k, v in inputs.items()},
        induction=decoder["induction"][:n_rank], evaluation_induction=decoder["induction"][n_rank:],
        attattr=attattr, ks=[1, 2], draws=3, seed=0, batch_size=32)
    table = out.heads.set_index(["layer", "head"])
    # seed 0: 0.76 over all positions (0.89 at B alone), the other layer-0 heads 0.19-0.39
    assert table.loc[(0, 1), "previous_token"] > 0.6
    assert table.loc[(0, 1), "rank_attattr"] == 1
    assert table.loc[1, "prefix_matching"].min() > 0.8
    assert table["induction_head"].sum() == 4 and table["previous_token_head"].sum() == 1
    # attribution patching's ranking is of every head once. Where it puts the previous-token
    # head is not asserted: on this saturated model (loss 0.03) the head's ablation costs
    # about 3 nats, far beyond the linear estimate's reach, and the estimate's sign follows
    # the float path of training (seed 0: first at 0.104 on one CPU, last at -0.021 on
    # another); its definition is checked against a central difference above
    assert sorted(table["rank_attribution_patching"]) == list(range(1, len(table) + 1))
    assert out.summary["accuracy"] > 0.95 and out.summary["evaluation_examples"] == N_DEV - n_rank
    ablation = out.ablation.set_index(["ranking", "order", "k"])["loss"]
    # seed 0: 3.18 against 0.09 and 0.03 (the whole model's 0.06)
    assert ablation["attattr", "top", 1] > ablation["random", "", 1] + 1.0
    assert ablation["attattr", "top", 1] > ablation["attattr", "lowest", 1] + 1.0
    reasons = out.claims.set_index("claim")["reason"]
    claims = out.claims.set_index("claim")["verdict"]
    assert claims["Mean-ablating AttAttr's top 1 heads raises the next-token loss on the second "
                  "copy more than ablating k random heads"] == "holds"
    # AttAttr's top head is the previous-token head, prefix matching's an induction head, in
    # every resample of the examples: an overlap of 0 in every one, an interval of no width,
    # which is not judged
    overlap = ("AttAttr's top 1 heads are among the 1 of highest prefix-matching score beyond "
               "chance")
    assert claims[overlap] == "not testable"
    assert reasons[overlap] == "every resample of the units gives 0: no interval"
    # the first copy's loss of the same token, B after A's first occurrence, where nothing
    # before tells it (seed 0: 8.6 nats, the second copy's 0.06)
    assert ablation["none", "", 0] < 0.2
    first = out.ablation.set_index(["ranking", "order", "k"])["first_copy_loss"]
    assert first["none", "", 0] > 5.0
    # the previous-token head is needed by the induction step alone: ablating it raises the
    # second copy's loss by about 3 nats, the first copy's by 0.16
    assert claims["Mean-ablating AttAttr's top 1 heads raises the second copy's loss more "
                  "than the first copy's (the same token)"] == "holds"
    assert len(out.claims) == 2 * 7
