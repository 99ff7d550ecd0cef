"""A whole study checked before any job runs (by common.smk and the CLI): the config schema,
then each part's sweep against its system; every failure is one line naming key and fix."""

from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from accelstudy.config import validate_config
from accelstudy.data.dust import check_preset
from accelstudy.data.sources import file_problem
from accelstudy.errors import require
from accelstudy.files import read_yaml
from accelstudy.forecast import decoder_sizes
from accelstudy.points import FINETUNE_KEYS, FinetunePoint, diffusion_point
from accelstudy.pruning import targets_per_layer
from accelstudy.strategies import STRATEGIES
from accelstudy.systems import System, load_system


def validate_study(config: dict[str, Any], base_dir: Path | None = None) -> System:
    """Validate `config` in place (filling defaults); return the system it runs on."""
    validate_config(config, base_dir)
    system = load_system(config["system"])
    system.check_dtype("evaluation.dtype", config["evaluation"]["dtype"])
    check_data(config, base_dir or Path.cwd())
    check_ptq(config)
    check_finetune(config, system)
    check_diffusion(config, system)
    return system


def load_study(path: str | Path) -> dict[str, Any]:
    """Read a YAML study file and check it."""
    validate_study(config := read_yaml(path))
    return config


def check_data(config: Mapping[str, Any], base: Path) -> None:
    """Local task files read as their job will (empty, a byte-order mark, a line that is not
    JSON), so the mistake is named by file and line now, not by byte position in a job."""
    for name, task in config["tasks"].items():
        files = (task.get("files") or {}) if task["source"] == "local" else {}
        for split, file in files.items():
            problem = file_problem(base / file, file)
            require(problem is None, f"tasks.{name}.files.{split}", str(problem))


def check_ptq(config: Mapping[str, Any]) -> None:
    """Chunks of a scan that would hold no target, where the model's layers are known before any
    job (shipped sizes, a tiny model, a prepared one); a Hub model's, only once prepared."""
    ptq = config["ptq"]
    evaluated = [m for m, spec in sorted(config["models"].items()) if spec["evaluate"]]
    for model in evaluated if ptq["enabled"] else []:
        layers = (decoder_sizes(config, model) or {}).get("num_hidden_layers")
        targets = (layers or 0) * targets_per_layer(ptq["granularity"], ptq["family"])
        problem = f"{ptq['chunks']} chunks, but model '{model}' has {targets} {ptq['granularity']}"
        problem += f" targets ({layers} layers) to scan; set ptq.chunks to at most {targets}"
        require(not layers or ptq["chunks"] <= targets, "ptq.chunks", problem)


def check_finetune(config: Mapping[str, Any], system: System) -> None:
    """Models configured, cards the system has, dtype it offers, DeepSpeed for ZeRO-3."""
    sweep, configured = config["finetune"], sorted(config["models"])
    if not sweep["enabled"]:
        return
    for model in sweep.get("models") or []:
        problem = f"model '{model}' is not configured under 'models'; configured: {configured}"
        require(model in configured, "finetune.models", problem)
    system.check_cards("finetune.cards", sweep["cards"])
    system.check_dtype("finetune.dtype", sweep["dtype"])
    untimed = FinetunePoint.from_dict({key: sweep[key] for key in FINETUNE_KEYS}).untimed()
    require(untimed is None, "finetune.max_steps", str(untimed))
    needs = [(s, need) for s in sweep["strategies"] if (need := STRATEGIES[s].engine.missing())]
    strategy, package = needs[0] if needs else ("", "")
    problem = f"{strategy} needs {package}, which is not installed here; pip install the pinned "
    problem += f"{package}, drop it, or set finetune.on_unsupported: record"
    require(not needs or sweep["on_unsupported"] != "error", "finetune.strategies", problem)
    file = str(sweep["data"].get("file", ""))
    missing = sweep["data"].get("source") == "local" and not Path(file).is_file()
    problem = f"'{file}' is no file here; put the instruction data there or give another source"
    require(not missing, "finetune.data.file", problem)


def check_diffusion(config: Mapping[str, Any], system: System) -> None:
    """Image sizes the UNet can halve (once per extra multiplier), cards, dtype and data."""
    sweep = config["diffusion"]
    if not sweep["enabled"]:
        return
    data, model = sweep["data"], sweep["model"]
    size, scale, levels = data["hr_size"], data["scale"], len(model["channel_multipliers"])
    factor = 2 ** (levels - 1)
    halved = f"{size} pixels cannot be halved {levels - 1} times by the UNet "
    halved += f"(channel_multipliers has {levels} levels); use a multiple of {factor}"
    require(not size % factor, "diffusion.data.hr_size", halved)
    resolutions = [size // 2**i for i in range(levels)]
    for res in model["attention_resolutions"]:
        problem = f"{res} is not one of the UNet's resolutions {resolutions}"
        require(res in resolutions, "diffusion.model.attention_resolutions", problem)
    problem = f"{size} pixels do not divide by {scale}; pick a scale that divides hr_size"
    require(not size % scale, "diffusion.data.scale", problem)
    inner, steps = model["inner_channels"], sweep["quality"]["sampling_steps"]
    for level, channels in enumerate(inner * m for m in model["channel_multipliers"]):
        groups = f"{channels} channels at level {level} do not divide into diffusers' "
        groups += f"{min(32, inner)} norm groups; use inner_channels below 32 or a multiple of 32"
        require(not channels % min(32, inner), "diffusion.model.inner_channels", groups)
        heads = f"attention at {size >> level} pixels has {channels} channels, fewer than one "
        heads += "8-channel head; raise inner_channels or drop that resolution"
        attended = size >> level in model["attention_resolutions"]
        require(not attended or channels >= 8, "diffusion.model.inner_channels", heads)
    problem = f"{steps} sampling steps, but the schedule has {sweep['schedule']['steps']}; "
    require(steps <= sweep["schedule"]["steps"], "diffusion.quality.sampling_steps",
            problem + "use at most diffusion.schedule.steps")  # fmt: skip
    system.check_cards("diffusion.devices", sweep["devices"])
    for devices in sweep["devices"]:  # each point as its rule builds it
        untimed = diffusion_point(config, SimpleNamespace(devices=devices, repeat=0)).untimed()
        require(untimed is None, "diffusion.total_iterations", str(untimed))
        per_device, batch = data["patches"] // devices, sweep["batch_per_device"]
        few = f"{data['patches']} images over {devices} devices leave {per_device} per device, "
        few += f"no batch of {batch}; set patches to at least {batch * max(sweep['devices'])}"
        require(data["source"] == "local" or per_device >= batch, "diffusion.data.patches", few)
    system.check_dtype("diffusion.dtype", sweep["dtype"])
    if data["source"] == "pysm":
        check_preset(data["preset"], data["nside"])
    if data["source"] == "local":
        file = data.get("file")
        problem = f"'{file}' is no file; give an npz with an `hr` array (and optionally `lr`)"
        require(Path(file or "").is_file(), "diffusion.data.file", problem)
