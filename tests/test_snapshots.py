"""Models as snapshots: `prepare-model` finds a Hub model in the cache (laid out as
huggingface_hub lays it out) without loading or copying its weights, names it by repo id and
commit, and says in one line what to do when the Hub refuses."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from accelstudy.models import load_prepared, prepare_model, save_prepared
from accelstudy.ptq.quantize import prepared_bytes
from accelstudy.snapshots import ModelSourceError, fp32_bytes

from tests.conftest import ROOT, TINY_CONFIG

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "org/tiny-llama"


def hub_cache(home: Path, model_files: Path, extra: dict[str, bytes] | None = None) -> Path:
    """HF_HOME/hub/models--org--tiny-llama: blobs named by their etag (sha256 for the LFS
    safetensors, git's sha1 for the rest), snapshots/<commit>/ of links to them, refs/main."""
    repo = home / "hub" / f"models--{REPO.replace('/', '--')}"
    files = {p.name: p.read_bytes() for p in model_files.iterdir()} | (extra or {})
    for name, data in files.items():
        if name.endswith(".safetensors"):
            etag = hashlib.sha256(data).hexdigest()
        else:
            etag = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        (repo / "blobs").mkdir(parents=True, exist_ok=True)
        (repo / "blobs" / etag).write_bytes(data)
        link = repo / "snapshots" / COMMIT / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(repo / "blobs" / etag, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return repo / "snapshots" / COMMIT


def prepare_offline(home: Path, out: Path) -> int:
    """`accelstudy prepare-model` in its own process under HF_HUB_OFFLINE=1; its peak RSS (KiB)."""
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = str(ROOT / "workflow")
    # VmHWM: this process image's own peak (getrusage's ru_maxrss would carry the forking
    # parent's across exec)
    code = "import sys; from accelstudy.cli import main; rc = main(sys.argv[1:]); "
    code += "status = open('/proc/self/status').read().split('VmHWM:')[1]; "
    code += "print(status.split()[0]); sys.exit(rc)"
    spec = json.dumps({"source": "hf", "id": REPO})
    args = [sys.executable, "-c", code, "prepare-model", "--spec", spec, "--out", str(out)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.fixture(scope="module")
def saved(tiny, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("saved") / "tiny"
    save_prepared(*tiny, path)
    return path


def test_a_hub_model_is_named_not_copied(saved, tiny, tmp_path):
    """Offline, from the cache: the manifest names repo and commit, the files keep the Hub's
    digests, no weights are written, and the model loads from the snapshot unchanged."""
    snapshot = hub_cache(tmp_path / "hf", saved)
    out = tmp_path / "results" / "models" / "tiny"
    prepare_offline(tmp_path / "hf", out)
    assert [p.name for p in out.iterdir()] == ["manifest.json"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["id"], manifest["commit"], manifest["path"]) == (REPO, COMMIT, str(snapshot))
    weights = (snapshot / "model.safetensors").read_bytes()
    assert manifest["files"]["model.safetensors"] == {
        "bytes": len(weights),
        "digest": f"sha256:{hashlib.sha256(weights).hexdigest()}",
    }
    assert manifest["dtype_on_disk"] == ["F32"]
    model, tokenizer = load_prepared(out, dtype=torch.bfloat16)  # cast at load, as a job does
    ids = torch.tensor([tokenizer.encode("The if statement is used for conditional execution.")])
    with torch.inference_mode():
        expected = load_prepared(saved, dtype=torch.bfloat16)[0](ids).logits
        assert torch.equal(model(ids).logits, expected)
    assert prepared_bytes(out) == len(weights)  # the compression ratio's FP32 reference


def test_the_fp32_reference_of_a_bf16_snapshot(saved, tmp_path):
    half = tmp_path / "half"
    save_prepared(load_prepared(saved, dtype=torch.bfloat16)[0], load_prepared(saved)[1], half)
    """4 bytes per parameter, and the header as it is: a few bytes from the FP32 file's."""
    assert fp32_bytes(saved) == (saved / "model.safetensors").stat().st_size
    assert fp32_bytes(half) == pytest.approx(fp32_bytes(saved), abs=64)


def test_preparing_does_not_grow_with_the_model(saved, tmp_path):
    """The prepare process's peak RSS: the same (within 32 MiB) for a model 200 MB larger,
    and far below the 200 MB it would take to load those weights."""
    hub_cache(tmp_path / "a", saved)
    hub_cache(tmp_path / "b", saved, {"extra.safetensors": _safetensors_bytes(50_000_000)})
    small_rss = prepare_offline(tmp_path / "a", tmp_path / "small")
    big_rss = prepare_offline(tmp_path / "b", tmp_path / "big")
    assert abs(big_rss - small_rss) < 32 * 1024, (small_rss, big_rss)
    assert big_rss < 200 * 1024, big_rss  # KiB: no torch, no weights in the prepare process


def _safetensors_bytes(count: int) -> bytes:
    from safetensors.torch import save

    return save({"extra": torch.zeros(count)})


def test_the_job_record_names_repo_and_commit(saved, tmp_path):
    from accelstudy.data.sources import prepare_data
    from accelstudy.evaluate.baseline import baseline

    hub_cache(tmp_path / "hf", saved)
    out = tmp_path / "models" / "tiny"
    prepare_offline(tmp_path / "hf", out)
    data = tmp_path / "data" / "validation.jsonl"
    prepare_data("boolq", {"source": "standin"}, "validation", data)
    settings = {"batch_size": 4, "boolq_max_length": 512, "dtype": "float32"}
    flags = {"study": "t", "system": "cpu", "model_name": "tiny", "model_dir": out}
    flags |= {"task": "boolq", "data": data, "data_source": "standin", "settings": settings}
    items = tmp_path / "r.items.parquet"
    record = baseline(protocol="paper", limit=4, out=tmp_path / "r.json", items=items, **flags)
    model = {"source": "hf", "id": REPO, "revision": "main", "commit": COMMIT}
    assert record["inputs"]["model"] == model | {"dtype_on_disk": ["F32"]}
    assert record["inputs"]["data"]["generator"] == "accelstudy stand-in 1"


def test_a_local_directory_is_used_in_place_and_hashed_once(saved, tmp_path, monkeypatch):
    monkeypatch.chdir(saved.parent)
    out = tmp_path / "m"
    first = prepare_model({"source": "local", "path": "tiny"}, out)
    assert first["path"] == str(saved) and [p.name for p in out.iterdir()] == ["manifest.json"]
    hashed = []
    monkeypatch.setattr("accelstudy.snapshots.sha256_file", lambda p: hashed.append(p) or "x")
    again = prepare_model({"source": "local", "path": "tiny"}, out)
    assert again["digest"] == first["digest"] and hashed == []  # same size and mtime: reused
    assert load_prepared(out)[0].config.num_hidden_layers == 2


def _refusal(kind: str):
    from huggingface_hub import errors

    if kind == "LocalEntryNotFoundError":
        return errors.LocalEntryNotFoundError("not in the cache")
    return getattr(errors, kind)("refused", response=SimpleNamespace(headers={}, request=None))


@pytest.mark.parametrize(
    ("refusal", "said"),
    [
        ("GatedRepoError", "is gated: accept its licence on its Hub page, then `hf auth login`"),
        ("RepositoryNotFoundError", "no such repository; check models.tiny.id (org/name)"),
        ("RevisionNotFoundError", "no such revision; set models.tiny.revision to a branch"),
        (
            "LocalEntryNotFoundError",
            "kept the Hub out: run `hf download org/tiny-llama --revision v2`",
        ),
    ],
)
def test_the_hub_refusing_is_one_line(refusal, said, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise _refusal(refusal)

    monkeypatch.setattr("huggingface_hub.snapshot_download", refuse)
    with pytest.raises(ModelSourceError) as error:
        prepare_model({"source": "hf", "id": REPO, "revision": "v2"}, tmp_path / "tiny")
    assert str(error.value).startswith(f"models.tiny: '{REPO}' at revision 'v2'")
    assert said in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "tiny").exists()


def test_a_model_that_is_no_causal_lm_is_refused_at_prepare(saved, tmp_path, monkeypatch):
    """Read from config.json, before any job: an encoder is not what the jobs can load."""
    import shutil

    bert = tmp_path / "bert"
    shutil.copytree(saved, bert)
    config = json.loads((bert / "config.json").read_text())
    (bert / "config.json").write_text(json.dumps(config | {"architectures": ["BertModel"]}))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelSourceError, match=r"has architectures \['BertModel'\]; expected a"):
        prepare_model({"source": "local", "path": "bert"}, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_one_search_finds_a_models_config_for_every_plan(tmp_path, monkeypatch):
    """plan-fit (planner.model_source) and plan-time (forecast.decoder_sizes) read a model's
    config.json from the one place snapshots.config_folder names: a random model's named
    config, a shipped model's, a prepared model's; before it is prepared, one line for plan-fit
    and no sizes for plan-time."""
    from accelstudy.config import validate_config
    from accelstudy.errors import ConfigError
    from accelstudy.finetune.planner import model_source
    from accelstudy.forecast import decoder_sizes
    from accelstudy.snapshots import config_folder

    monkeypatch.chdir(tmp_path)
    shipped = Path(__file__).parents[1] / "resources" / "models"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.json").write_text(
        (shipped / "tinyllama-1.1b/config.json").read_text()
    )
    study = json.loads(json.dumps(TINY_CONFIG)) | {"results_dir": str(tmp_path / "results")}
    study["models"] |= {
        "random": {"source": "random", "config": "mine"},
        "tinyllama-1.1b": {"source": "hf", "id": "TinyLlama/TinyLlama-1.1B-Chat-v1.0"},
        "local": {"source": "hf", "id": "someone/unprepared"},
    }
    validate_config(study)
    assert config_folder(study, "random") == tmp_path / "mine"
    assert config_folder(study, "tinyllama-1.1b") == shipped / "tinyllama-1.1b"
    assert config_folder(study, "local") is None
    for name in ("random", "tinyllama-1.1b"):
        assert model_source(study, name) == config_folder(study, name)
        assert decoder_sizes(study, name)["hidden_size"] == 2048
    with pytest.raises(ConfigError, match=r"model 'local': no config\.json in resources/models"):
        model_source(study, "local")
    assert decoder_sizes(study, "local") is None
