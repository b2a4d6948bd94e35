"""`attnlab explain` through the real console script: on a tiny classifier the test builds and on
the packaged MiniLM (as a hub id, offline), exit status 0, the page written, the attribution on
the page the engine's own and complete; its mistakes in one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import MINILM
from test_decoders import _word_tokenizer as word_tokenizer
from test_explorer import embedded, stored
from tiny_models import tiny_causal_lm, tiny_classifier

from attnlab import cli
from attnlab.data import packages
from attnlab.data.tokenization import build_tokenizer
from attnlab.engine import models
from attnlab.engine.attribution import attribute

SCRIPT = Path(sys.executable).with_name("attnlab")  # the console script of the environment
TOLERANCE = 1e-3  # attribution.tolerance's default, the completeness budget per layer


def explain(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(cache)}
    return subprocess.run([str(SCRIPT), "explain", *args], capture_output=True, text=True,
                          env=env, timeout=600)


def residual(stdout: str) -> float:
    return float(re.search(r"completeness: .* <= (\S+) in every layer", stdout).group(1))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny random BERT classifier (3 layers, 4 heads, 3 classes) and a word-level tokenizer
    over w0..w29, saved as save_pretrained writes them."""
    folder = tmp_path_factory.mktemp("tiny") / "model"
    tiny_classifier("bert").save_pretrained(folder)
    build_tokenizer([f"w{k}" for k in range(30)]).save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_explain_a_pair_on_a_tiny_model_writes_the_engines_attribution(tiny, tmp_path):
    page = tmp_path / "page.html"
    done = explain(str(tiny), "w1 w2 w3 w4", "--pair", "w5 w6", "--target", "2", "--out",
                   str(page), cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert residual(done.stdout) <= TOLERANCE
    assert len(re.findall(r"^  layer \d: ", done.stdout, re.M)) == 3
    # the page: the engine's attribution of the same input and class, to float16 precision
    model, tokenizer = models.load_classifier(tiny)
    inputs = dict(tokenizer("w1 w2 w3 w4", "w5 w6", return_tensors="pt"))
    expected = attribute(model, inputs, torch.tensor([2])).attr[0].double().numpy()
    (example,) = embedded(page.read_text())["examples"]
    assert example["tokens"] == ["[CLS]", "w1", "w2", "w3", "w4", "[SEP]", "w5", "w6", "[SEP]"]
    assert example["gold"] is None and list(example["maps"]) == ["attention", "attribution"]
    np.testing.assert_allclose(stored(example["maps"]["attribution"]),
                               expected.reshape(3, -1), rtol=2.0**-11, atol=1e-7)


@pytest.mark.slow
@pytest.mark.skipif(bool(packages.missing_packages({"model": {"pretrained": MINILM}})),
                    reason=f"needs the package {packages.MINILM.requirement}: "
                    f"{packages.install_hint(packages.MINILM)}")
def test_explain_a_sentence_on_the_packaged_minilm_offline(tmp_path):
    page = tmp_path / "minilm.html"
    done = explain(MINILM, "a gripping film", "--out", str(page), cache=tmp_path)
    assert done.returncode == 0, done.stderr
    # fetched as rule download_model fetches it: the hub fails offline, the package serves it
    assert (tmp_path / "attnlab" / "models" / MINILM / "config.json").is_file()
    assert "has no trained classification head" in done.stderr
    assert residual(done.stdout) <= TOLERANCE
    assert len(re.findall(r"^  layer \d: ", done.stdout, re.M)) == 6
    (example,) = embedded(page.read_text())["examples"]
    assert example["tokens"] == ["[CLS]", "a", "gripping", "film", "[SEP]"]
    assert example["maps"]["attribution"]["heads"] == 12


def test_explain_the_next_token_of_a_tiny_decoder(tmp_path, capsys):
    """A decoder language model (GPT-2): the prompt's next token is attributed, in-process."""
    folder = tmp_path / "gpt2"
    tiny_causal_lm("gpt2", dtype=torch.float32).save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    page = tmp_path / "page.html"
    cli.main(["explain", str(folder), "w1 w2 w3 w1 w2", "--target", "3", "--out", str(page)])
    out = capsys.readouterr().out
    assert "F = probability of 'w3'" in out and residual(out) <= TOLERANCE
    assert "  layer 1: w2[4] -> " in out  # the last token reads, the causal mask keeps the rest
    (example,) = embedded(page.read_text())["examples"]
    assert example["root"] == 4 and example["maps"]["attribution"]["heads"] == 4


def test_explain_the_next_token_of_a_gguf_file(tmp_path, capsys):
    """A decoder given as its GGUF file (a tiny Llama written by the gguf package): loaded
    through the one loader, dequantized, and attributed within the tolerance."""
    pytest.importorskip("gguf", reason="pip install 'attnlab[gguf]' (make test does so)")
    from test_gguf import tiny_llama, write_gguf

    path = tmp_path / "tiny.gguf"
    write_gguf(tiny_llama(), path)
    page = tmp_path / "page.html"
    cli.main(["explain", str(path), "abab", "--out", str(page)])
    out = capsys.readouterr().out
    assert "F = probability of " in out and residual(out) <= TOLERANCE
    (example,) = embedded(page.read_text())["examples"]
    assert example["root"] == len(example["tokens"]) - 1
    assert example["maps"]["attribution"]["heads"] == 4


@pytest.mark.parametrize(("args", "message"), [
    (["model.gguf", "hi"], "model.gguf: no such GGUF file"),
    (["./nowhere", "hi"], "./nowhere: neither a checkpoint folder nor a hub id"),
    (["{tiny}", " "], "TEXT: the input is empty"),
    (["{tiny}"], "TEXT: give a text, or --file"),
    (["{tiny}", "--file", "no-such-file"], "--file: no-such-file: cannot be read"),
    (["{tiny}", "w1", "--target", "3"],
     "target: 3 is neither a class index 0..2 nor a class name (LABEL_0, LABEL_1, LABEL_2)"),
    (["{tiny}", "w1", "--target", "first"], "target: 'first' is neither"),
    (["{tiny}", "w1", "--method", "lrp"], "method: 'lrp' is none of attention, attattr"),
    (["{tiny}", "w1", "--layers", "2-1"], "--layers: '2-1' is not a layer A or a range A-B"),
    (["{tiny}", "w1 " * 600], "texts: 602 tokens, more than the model takes (512)"),
    (["{tiny}", "w1", "--top", "0"], "--top: 0 is not a positive number of interactions"),
    (["{tiny}", "w1", "--out", "no/such/folder/page.html"],
     "--out: no/such/folder/page.html: its folder does not exist"),
    (["{tiny}", "w1", "--json", "no/such/folder/out.json"],
     "--json: no/such/folder/out.json: its folder does not exist"),
])
def test_a_mistake_is_one_line(tiny, capsys, args, message):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["explain", *(arg.format(tiny=tiny) for arg in args)])
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith(f"attnlab explain: {message}") and err.count("\n") == 1, err


def test_the_help_names_every_option(capsys):
    with pytest.raises(SystemExit):
        cli.main(["explain", "--help"])
    out = capsys.readouterr().out
    for option in ("MODEL", "TEXT", "--file", "--pair", "--method", "--target", "--contrast",
                   "--layers", "--json", "--out", "--top", "--device"):
        assert option in out
    with pytest.raises(SystemExit) as stopped:
        cli.main(["explain", "a-model", "a text", "--no-such-option"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_explain_texts_of_a_file_by_another_method_writes_json(tiny, tmp_path, capsys):
    """Several texts (the command line's, then --file's), a method of the registry, a range of
    layers: the JSON holds the scores `attnlab.explain` gives."""
    import json

    import attnlab

    texts = tmp_path / "texts.txt"
    texts.write_text("w3 w4\n\nw5 w6 w7\n")
    out = tmp_path / "out.json"
    cli.main(["explain", str(tiny), "w1 w2", "--file", str(texts), "--method", "rollout",
              "--layers", "1-2", "--json", str(out), "--out", str(tmp_path / "page.html")])
    printed = capsys.readouterr().out
    assert printed.count("\ntext ") == 3 and "completeness" not in printed
    assert len(re.findall(r"^  layer [12]: ", printed, re.M)) == 6
    record = json.loads(out.read_text())
    assert record["method"] == "rollout" and record["layers"] == [1, 2]
    expected = attnlab.explain(str(tiny), "w5 w6 w7", method="rollout", layers=[1, 2])
    np.testing.assert_allclose(record["examples"][2]["scores"], expected[0].scores, rtol=1e-12)
    (example,) = embedded((tmp_path / "page.html").read_text())["examples"][:1]
    assert list(example["maps"]) == ["attention"] and list(example["methods"]) == ["rollout"]


def test_methods_lists_the_registry_and_its_families(capsys):
    from attnlab.methods.registry import METHODS

    cli.main(["methods"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [method.name for method in METHODS]
    alti = next(line for line in lines if line.startswith("alti "))
    assert "bert" in alti and "gpt2" not in alti  # an encoder's post-LN sublayer only
