"""Model FLOPs of a decoder, counted from its config: the work a point did, whatever ran it.

Conventions (those of PaLM's MFU, Chowdhery et al. 2022, appendix B, and torch's
FlopCounterMode): a multiply-add is 2 FLOPs; only matmuls count (norms, softmax, activations
are noise at these shapes); attention is counted with its causal half, 2*s^2*heads*head_dim per
layer and sequence (FlopCounterMode counts the full s^2, masked half included); a backward pass
is twice its forward for what needs weight gradients, once (input gradients only) for frozen
weights, and attention recomputation (a fused kernel's, or activation checkpointing) is not
model work. Frozen layers below the lowest trainable weight need no input gradient either;
the formula counts them anyway (at most one layer's frozen linears in a LoRA run: under 1/L).
"""

from collections.abc import Mapping
from typing import Any


def linear_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """A decoder layer's linears as (in, out), Llama's names."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim, inter = config.get("head_dim") or hidden // heads, config["intermediate_size"]
    query, key_value = heads * head_dim, (config.get("num_key_value_heads") or heads) * head_dim
    shapes = {"q_proj": (hidden, query), "k_proj": (hidden, key_value)}
    shapes |= {"v_proj": (hidden, key_value), "o_proj": (query, hidden)}
    shapes |= {"gate_proj": (hidden, inter), "up_proj": (hidden, inter)}
    return shapes | {"down_proj": (inter, hidden)}


def linear_forward(config: Mapping[str, Any]) -> int:
    """Forward FLOPs per token of every linear: the decoder layers' and the LM head."""
    per_layer = sum(i * o for i, o in linear_shapes(config).values())
    head = config["hidden_size"] * config["vocab_size"]
    return 2 * (config["num_hidden_layers"] * per_layer + head)


def attention_forward(config: Mapping[str, Any], squared_lengths: int) -> int:
    """Forward attention FLOPs, causal half, over sequences whose squared lengths sum to this."""
    query = linear_shapes(config)["q_proj"][1]  # heads x head_dim
    return 2 * config["num_hidden_layers"] * query * squared_lengths


def forward_per_token(config: Mapping[str, Any], seq_len: int) -> float:
    """Forward FLOPs per token of sequences of `seq_len` tokens."""
    return linear_forward(config) + attention_forward(config, seq_len * seq_len) / seq_len


def training_per_token(
    config: Mapping[str, Any], seq_len: int, lora_rank: int = 0, targets: tuple[str, ...] = ()
) -> float:
    """Forward and backward FLOPs per token: LoRA's (frozen base: input gradients only; adapters
    A: in -> r, B: r -> out, trained on `targets`) where `lora_rank`, else every weight trained."""
    attention = 3 * attention_forward(config, seq_len * seq_len) / seq_len
    if not lora_rank:
        return 3 * linear_forward(config) + attention
    shapes, layers = linear_shapes(config), config["num_hidden_layers"]
    adapters = 2 * layers * sum(lora_rank * sum(shapes[n]) for n in targets if n in shapes)
    return 2 * linear_forward(config) + 3 * adapters + attention
