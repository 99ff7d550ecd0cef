"""Instruction/output data for fine-tuning, prepared as the authors' script, optimum-habana's
run_lora_clm.py (`--dataset_concatenation`, `--max_seq_length 512`), prepares it: its
`PROMPT_DICT` (copied unchanged), prompt plus output as one text, labels equal to the inputs
(`train_on_inputs` defaults to True there), concatenated into blocks."""

from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase as Tokenizer

from accelstudy.data import sources
from accelstudy.data.sources import DataSourceError
from accelstudy.files import write_json

# optimum-habana, examples/language-modeling/run_lora_clm.py: PROMPT_DICT
PROMPT_DICT = {
    "prompt_with_input": (
        "Below is an instruction that describes a task, paired with an input that provides "
        "further context. Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:"
    ),
    "prompt_without_input": (
        "Below is an instruction that describes a task. "
        "Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Response:"
    ),
}
DEFAULT_COLUMNS = {"instruction": "instruction", "input": "input", "output": "output"}
ENCODE_CHUNK = 64  # examples tokenised at a time; stops as soon as enough blocks exist


def load_examples(spec: dict[str, Any]) -> list[dict[str, str]]:
    """Examples from source standin | hf (dataset, name, split, revision) | local (file), their
    configured `columns` mapped onto instruction/input/output (input is optional)."""
    source = spec.get("source", "standin")
    if source == "standin":  # real text: each documentation paragraph explains its topic
        from accelstudy.data.standin import corpus_paragraphs

        ask, paragraphs = "Explain the Python documentation topic '{}'.", corpus_paragraphs("train")
        return [{"instruction": ask.format(t), "input": "", "output": p} for t, p in paragraphs]
    if source == "local":
        rows, origin = sources.read_local(Path.cwd() / spec["file"]), f"data file '{spec['file']}'"
    elif source == "hf":
        rows = sources.read_hub(spec, spec.get("split", "train"))
        origin = f"dataset '{spec['dataset']}'"
    else:
        raise DataSourceError(f"config key 'data.source': unknown source '{source}'")
    if not rows:
        raise DataSourceError(f"{origin}: no rows")
    wanted = {**DEFAULT_COLUMNS, **(spec.get("columns") or {})}
    for role in ("instruction", "output"):
        if wanted[role] not in rows[0]:
            raise DataSourceError(
                f"{origin}: no column '{wanted[role]}' (config key 'data.columns.{role}'); "
                f"found {sorted(rows[0])}"
            )
    pairs = [(role, wanted[role] if wanted[role] in rows[0] else None) for role in DEFAULT_COLUMNS]
    return [{role: str(row[col] or "") if col else "" for role, col in pairs} for row in rows]


def prepare_instructions(spec: dict[str, Any], out: str | Path) -> int:
    """Cache the examples as JSON Lines, their source described beside them: ranks stay offline."""
    rows = sources.write_jsonl(load_examples(spec), out)
    described = sources.describe_source(spec, spec.get("split", "train"), spec.get("file"))
    write_json(sources.source_file(out), described)
    return rows


def prompt_text(example: dict[str, str]) -> str:
    """The script's `create_prompts` source followed directly by its target."""
    key = "prompt_with_input" if example.get("input", "") != "" else "prompt_without_input"
    return PROMPT_DICT[key].format_map(example) + example["output"]


def concatenated_blocks(
    examples: list[dict], tokenizer: Tokenizer, max_seq_length: int, limit: int | None = None
) -> dict[str, list[list[int]]]:
    """`--dataset_concatenation`: each example's ids (truncated, EOS appended when it fits) end to
    end, cut into full blocks; only the first `limit` (`--max_train_samples`) are tokenised."""
    eos, stream = tokenizer.eos_token_id, []
    for start in range(0, len(examples), ENCODE_CHUNK):
        texts = [prompt_text(e) for e in examples[start : start + ENCODE_CHUNK]]
        for ids in tokenizer(texts, truncation=True, max_length=max_seq_length)["input_ids"]:
            if eos is not None and (not ids or ids[-1] != eos) and len(ids) < max_seq_length:
                ids = [*ids, eos]
            stream.extend(ids)
        if limit is not None and len(stream) >= limit * max_seq_length:
            break
    full = len(stream) // max_seq_length
    blocks = [stream[i * max_seq_length : (i + 1) * max_seq_length] for i in range(full)][:limit]
    if not blocks:
        fewer = f"the data holds fewer than {max_seq_length} tokens: not one training block"
        raise DataSourceError(fewer)
    masks, labels = [[1] * max_seq_length for _ in blocks], [list(block) for block in blocks]
    return {"input_ids": blocks, "attention_mask": masks, "labels": labels}
