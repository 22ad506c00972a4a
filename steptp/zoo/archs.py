"""Whole architectures from ``transformers``, built from config objects with random weights
(nothing is downloaded: no pretrained weights, no hub configs).

Each architecture has a ``tiny`` size (1-2 layers, hidden 32-64, short sequences or 32x32 images:
exports and imports in seconds, for tests) and a ``default`` size whose *layer shapes* match the
real model named in its description (hidden size, heads, FFN width, vocabulary, image/audio
size) with fewer layers than the real model: every layer of a stack yields the same kernels.

The module ``build`` returns wraps the ``transformers`` model so that it takes plain tensors
positionally and returns one tensor (logits or the last hidden state): export needs no keyword
arguments and the output is a single array. Decoders are built with ``use_cache=False`` (a
``DynamicCache`` in the outputs breaks ``torch.export``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from steptp.zoo._base import Workload, randint, randn, supported_dtypes

WORKLOADS: list[Workload] = []


class ArchModule(nn.Module):
    """``model(**{names[i]: args[i]})`` and the first output (``return_dict=False``)."""

    def __init__(self, model: nn.Module, input_names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.input_names = tuple(input_names)

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        kwargs = dict(zip(self.input_names, args))
        out = self.model(**kwargs, return_dict=False)
        return out[0] if isinstance(out, (tuple, list)) else out


def _arch(name: str, family: str, tiny: dict[str, Any], default: dict[str, Any],
          description: str, dtypes: tuple[str, ...] | None = None):
    def deco(factory: Callable):
        WORKLOADS.append(Workload(name=name, suite="arch", family=family, factory=factory,
                                  sizes={"tiny": tiny, "default": default},
                                  dtypes=dtypes or supported_dtypes(name),
                                  description=description,
                                  meta={"source": "transformers", "weights": "random"}))
        return factory
    return deco


def _quiet():
    """transformers logs config warnings (e.g. tiny vocabularies); keep them out of the way."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except Exception:  # noqa: BLE001
        pass


def _text_inputs(p: dict[str, Any], g: torch.Generator) -> tuple[torch.Tensor]:
    # ids >= 3 so that they never hit the pad/bos/eos ids set in the configs
    return (randint(g, p["vocab"], p["batch"], p["seq"], low=3),)


def _special_ids(vocab: int) -> dict[str, int]:
    return {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2} if vocab > 2 else {}


# ============================================================================ encoders (text)
@_arch("bert", "encoder",
       {"vocab": 128, "hidden": 32, "layers": 2, "heads": 2, "ffn": 64, "batch": 1, "seq": 16},
       {"vocab": 30522, "hidden": 768, "layers": 2, "heads": 12, "ffn": 3072, "batch": 1,
        "seq": 128},
       "BERT-base encoder (BertModel, no pooler); default: bert-base-uncased layer shapes, "
       "2 of 12 layers.")
def _bert(p, g):
    _quiet()
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=p["vocab"], hidden_size=p["hidden"],
                     num_hidden_layers=p["layers"], num_attention_heads=p["heads"],
                     intermediate_size=p["ffn"], max_position_embeddings=max(512, p["seq"]),
                     **_special_ids(p["vocab"]))
    return ArchModule(BertModel(cfg, add_pooling_layer=False), ("input_ids",)), \
        _text_inputs(p, g)


@_arch("t5_encoder", "encoder",
       {"vocab": 128, "hidden": 32, "kv": 8, "layers": 2, "heads": 4, "ffn": 64, "batch": 1,
        "seq": 16},
       {"vocab": 32128, "hidden": 768, "kv": 64, "layers": 2, "heads": 12, "ffn": 3072,
        "batch": 1, "seq": 128},
       "T5 encoder (T5EncoderModel: RMS-style T5 LayerNorm, relative position bias, ReLU FFN); "
       "default: t5-base layer shapes, 2 of 12 layers.")
def _t5(p, g):
    _quiet()
    from transformers import T5Config, T5EncoderModel

    cfg = T5Config(vocab_size=p["vocab"], d_model=p["hidden"], d_kv=p["kv"], d_ff=p["ffn"],
                   num_layers=p["layers"], num_heads=p["heads"], feed_forward_proj="relu",
                   use_cache=False, is_encoder_decoder=False, pad_token_id=0, eos_token_id=1,
                   decoder_start_token_id=0)
    return ArchModule(T5EncoderModel(cfg), ("input_ids",)), _text_inputs(p, g)


# ============================================================================ decoders (text)
@_arch("gpt2", "decoder",
       {"vocab": 128, "hidden": 32, "layers": 2, "heads": 2, "batch": 1, "seq": 16},
       {"vocab": 50257, "hidden": 768, "layers": 2, "heads": 12, "batch": 1, "seq": 128},
       "GPT-2 with LM head (GPT2LMHeadModel); default: gpt2 (124M) layer shapes, 2 of 12 "
       "layers.")
def _gpt2(p, g):
    _quiet()
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=p["vocab"], n_positions=max(1024, p["seq"]), n_embd=p["hidden"],
                     n_layer=p["layers"], n_head=p["heads"], use_cache=False,
                     bos_token_id=1, eos_token_id=2)
    return ArchModule(GPT2LMHeadModel(cfg), ("input_ids", "attention_mask")), \
        _decoder_inputs(p, g)


def _decoder_inputs(p, g) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and an all-ones attention mask. Without a mask (and without a cache)
    transformers' ``create_causal_mask`` looks for packed sequences with a ``cumsum`` over a
    bool tensor, which TVM 0.27 legalizes to a bool-typed scan that LLVM cannot compile."""
    (ids,) = _text_inputs(p, g)
    return ids, torch.ones_like(ids)


def _llama_like(config_cls, model_cls, p, g, **extra):
    cfg = config_cls(vocab_size=p["vocab"], hidden_size=p["hidden"],
                     intermediate_size=p["ffn"], num_hidden_layers=p["layers"],
                     num_attention_heads=p["heads"], num_key_value_heads=p["kv_heads"],
                     max_position_embeddings=max(2048, p["seq"]), use_cache=False,
                     tie_word_embeddings=p.get("tie", False), **_special_ids(p["vocab"]), **extra)
    return ArchModule(model_cls(cfg), ("input_ids", "attention_mask")), _decoder_inputs(p, g)


@_arch("llama", "decoder",
       {"vocab": 128, "hidden": 64, "ffn": 128, "layers": 2, "heads": 4, "kv_heads": 2,
        "batch": 1, "seq": 16},
       {"vocab": 32000, "hidden": 2048, "ffn": 5632, "layers": 2, "heads": 32, "kv_heads": 4,
        "batch": 1, "seq": 128},
       "Llama with LM head (LlamaForCausalLM: RMSNorm, RoPE, GQA, SwiGLU); default: "
       "TinyLlama-1.1B layer shapes, 2 of 22 layers.")
def _llama(p, g):
    _quiet()
    from transformers import LlamaConfig, LlamaForCausalLM

    return _llama_like(LlamaConfig, LlamaForCausalLM, p, g)


@_arch("mistral", "decoder",
       {"vocab": 128, "hidden": 64, "ffn": 128, "layers": 2, "heads": 4, "kv_heads": 1,
        "batch": 1, "seq": 16},
       {"vocab": 32000, "hidden": 4096, "ffn": 14336, "layers": 1, "heads": 32, "kv_heads": 8,
        "batch": 1, "seq": 128},
       "Mistral with LM head (MistralForCausalLM); default: Mistral-7B layer shapes, 1 of 32 "
       "layers (~480M parameters, ~1.9 GB in float32).")
def _mistral(p, g):
    _quiet()
    from transformers import MistralConfig, MistralForCausalLM

    return _llama_like(MistralConfig, MistralForCausalLM, p, g, sliding_window=4096)


@_arch("qwen2", "decoder",
       {"vocab": 128, "hidden": 64, "ffn": 128, "layers": 2, "heads": 4, "kv_heads": 2,
        "batch": 1, "seq": 16, "tie": True},
       {"vocab": 151936, "hidden": 896, "ffn": 4864, "layers": 2, "heads": 14, "kv_heads": 2,
        "batch": 1, "seq": 128, "tie": True},
       "Qwen2 with LM head (Qwen2ForCausalLM: q/k/v biases, tied embeddings); default: "
       "Qwen2-0.5B layer shapes, 2 of 24 layers.")
def _qwen2(p, g):
    _quiet()
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return _llama_like(Qwen2Config, Qwen2ForCausalLM, p, g)


# ============================================================================ vision
def _image_inputs(p, g):
    return (randn(g, p["batch"], p.get("channels", 3), p["image"], p["image"]),)


@_arch("vit", "vision",
       {"hidden": 32, "layers": 2, "heads": 2, "ffn": 64, "image": 32, "patch": 8, "batch": 1},
       {"hidden": 768, "layers": 2, "heads": 12, "ffn": 3072, "image": 224, "patch": 16,
        "batch": 1},
       "Vision Transformer (ViTModel, no pooler); default: ViT-B/16 at 224x224, 2 of 12 layers.")
def _vit(p, g):
    _quiet()
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(hidden_size=p["hidden"], num_hidden_layers=p["layers"],
                    num_attention_heads=p["heads"], intermediate_size=p["ffn"],
                    image_size=p["image"], patch_size=p["patch"], num_channels=3)
    return ArchModule(ViTModel(cfg, add_pooling_layer=False), ("pixel_values",)), \
        _image_inputs(p, g)


@_arch("resnet", "vision",
       {"embed": 8, "hidden": [8, 16], "depths": [1, 1], "layer_type": "basic", "labels": 10,
        "image": 32, "batch": 1},
       {"embed": 64, "hidden": [256, 512, 1024, 2048], "depths": [1, 1, 1, 1],
        "layer_type": "bottleneck", "labels": 1000, "image": 224, "batch": 1},
       "ResNet with classifier (ResNetForImageClassification); default: ResNet-50 stage "
       "shapes at 224x224, one bottleneck block per stage (of 3/4/6/3).")
def _resnet(p, g):
    _quiet()
    from transformers import ResNetConfig, ResNetForImageClassification

    cfg = ResNetConfig(num_channels=3, embedding_size=p["embed"], hidden_sizes=list(p["hidden"]),
                       depths=list(p["depths"]), layer_type=p["layer_type"],
                       num_labels=p["labels"])
    return ArchModule(ResNetForImageClassification(cfg), ("pixel_values",)), _image_inputs(p, g)


@_arch("convnext", "vision",
       {"hidden": [8, 16], "depths": [1, 1], "labels": 10, "image": 32, "batch": 1},
       {"hidden": [96, 192, 384, 768], "depths": [1, 1, 1, 1], "labels": 1000, "image": 224,
        "batch": 1},
       "ConvNeXt with classifier (ConvNextForImageClassification); default: ConvNeXt-T stage "
       "shapes at 224x224, one block per stage (of 3/3/9/3).")
def _convnext(p, g):
    _quiet()
    from transformers import ConvNextConfig, ConvNextForImageClassification

    cfg = ConvNextConfig(num_channels=3, patch_size=4, hidden_sizes=list(p["hidden"]),
                         depths=list(p["depths"]), num_stages=len(p["hidden"]),
                         num_labels=p["labels"])
    return ArchModule(ConvNextForImageClassification(cfg), ("pixel_values",)), \
        _image_inputs(p, g)


# ============================================================================ audio
@_arch("whisper_encoder", "audio",
       {"hidden": 32, "layers": 2, "heads": 2, "ffn": 64, "mels": 16, "positions": 16,
        "batch": 1},
       {"hidden": 512, "layers": 2, "heads": 8, "ffn": 2048, "mels": 80, "positions": 1500,
        "batch": 1},
       "Whisper audio encoder (two Conv1d + GELU stem, transformer layers); default: "
       "whisper-base encoder shapes (80 mel bins x 3000 frames), 2 of 6 layers.")
def _whisper(p, g):
    _quiet()
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = WhisperConfig(d_model=p["hidden"], encoder_layers=p["layers"],
                        encoder_attention_heads=p["heads"], encoder_ffn_dim=p["ffn"],
                        decoder_layers=1, decoder_attention_heads=p["heads"],
                        decoder_ffn_dim=p["ffn"], num_mel_bins=p["mels"],
                        max_source_positions=p["positions"], vocab_size=128,
                        use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        decoder_start_token_id=1)
    frames = 2 * p["positions"]  # the encoder's two convs halve the frames once (stride 2)
    return ArchModule(WhisperEncoder(cfg), ("input_features",)), \
        (randn(g, p["batch"], p["mels"], frames),)
