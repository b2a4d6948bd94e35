"""`attnlab.explain` on tiny models built here: every registry method gives the numbers of the
workflow's stage interaction_methods on the same input; the explanation saves and loads back;
its words sum to its tokens; a decoder's string target is its token ids' target, a contrast the
difference, a continuation its log-probability; and an input that would not fit in memory is
refused in one line before anything is computed."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import MINILM
from test_decoders import _word_tokenizer as word_tokenizer
from test_explorer import drawn, needs_browser, svg
from tiny_models import tiny_causal_lm, tiny_classifier
from transformers import BertTokenizer

import attnlab
from attnlab.analyses.interaction_methods import Options, score_example
from attnlab.data import packages
from attnlab.engine import models
from attnlab.engine.attribution import engine_options
from attnlab.engine.batch_size import (
    MEMORY_SHARE,
    EncoderShape,
    attribution_row_bytes,
    rows_per_pass,
    rule_load,
)
from attnlab.engine.capture import capture
from attnlab.explanation import Explanation
from attnlab.methods.registry import METHODS
from attnlab.plumbing.config import section_defaults
from attnlab.plumbing.errors import AttnlabError

TOLERANCE = section_defaults("attribution")["tolerance"]  # the completeness budget per layer
# WordPiece pieces within the tiny models' 40 ids: "unsentimental" is four tokens
PIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##sen", "##ti", "##mental",
          "film", "a", ",", "good", "plot"]
CPU = torch.device("cpu")
LIBRARY_PAGE = Path(__file__).resolve().parents[1] / "docs" / "library.md"


@pytest.fixture(scope="module")
def classifier():
    """A tiny BERT classifier (3 layers, 4 heads, 3 classes) with a WordPiece tokenizer."""
    tokenizer = BertTokenizer(vocab={piece: i for i, piece in enumerate(PIECES)})
    return models.prepare_model(tiny_classifier("bert")), tokenizer


@pytest.fixture(scope="module")
def decoder():
    """A tiny GPT-2 (2 layers, 4 heads) with a word-level tokenizer over w1..w19."""
    return (models.prepare_model(tiny_causal_lm("gpt2", dtype=torch.float32)),
            word_tokenizer())


def stage_scores(model, tokenizer, text: str, method) -> np.ndarray:
    """The method's scores of `text` as stage interaction_methods computes them: its options
    built from the schema's defaults as the stage's `_options` builds them from the config, the
    example captured with the predicted class as target, then `score_example`."""
    inputs = dict(tokenizer(text, return_tensors="pt"))
    engine = engine_options(section_defaults("attribution"))
    engine["batch_size"] = rows_per_pass(model.config, engine, inputs["input_ids"].shape[1], CPU)
    options = Options.of([method], section_defaults("interaction_methods"), engine, seed=0)
    with torch.no_grad():
        pred = int(capture(model, inputs, 0).distribution.argmax())
    return score_example(model, capture(model, inputs, pred), options,
                         defaultdict(float))[method.name]


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_every_method_through_explain_equals_the_stage(classifier, decoder, method):
    # the same code path on the same input: equal to float64 rounding, on both kinds of model
    for (model, tokenizer), text in ((classifier, "a good , unsentimental film"),
                                     (decoder, "w1 w2 w3 w1 w2")):
        if models.family_of(model).causal and not method.decoders:
            with pytest.raises(AttnlabError, match=f"method: {method.name} decomposes"):
                attnlab.explain((model, tokenizer), text, method=method.name)
            continue
        result = attnlab.explain((model, tokenizer), text, method=method.name)
        expected = stage_scores(model, tokenizer, text, method)
        assert result[0].scores.shape == expected.shape
        np.testing.assert_allclose(result[0].scores, expected, rtol=1e-12, atol=1e-15)


def test_attattr_is_complete_and_its_heads_sum_to_its_scores(classifier):
    result = attnlab.explain(classifier, ["a good film", "un plot"], target="LABEL_2")
    for example in result:
        assert example.output == "probability of LABEL_2"
        assert example.completeness <= TOLERANCE
        np.testing.assert_allclose(example.heads.sum(axis=1), example.scores, atol=1e-6)


def test_words_sum_the_pieces_scores(classifier):
    result = attnlab.explain(classifier, "a good , unsentimental film")
    example = result[0]
    assert example.words == ["[CLS]", "a", "good", ",", "unsentimental", "film", "[SEP]"]
    words = result.word_scores(0)
    # attattr's scores explain F: a word pair's score is the sum over its pieces' pairs, so
    # that every layer keeps its total (completeness holds over words too)
    np.testing.assert_allclose(words.sum(axis=(1, 2)), example.scores.sum(axis=(1, 2)),
                               rtol=1e-12)
    np.testing.assert_allclose(words[:, 4, 5], example.scores[:, 4:8, 8].sum(axis=1),
                               rtol=1e-12)
    np.testing.assert_allclose(words[:, 1, 4], example.scores[:, 1, 4:8].sum(axis=1),
                               rtol=1e-12)
    frame = result.to_frame(words=True)
    assert len(frame) == 3 * 7 * 7 and set(frame["query_word"]) == set(example.words)
    # attention's rows stay normalised: a query word's rows are averaged
    rows = attnlab.explain(classifier, "a good , unsentimental film", method="attention")
    np.testing.assert_allclose(rows.word_scores(0).sum(axis=2), 1.0, rtol=1e-6)


def test_save_and_load_give_the_same_explanation(classifier, tmp_path):
    result = attnlab.explain(classifier, ["a good film", "un plot"], layers=[1, 2])
    result.save(tmp_path / "saved")
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == [
        "explanation.json", "tensors.safetensors"]
    loaded = Explanation.load(tmp_path / "saved")
    assert loaded.layers == [1, 2] and loaded.method == "attattr"
    for before, after in zip(result, loaded, strict=True):
        for name, value in vars(before).items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(getattr(after, name), value)
            else:
                assert getattr(after, name) == value, name
    assert loaded.to_html() == result.to_html()
    # a notebook shows the page in a frame of its own, its script intact
    frame = re.fullmatch(r'<iframe srcdoc="([^"]*)" .*</iframe>', loaded._repr_html_(), re.S)
    assert html.unescape(frame.group(1)) == result.to_html()
    assert result.top(2).groupby(["example", "layer"]).size().tolist() == [2] * 4


def test_layers_keep_the_layers_of_the_whole_attribution(classifier):
    # the engine attributes layers 1 and 2 alone: the same numbers as when it does all three
    whole = attnlab.explain(classifier, "a good film")
    part = attnlab.explain(classifier, "a good film", layers=[1, 2])
    np.testing.assert_allclose(part[0].scores, whole[0].scores[1:], rtol=1e-12, atol=1e-15)
    assert set(part.to_frame()["layer"]) == {1, 2}
    with pytest.raises(AttnlabError, match=r"layers: \[3\] are not layers of 0..2"):
        attnlab.explain(classifier, "a good film", layers=[3])


def test_a_one_token_string_target_is_the_token_id_target(decoder):
    model, tokenizer = decoder
    (token,) = tokenizer("w4", add_special_tokens=False)["input_ids"]
    by_string = attnlab.explain(decoder, "w1 w2 w3", target="w4")[0]
    by_id = attnlab.explain(decoder, "w1 w2 w3", target=token)[0]
    np.testing.assert_array_equal(by_string.scores, by_id.scores)
    assert by_string.output == by_id.output == "probability of 'w4'"
    assert by_string.f == by_id.f


def test_a_contrast_is_the_difference_of_the_two_attributions(decoder):
    both = attnlab.explain(decoder, "w1 w2 w3", target="w4", contrast="w5")[0]
    first = attnlab.explain(decoder, "w1 w2 w3", target="w4")[0]
    second = attnlab.explain(decoder, "w1 w2 w3", target="w5")[0]
    # each term is its own engine call: the difference to float32 rounding of the scores
    np.testing.assert_allclose(both.scores, first.scores - second.scores, rtol=1e-9,
                               atol=1e-12)
    assert both.f == pytest.approx(first.f - second.f, rel=1e-12)
    assert both.output == "probability of 'w4' minus that of 'w5'"
    # the residuals of the two terms add: within twice the tolerance
    assert both.completeness <= 2 * TOLERANCE


def test_a_continuation_is_explained_through_its_log_probability(decoder):
    model, tokenizer = decoder
    result = attnlab.explain(decoder, "w1 w2 w3", target="w4 w5")[0]
    assert result.tokens == ["w1", "w2", "w3", "w4"]  # the last token is read, not read from
    assert result.output == "log-probability of 'w4 w5'"
    ids = tokenizer("w1 w2 w3 w4 w5", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
    expected = float(logp[2, ids[0, 3]] + logp[3, ids[0, 4]])
    assert result.f == pytest.approx(expected, rel=1e-5)  # float32 model, float64 sum
    assert result.completeness <= 2 * TOLERANCE
    with pytest.raises(AttnlabError, match="method: occlusion explains one token's "
                       "probability; a target or contrast of several tokens"):
        attnlab.explain(decoder, "w1 w2 w3", target="w4 w5", method="occlusion")


def test_the_memory_refusal_is_one_line_before_any_compute(classifier, monkeypatch, capsys):
    def nothing_heavy(*args, **kwargs):
        raise AssertionError("the model ran")

    monkeypatch.setattr("attnlab.explanation.free_bytes", lambda device: 2**20)  # 1 MiB free
    monkeypatch.setattr("attnlab.engine.capture.capture", nothing_heavy)
    monkeypatch.setattr("attnlab.engine.attribution.attribute", nothing_heavy)
    with pytest.raises(AttnlabError) as refused:
        attnlab.explain(classifier, "a good film " * 20)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("memory: 62 tokens take about ")
    assert "more than 70% of the 1.0 MiB free on cpu: keep fewer layers (layers=, --layers), " \
           "give a shorter input, or use a machine with more memory" in message
    assert capsys.readouterr().err.startswith("memory: about ")
    # forward-only methods hold less than one attribution row: not refused by its estimate
    monkeypatch.undo()
    monkeypatch.setattr("attnlab.explanation.free_bytes", lambda device: 2**20)
    assert len(attnlab.explain(classifier, "a good film", method="rollout")) == 1


def test_fewer_layers_fit_where_all_do_not(classifier, monkeypatch):
    # free memory between the estimates of all three layers and of the last alone: the first
    # refused, the second runs (a pass from layer 2 runs one layer, the engine holds one)
    model, _ = classifier
    shape, load = EncoderShape.of(model.config), rule_load(engine_options(
        section_defaults("attribution")))
    every = attribution_row_bytes(shape, 62, *load)
    last = attribution_row_bytes(shape, 62, *load, kept=1, lowest=2)
    assert last < every
    monkeypatch.setattr("attnlab.explanation.free_bytes",
                        lambda device: int((every + last) / 2 / MEMORY_SHARE))
    with pytest.raises(AttnlabError, match="memory: 62 tokens take about"):
        attnlab.explain(classifier, "a good film " * 20)
    assert attnlab.explain(classifier, "a good film " * 20, layers=[2])[0].scores.shape == (
        1, 62, 62)


def test_mistakes_are_one_line(classifier, decoder):
    for call, message in [
        (lambda: attnlab.explain(classifier, "a", method="lrp"), "method: 'lrp' is none of"),
        (lambda: attnlab.explain(classifier, "a", target="LABEL_7"),
         "target: 'LABEL_7' is neither a class index 0..2 nor a class name (LABEL_0, "),
        (lambda: attnlab.explain(classifier, ["a", " "]), "texts: give one non-empty"),
        (lambda: attnlab.explain(decoder, "w1", pair="w2"), "pair: a decoder language model"),
        (lambda: attnlab.explain(decoder, "w1 w2", target="w3 w4", contrast="w5 w6"),
         "contrast: the target and the contrast differ"),
    ]:
        with pytest.raises(AttnlabError) as refused:
            call()
        assert str(refused.value).startswith(message), refused.value


def same_line(got: str, shown: str) -> bool:
    """Whether a printed line is the page's: its words equal, its numbers within 2 % (or 1e-5:
    the last digit of a tiny score, the completeness residual), which a machine's float
    rounding stays within."""
    got_words, shown_words = got.split(), shown.split()
    if len(got_words) != len(shown_words):
        return False
    for a, b in zip(got_words, shown_words, strict=True):
        a, b = a.strip("[](),;'"), b.strip("[](),;'")
        try:
            if float(a) != pytest.approx(float(b), rel=0.02, abs=1e-5):
                return False
        except ValueError:
            if a != b:
                return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(bool(packages.missing_packages({"model": {"pretrained": MINILM}})),
                    reason=f"needs the package {packages.MINILM.requirement}: "
                    f"{packages.install_hint(packages.MINILM)}")
def test_the_library_page_prints_what_it_shows(tmp_path):
    """docs/library.md's walk-through, run as a reader runs it (offline, from another folder):
    it prints the page's output block."""
    page = LIBRARY_PAGE.read_text()
    code = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    shown = re.search(r"```text\n(.*?)```", page, re.S).group(1).splitlines()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert len(printed) == len(shown)
    for got, line in zip(printed, shown, strict=True):
        assert same_line(got, line), f"printed {got!r}, the page shows {line!r}"
    assert (tmp_path / "explained" / "tensors.safetensors").is_file()
    assert "<title>attnlab explain" in (tmp_path / "explained.html").read_text()


@pytest.mark.slow
@pytest.mark.skipif(bool(packages.missing_packages({"model": {"pretrained": MINILM}})),
                    reason=f"needs the package {packages.MINILM.requirement}: "
                    f"{packages.install_hint(packages.MINILM)}")
def test_the_readme_example_runs_as_written(tmp_path):
    """The README's Python example, offline, from another folder: the completeness it prints
    is within the tolerance, and what it saves loads back."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.splitlines()[-1]) <= 1e-3  # the adaptive rule's tolerance
    loaded = Explanation.load(tmp_path / "explained")
    assert loaded.method == "attattr" and [e.text for e in loaded.examples] == [
        "a gripping film", "dull and far too long"]


@needs_browser
def test_the_page_of_another_method_draws_its_scores_beside_the_attention(classifier,
                                                                         tmp_path):
    result = attnlab.explain(classifier, "a good film", method="rollout", layers=[1, 2])
    path = tmp_path / "page.html"
    path.write_text(result.to_html())
    dom = drawn(path, "layer=2")
    assert 'id="map-attention-title">attention, layer 2, ' in dom
    assert 'id="map-attribution' not in dom  # rollout has no attribution per head
    found = re.findall(r'class="cell" data-i="(\d+)" data-j="(\d+)" data-v="([^"]+)"',
                       svg(dom, "method-rollout"))
    drawn_scores = np.zeros((5, 5))
    for i, j, value in found:
        drawn_scores[int(i), int(j)] = float(value)
    # the page's float16, relative to the layer's largest value
    np.testing.assert_allclose(drawn_scores, result[0].scores[1], rtol=2.0**-10, atol=1e-7)
    # a layer not kept is drawn empty
    empty = [float(v) for v in re.findall(r'class="cell" data-i="\d+" data-j="\d+" '
                                              r'data-v="([^"]+)"',
                                              svg(drawn(path, "layer=0"), "method-rollout"))]
    assert len(empty) == 25 and not any(empty)
