"""The PTQ recipes (the config schema's `ptq.recipes`): the function that applies each (named, so
that parsing the workflow imports no torch), the dtype it computes in and its label in the
paper's Table 1 (the report's)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    name: str
    compute_dtype: str | None  # None: the study's evaluation dtype (nvidia casts per matmul)
    label: str  # as the paper labels it
    function: str  # "module:function" applying it: (job, model, bits) -> RecipeResult
    widths: tuple[int, ...] = ()  # the bit widths it stores as such; (): any (simulated, or a
    # rule: fp8 keeps 16 in BF16 and stores every lower width in FP8; bf16 ignores the bits)
    options: tuple[str, ...] = ()  # the ptq keys only it reads: its jobs' flags, its digests
    simulated: bool = False  # weights kept FP32: Table 1 heads its columns by bit list alone
    habana: bool = False  # needs Habana's stack (INC on an HPU); elsewhere per fp8_without_hpu


QUANTIZE = "accelstudy.ptq.quantize"
FP8_OPTIONS = ("fp8_format", "fp8_without_hpu")
RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        Recipe("fake", None, "simulated", f"{QUANTIZE}:fake", simulated=True),  # in FP32
        # float16 on a GPU computes as the paper's A100
        Recipe("nvidia", None, "FP16/INT8", f"{QUANTIZE}:nvidia", (4, 8, 16)),  # weights.py's
        # Gaudi's: INC FP8, the rest BF16
        Recipe("fp8", "bfloat16", "BF16/FP8", f"{QUANTIZE}:fp8", (), FP8_OPTIONS, habana=True),
        Recipe("bf16", "bfloat16", "BF16", f"{QUANTIZE}:bf16"),  # the CPU's whole-model BF16
    )
}
