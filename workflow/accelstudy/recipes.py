"""The PTQ recipes (the config schema's `ptq.recipes`): the accelstudy.ptq.quantize function that
applies each, the dtype it computes in and its label in the paper's Table 1 (the report's)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    name: str  # also the accelstudy.ptq.quantize function that applies it
    compute_dtype: str | None  # None: the study's evaluation dtype (nvidia casts per matmul)
    label: str  # as the paper labels it


RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        Recipe("fake", None, "simulated"),  # quantize-dequantize in FP32
        Recipe("nvidia", None, "FP16/INT8"),  # float16 on a GPU computes as the paper's A100
        Recipe("fp8", "bfloat16", "BF16/FP8"),  # Gaudi's: INC FP8, the rest BF16
        Recipe("bf16", "bfloat16", "BF16"),  # the CPU's whole-model BF16
    )
}
