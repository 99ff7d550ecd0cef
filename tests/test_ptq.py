"""PTQ pieces on a tiny random Llama: real values, exact restores, published ratios."""

from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
import torch
from accelstudy.config import validate_config
from accelstudy.errors import ConfigError
from accelstudy.ptq import SensitivityTableError
from accelstudy.ptq.clustering import assign_bits, cluster, cluster_ranks, percentile_groups
from accelstudy.ptq.prune import magnitude_threshold, pruned, targets
from accelstudy.ptq.quantize import paper_ratio, saved_bytes
from accelstudy.ptq.sensitivity import build_calibration, chunk_targets, scan
from accelstudy.ptq.weights import (
    CastLinear,
    GroupQuantLinear,
    fake_quantize,
    layer_map,
    quantize_dequantize,
    quantize_nvidia,
)

TINYLLAMA_LAYER = [
    (2048, 2048),
    (256, 2048),
    (256, 2048),
    (2048, 2048),
    (5632, 2048),
    (5632, 2048),
    (2048, 5632),
]


@pytest.fixture()
def model(tiny):
    return copy.deepcopy(tiny[0])


def test_layer_pruning_uses_one_threshold_and_restores_bit_identical(model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    target = targets(model, "layer")[1]
    count = sum(t.numel() for t in target.tensors)
    threshold = magnitude_threshold(target.tensors, 0.3)
    with pruned(target, 0.3) as zeroed:
        assert zeroed == pytest.approx(0.3 * count, abs=2)
        for tensor in target.tensors:  # one threshold across all seven projections
            assert (tensor[tensor != 0].abs() >= threshold).all()
        assert not torch.equal(
            model.state_dict()["model.layers.1.mlp.up_proj.weight"],
            before["model.layers.1.mlp.up_proj.weight"],
        )
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_per_tensor_variant_prunes_each_tensor_and_norms(model):
    target = targets(model, "layer-per-tensor")[0]
    assert len(target.tensors) == 7 + 2  # seven projections + two RMSNorm weights
    with pruned(target, 0.5):
        for tensor in target.tensors[:7]:  # norm weights start at 1.0: nothing is below
            assert (tensor == 0).float().mean() == pytest.approx(0.5, abs=0.02)


@pytest.mark.parametrize(("family", "count"), [("mlp", 3), ("attn", 4), ("all", 7)])
def test_submodule_targets_by_family(model, family, count):
    found = targets(model, "submodule", family)
    assert len(found) == count * model.config.num_hidden_layers
    assert all(t.name.startswith("layer-") and len(t.tensors) == 1 for t in found)


def test_unknown_granularity_and_family(model):
    with pytest.raises(ValueError, match="unknown granularity 'block'"):
        targets(model, "block")
    with pytest.raises(ValueError, match="unknown family 'ffn'"):
        targets(model, "submodule", "ffn")


@pytest.mark.parametrize("task", ["wikitext", "hellaswag"])
def test_prefix_reuse_equals_naive_scan(model, standin, task):
    from accelstudy.models import train_tiny_tokenizer

    tokenizer = train_tiny_tokenizer(512)
    if task == "wikitext":
        settings, limit = {"block_size": 64, "batch_size": 4}, 8
    else:
        settings, limit = {"hellaswag_max_length": 2048}, 12
    calibration = build_calibration(tokenizer, task, standin[task], limit, settings)
    all_targets = targets(model, "layer")
    base_fast, fast, _ = scan(model, calibration, all_targets, 0.3, prefix_reuse=True)
    base_slow, slow, _ = scan(model, calibration, all_targets, 0.3, prefix_reuse=False)
    assert base_fast == pytest.approx(base_slow, rel=1e-5)
    for a, b in zip(fast, slow, strict=True):
        assert a.metric == pytest.approx(b.metric, rel=1e-5)
        if task == "wikitext":
            assert a.score == pytest.approx(a.metric - base_fast)
        else:
            assert a.score == pytest.approx(base_fast - a.metric)


def test_percentile_groups_remainder():
    assert percentile_groups(22, 3, "last") == [7, 7, 8]
    assert percentile_groups(22, 3, "first") == [8, 7, 7]
    with pytest.raises(ValueError, match="more clusters"):
        percentile_groups(2, 3)


def test_percentile_assigns_most_sensitive_the_first_bits():
    names = [f"layer-{i:02d}" for i in range(7)]
    scores = [0.1, 5.0, -0.2, 3.0, 0.0, 2.0, 1.0]
    bits = assign_bits(dict(zip(names, scores, strict=True)), [16, 8, 4], "percentile")
    # descending: 5.0, 3.0 | 2.0, 1.0 | 0.1, 0.0, -0.2 (the leftover goes last)
    assert bits == {
        "layer-01": 16,
        "layer-03": 16,
        "layer-05": 8,
        "layer-06": 8,
        "layer-00": 4,
        "layer-04": 4,
        "layer-02": 4,
    }


def test_kmeans_ranks_by_cluster_mean_and_median_split():
    scores = [10.0, 10.2, 5.0, 5.1, 0.0, 0.1]
    assert cluster_ranks(scores, 3, "kmeans") == [0, 0, 1, 1, 2, 2]
    assert cluster_ranks(scores, 2, "median") == [0, 0, 1, 0, 1, 1]  # median 5.05


def test_symmetric_fake_quant_values():
    weight = torch.tensor([[1.0, -0.6, 0.25, 0.1]])
    # scale = 1/7 for 4 bits: round(w*7)/7
    expected = torch.round(weight * 7) / 7
    assert torch.allclose(quantize_dequantize(weight, 4, group_size=4), expected)
    assert torch.allclose(quantize_dequantize(weight, 16, group_size=4), weight, atol=1e-4)


def test_fake_quant_pads_groups_and_asymmetric_range():
    weight = torch.randn(3, 130)
    deq = quantize_dequantize(weight, 8, group_size=128)
    assert deq.shape == weight.shape
    assert (deq - weight).abs().max() <= weight.abs().max() / 127
    asym = quantize_dequantize(weight, 3, group_size=128, symmetric=False)
    assert len(torch.unique(asym[0, :128])) <= 8
    with pytest.raises(ValueError, match=r"bits must be in 2\.\.16"):
        quantize_dequantize(weight, 1)


def test_fake_quantize_touches_decoder_linears_only(model):
    head = model.lm_head.weight.clone()
    changed = fake_quantize(
        model, layer_map({i: 4 for i in range(model.config.num_hidden_layers)}, model), 32
    )
    assert changed == 7 * model.config.num_hidden_layers
    assert torch.equal(model.lm_head.weight, head)
    weight = model.model.layers[0].mlp.up_proj.weight
    assert len(torch.unique(weight[0, :32])) <= 16


@pytest.mark.parametrize("bits", [8, 4])
def test_real_int_quant_matches_fake_quant_and_is_smaller(bits):
    torch.manual_seed(0)
    linear = torch.nn.Linear(200, 6, bias=False)
    real = GroupQuantLinear(linear, bits, group_size=64)
    fake = quantize_dequantize(linear.weight, bits, group_size=64).detach()
    # fp16 scales may move a weight sitting on a rounding boundary by one step, no more
    step = float(linear.weight.detach().abs().max()) / (2 ** (bits - 1) - 1)
    difference = (real.dequantized(torch.float32) - fake).abs()
    assert difference.max() <= step * 1.01
    assert (difference < 1e-3).float().mean() > 0.98
    assert real.qweight.dtype == (torch.int8 if bits == 8 else torch.uint8)
    assert real.qweight.numel() == 6 * 256 // (1 if bits == 8 else 2)
    x = torch.randn(2, 200)
    assert torch.allclose(real(x), x @ fake.T, atol=2e-2)


def test_nvidia_recipe_stores_fewer_bytes(model):
    before = saved_bytes(model)
    quantize_nvidia(model, layer_map({0: 16, 1: 4}, model), group_size=32)
    layers = model.model.layers
    assert isinstance(layers[0].self_attn.q_proj, CastLinear)
    assert layers[0].self_attn.q_proj.weight.dtype == torch.float16
    assert isinstance(layers[1].mlp.down_proj, GroupQuantLinear)
    assert layers[1].mlp.down_proj.bits == 4
    assert saved_bytes(model) < before
    with torch.inference_mode():
        assert torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all()


@pytest.mark.parametrize(
    ("bits", "sizes", "expected"),
    [([16, 8, 4], [7, 7, 8], 3.472), ([8, 8, 4], [7, 7, 8], 4.797), ([8, 4, 4], [7, 7, 8], 5.928),
     ([16, 8, 4], [8, 7, 7], 3.28), ([8, 8, 4], [8, 7, 7], 4.67), ([8, 4, 4], [8, 7, 7], 5.74)],
)  # fmt: skip
def test_published_compression_ratios_for_tinyllama_shapes(bits, sizes, expected):
    layer_bits = [b for b, n in zip(bits, sizes, strict=True) for _ in range(n)]
    shapes = [(shape, b) for b in layer_bits for shape in TINYLLAMA_LAYER]
    assert round(paper_ratio(shapes, 128), 3 if expected * 1000 % 10 else 2) == expected


def test_chunks_cover_every_target_once():
    items = list(range(30))
    parts = [chunk_targets(items, 4, i) for i in range(4)]
    assert [x for p in parts for x in p] == items and [len(p) for p in parts] == [8, 8, 7, 7]


def model_dir(folder, n_layers):
    """A prepared model's folder, as far as the cluster stage reads it."""
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": n_layers}))
    return folder


def test_sensitivity_table_that_does_not_match_the_model(tmp_path):
    table = tmp_path / "s.csv"
    pd.DataFrame({"name": ["layer-00", "layer-01"], "layer": [0, 1], "score": [1.0, 2.0]}).to_csv(
        table
    )
    options = {"table": table, "bits": [8, 4], "method": "percentile", "remainder": "last"}
    with pytest.raises(SensitivityTableError, match="the model has 4 decoder layers"):
        cluster(**options, model_dir=model_dir(tmp_path / "m4", 4), out=tmp_path / "a.json")
    cluster(**options, model_dir=model_dir(tmp_path / "m2", 2), out=tmp_path / "a.json")
    assert json.loads((tmp_path / "a.json").read_text())["layer_bits"] == {"0": 4, "1": 8}


PTQ_GOOD = {
    "study": "t",
    "models": {"tiny": {"source": "tiny-random", "tiny": {"layers": 2}}},
    "tasks": {"boolq": {"source": "standin"}},
    "ptq": {"enabled": True, "tasks": ["boolq"], "bit_lists": [[8, 4]]},
}


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("bit_lists", [[16, 8, 1]], "'ptq.bit_lists.0.2': 1 is less than the minimum of 2"),
        ("bit_lists", [[32, 8]], "'ptq.bit_lists.0.0': 32 is greater than the maximum of 16"),
        ("group_size", 0, "'ptq.group_size': 0 is less than the minimum of 1"),
        ("group_size", 12.5, "'ptq.group_size': expected integer"),
        (
            "bit_lists",
            [[8, 4, 2]],
            "'ptq.bit_lists.0': 3 clusters but model 'tiny' has only 2 layers",
        ),
        ("granularity", "block", "'ptq.granularity': 'block' is not one of"),
        ("family", "ffn", "'ptq.family': 'ffn' is not one of"),
        ("tasks", ["wikitext"], "'ptq.tasks': task 'wikitext' is not configured"),
    ],
)
def test_bad_ptq_config(path, value, message):
    config = copy.deepcopy(PTQ_GOOD)
    config["ptq"][path] = value
    with pytest.raises(ConfigError) as error:
        validate_config(config)
    assert message in str(error.value)


def test_fp8_standin_stores_float8_and_stays_close(model):
    from accelstudy.ptq.weights import quantize_fp8_standin

    reference = copy.deepcopy(model)
    quantize_fp8_standin(model, {"layer-00": "bf16", "layer-01": "fp8"}, "e4m3")
    layers = model.model.layers
    assert layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
    assert layers[1].mlp.up_proj.weight.dtype == torch.float8_e4m3fn
    ids = torch.tensor([[1, 5, 9, 14, 3]])
    with torch.inference_mode():
        ours, theirs = model(ids).logits, reference(ids).logits
    assert (ours - theirs).abs().max() < 0.05 * theirs.abs().max()
    assert saved_bytes(model) < saved_bytes(reference)


def test_inc_fp8_two_pass_flow_with_a_mocked_inc(monkeypatch, model):
    """INC needs a Gaudi: mock its API at the boundary and check what we ask of it."""
    import sys
    import types

    from accelstudy.ptq.weights import FP8_BLOCKLIST, quantize_fp8_inc

    calls = []

    class FakeConfig(dict):
        def __init__(self, **kwargs):
            super().__init__(kwargs)

    fake = types.ModuleType("neural_compressor.torch.quantization")
    fake.FP8Config = FakeConfig
    fake.prepare = lambda m, c: calls.append(("prepare", c)) or m
    fake.finalize_calibration = lambda m: calls.append(("finalize", None))
    fake.convert = lambda m, c: calls.append(("convert", c)) or m
    for name in ("neural_compressor", "neural_compressor.torch"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "neural_compressor.torch.quantization", fake)

    loads = []
    result = quantize_fp8_inc(
        lambda: loads.append(1) or model,
        ["model.layers.1.mlp.up_proj"],
        "e5m2",
        lambda m: calls.append(("calibrate", None)),
        "/tmp/stats",
    )
    assert result is model and len(loads) == 2  # QUANTIZE converts a fresh model
    assert [c[0] for c in calls] == ["prepare", "calibrate", "finalize", "convert"]
    measure, quantize = calls[0][1], calls[3][1]
    assert measure["mode"] == "MEASURE" and quantize["mode"] == "QUANTIZE"
    assert measure["fp8_config"] == "E5M2" and measure["hp_dtype"] == "bf16"
    assert measure["allowlist"]["names"] == ["model.layers.1.mlp.up_proj"]
    assert quantize["blocklist"]["names"] == FP8_BLOCKLIST
    assert measure["dump_stats_path"] == quantize["dump_stats_path"]


def quantize_tiny(tmp_path, recipe, limit, **overrides):
    """The quantize stage on what `prepare_tiny` wrote, with these flags unless overridden."""
    from accelstudy.ptq.quantize import quantize

    flags = {"study": "t", "system": "cpu", "model_name": "tiny", "model_dir": tmp_path / "model"}
    flags |= {"task": "wikitext", "data": tmp_path / "test.jsonl", "data_source": "standin"}
    flags |= {"settings": {"block_size": 64, "batch_size": 4, "dtype": "float32"}, "limit": limit}
    flags |= {"assignment": tmp_path / "a.json", "recipe": recipe, "group_size": 32}
    flags |= {"symmetric": True, "out": tmp_path / "r.json", "device_kind": "cpu"}
    flags |= {"items": tmp_path / "r.items.parquet"}
    return quantize(**flags | overrides)


def prepare_tiny(tiny, tmp_path):
    """The tiny model saved as prepared, and the WikiText stand-in's test split."""
    from accelstudy.data.sources import prepare_data
    from accelstudy.models import save_prepared

    save_prepared(*tiny, tmp_path / "model")
    prepare_data("wikitext", {"source": "standin"}, "test", tmp_path / "test.jsonl")


@pytest.mark.parametrize("recipe", ["fake", "nvidia", "fp8", "bf16"])
def test_quantized_eval_writes_a_record_per_recipe(recipe, tiny, tmp_path):
    from accelstudy.records import read_record

    prepare_tiny(tiny, tmp_path)
    (tmp_path / "a.json").write_text(
        json.dumps({"bits": [16, 4], "method": "percentile", "layer_bits": {"0": 16, "1": 4}})
    )
    quantize_tiny(tmp_path, recipe, limit=3)
    record = read_record(tmp_path / "r.json")
    metrics = record["metrics"]
    assert record["stage"] == "quantized" and record["method"] == f"{recipe} [16,4]"
    assert 100 < metrics["perplexity"] < 2000 and metrics["blocks"] == 3
    items = pd.read_parquet(tmp_path / "r.items.parquet")  # each block's summed loss
    assert list(items["item"]) == [0, 1, 2] and (items["tokens"] == 63).all()
    pooled = np.exp(items["nll"].sum() / items["tokens"].sum())
    assert pooled == pytest.approx(metrics["perplexity"], rel=1e-5)
    assert 0 < metrics["perplexity_stderr"] < metrics["perplexity"]
    expected_model_ratio = {"fake": 1.0, "nvidia": 1.2, "fp8": 1.2, "bf16": 1.9}[recipe]
    assert metrics["model_compression_ratio"] >= expected_model_ratio
    if recipe == "fp8":
        assert metrics["compression_ratio"] == pytest.approx(32 * 2 / (16 + 8), rel=0.01)
        assert "stand-in" in record["parameters"]["note"]


def int8_everywhere(job, model, bits):
    """A recipe of the test's own: INT8 groups in every decoder Linear, whatever the bits."""
    from accelstudy.ptq.quantize import nvidia

    model, stored, ratio, _ = nvidia(job, model, dict.fromkeys(bits, 8))
    return model, stored, ratio, "INT8 in every decoder Linear"


def test_a_recipe_registered_alone_is_quantized_recorded_and_reported(monkeypatch, tiny, tmp_path):
    """One Recipe in accelstudy.recipes and nothing else: the quantize stage runs its function,
    the record says so and the report's Table 1 heads its column by the recipe's label."""
    from accelstudy import options, recipes
    from accelstudy.ptq import weights
    from accelstudy.records import read_record
    from accelstudy.report.collect import collect_records
    from accelstudy.report.quantization import table1

    int8 = recipes.Recipe("int8", None, "INT8", f"{__name__}:int8_everywhere", (8,))
    monkeypatch.setitem(recipes.RECIPES, "int8", int8)
    options._schema_of.cache_clear()
    try:
        prepare_tiny(tiny, tmp_path)
        assignment = {"bits": [16, 4], "method": "percentile", "layer_bits": {"0": 16, "1": 4}}
        (tmp_path / "a.json").write_text(json.dumps(assignment))
        quantize_tiny(tmp_path, "int8", limit=2)
        record = read_record(tmp_path / "r.json")  # the record schema takes it
        assert record["method"] == "int8 [16,4]" and record["parameters"]["recipe"] == "int8"
        assert record["parameters"]["note"] == "INT8 in every decoder Linear"
        expected = 32 / weights.bits_per_weight(8, 32)  # every Linear at 8 bits, groups of 32
        assert record["metrics"]["compression_ratio"] == pytest.approx(expected, rel=1e-3)
        assert 100 < record["metrics"]["perplexity"] < 2000
        column = table1(collect_records([tmp_path / "r.json"]), ["[16,4]"]).columns
        assert "INT8 [16,4]" in column
    finally:
        options._schema_of.cache_clear()


def test_quantized_eval_computes_in_the_evaluation_dtype(tiny, tmp_path):
    """fake and nvidia compute in evaluation.dtype (the stored INT/FP16 weights stay stored);
    fp8 and bf16 in bfloat16; each record says which."""
    from accelstudy.ptq import weights
    from accelstudy.ptq.quantize import compute_in
    from accelstudy.records import read_record

    prepare_tiny(tiny, tmp_path)
    (tmp_path / "a.json").write_text(
        json.dumps({"bits": [16, 4], "method": "percentile", "layer_bits": {"0": 16, "1": 4}})
    )
    seen = {}
    for recipe, dtype in [("fake", "float32"), ("fake", "bfloat16"), ("nvidia", "bfloat16")]:
        settings = {"block_size": 64, "batch_size": 4, "dtype": dtype}
        quantize_tiny(tmp_path, recipe, limit=2, settings=settings)
        record = read_record(tmp_path / "r.json")
        assert record["parameters"]["compute_dtype"] == dtype
        seen[recipe, dtype] = record["metrics"]["perplexity"]
    assert seen["fake", "bfloat16"] != seen["fake", "float32"]
    quantize_tiny(tmp_path, "fp8", limit=2)  # evaluation.dtype float32: fp8 still in BF16
    assert read_record(tmp_path / "r.json")["parameters"]["compute_dtype"] == "bfloat16"
    model = copy.deepcopy(tiny[0])
    weights.quantize_nvidia(model, dict.fromkeys(weights.layer_map({0: 16, 1: 8}, model), 16))
    compute_in(model, torch.bfloat16)
    stored = {m.weight.dtype for m in model.modules() if isinstance(m, weights.CastLinear)}
    assert stored == {torch.float16} and model.lm_head.weight.dtype == torch.bfloat16


def test_fp8_without_hpu_stops_when_asked(tmp_path):
    from accelstudy.ptq import RecipeDeviceError

    with pytest.raises(RecipeDeviceError, match=r"set ptq\.fp8_without_hpu: standin"):
        quantize_tiny(tmp_path, "fp8", limit=1, fp8_without_hpu="error")
    assert not (tmp_path / "r.json").exists()


def test_median_split_needs_two_precisions():
    config = copy.deepcopy(PTQ_GOOD)
    config["ptq"].update(clustering="median", bit_lists=[[16, 8, 4]])
    with pytest.raises(ConfigError, match="median split needs exactly two precisions"):
        validate_config(config)
    config["ptq"]["bit_lists"] = [[16, 8]]
    assert validate_config(config)["ptq"]["clustering"] == "median"


def test_submodule_median_split_gives_a_module_map_for_fp8(tiny, tmp_path):
    """The real Gaudi path: MLP submodule scores, median split -> BF16 / FP8 per module."""
    from accelstudy.records import read_record

    prepare_tiny(tiny, tmp_path)
    names = [t.name for t in targets(tiny[0], "submodule", "mlp")]
    table = tmp_path / "s.csv"
    pd.DataFrame(
        {"name": names, "layer": [int(n[6:8]) for n in names], "score": [3, 1, 2, 6, 5, 4]}
    ).to_csv(table, index=False)
    cluster(
        table=table,
        bits=[16, 8],
        method="median",
        remainder="last",
        model_dir=tmp_path / "model",
        out=tmp_path / "a.json",
    )
    module_bits = json.loads((tmp_path / "a.json").read_text())["module_bits"]
    assert module_bits == {
        "layer-00.mlp.gate_proj": 8,
        "layer-00.mlp.up_proj": 8,
        "layer-00.mlp.down_proj": 8,
        "layer-01.mlp.gate_proj": 16,
        "layer-01.mlp.up_proj": 16,
        "layer-01.mlp.down_proj": 16,
    }
    quantize_tiny(tmp_path, "fp8", limit=2)
    record = read_record(tmp_path / "r.json")
    assert record["parameters"]["assignment"] == module_bits
    # BF16 halves every Linear; FP8 on layer 0's MLP (24,576 of 73,728 weights): 32n / (16n - 8 n_fp8)
    assert record["metrics"]["compression_ratio"] == pytest.approx(2.4)
    assert 50 < record["metrics"]["perplexity"] < 2000
