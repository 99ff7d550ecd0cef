"""Charge rules against the sites' own statements and worked examples (cited per test)."""

from __future__ import annotations

import pytest
from accelstudy.cost import Allocation, allocation, charged
from accelstudy.errors import ConfigError
from accelstudy.systems import load_system


def units(system: str, used: Allocation, hours: float) -> float:
    spec = load_system(system)
    result = charged(spec.charge, used, hours, spec.per_node)
    assert result["status"] == "ok", result
    return result["units"]


def test_expanse_node_exclusive_gpu_job():
    """SDSC, Expanse job charging: "A node-exclusive job that runs on a GPU node for one hour will
    be charge 4GPU hours (4 GPU x 1 hour)"."""
    used = Allocation(nodes=1, cards=4, cores=40, memory_gb=384, partition="gpu")
    assert units("expanse", used, 1.0) == 4
    # the partition, not the request, decides: one GPU asked in `gpu` still holds the node
    assert units("expanse", Allocation(1, 1, 10, 92, partition="gpu"), 2.0) == 8


def test_expanse_gpu_shared_charges_the_larger_share():
    """SDSC: "A GPU SU is equivalent to 1GPU, <10CPUs, and <92G of memory"; shared partitions
    are charged by "the number of cores or the fraction of the memory requested, whichever is
    larger"."""
    one_su = Allocation(nodes=1, cards=1, cores=10, memory_gb=92, partition="gpu-shared")
    assert units("expanse", one_su, 1.0) == 1
    assert units("expanse", Allocation(1, 1, 20, 92, partition="gpu-shared"), 1.0) == 2
    assert units("expanse", Allocation(1, 2, 10, 276, partition="gpu-shared"), 0.5) == 1.5


def test_perlmutter_node_hours_and_the_shared_fraction():
    """NERSC: "walltime in hours x number of nodes x QOS factor x charge factor"; "Shared jobs
    are only charged for the fraction of the node resources used" (here: GPUs of 4)."""
    assert units("perlmutter", Allocation(nodes=2, cards=8, cores=128, qos="regular"), 1.5) == 3
    assert units("perlmutter", Allocation(nodes=1, cards=1, cores=32, qos="shared"), 2.0) == 0.5
    # the paper's runs: one card in `regular` pays for the whole node
    assert units("perlmutter", Allocation(nodes=1, cards=1, cores=32, qos="regular"), 2.0) == 2


def test_a_workstation_charges_core_hours():
    assert units("cpu", Allocation(nodes=1, cards=2, cores=2), 0.25) == 0.5


def test_no_rule_or_an_unknown_qos_is_unknown_not_a_guess():
    voyager = load_system("voyager")
    result = charged(voyager.charge, Allocation(1, 8, 96), 1.0, voyager.per_node)
    assert result == {"status": "unknown", "reason": "the system file states no charge rule"}
    perlmutter = load_system("perlmutter")
    result = charged(perlmutter.charge, Allocation(1, 4, 64, qos="premium"), 1.0, 4)
    assert result["status"] == "unknown" and "premium" in result["reason"]


def test_the_allocation_slurm_gave_the_job():
    environ = {"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "4"}
    environ |= {"SLURM_CPUS_ON_NODE": "64", "SLURM_MEM_PER_NODE": "229376"}
    environ |= {"SLURM_JOB_QOS": "regular", "SLURM_JOB_PARTITION": "gpu_ss11"}
    used = allocation(cards=8, cores=2, environ=environ)
    assert used == Allocation(2, 8, 128, 458.752, "regular", "gpu_ss11")
    assert allocation(cards=2, cores=2, environ={}) == Allocation(1, 2, 2)
    cpu_job = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "SLURM_CPUS_ON_NODE": "2"}
    assert allocation(cards=2, cores=2, environ=cpu_job) == Allocation(1, 2, 2)  # no GPUs listed


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ({"unit": "SUs", "per": "gpu", "doc": "x"}, "'charge.per': 'gpu' is not one of"),
        ({"unit": "SUs", "per": "card"}, "'charge': 'doc' is a required property"),
        ({"unit": "h", "per": "node", "doc": "x", "qos": {"regular": "one"}}, "charge.qos.regular"),
        ({"unit": "h", "per": "node", "doc": "x", "rate": 2}, "unknown key(s) ['rate']"),
        ({"unit": "SUs", "per": "card", "doc": "x", "cores_per_card": 0}, "less than or equal"),
        ({"unit": "SUs", "per": "card", "doc": "x", "memory_per_card_gb": 0}, "less than or equal"),
    ],
)
def test_a_rule_that_does_not_parse_is_one_line(rule, says):
    """Before any job: a zero share would divide by zero in the record writer, after the run."""
    from accelstudy.systems import check_system

    spec = {"name": "mysite", "device": "cuda", "cards_per_node": 4, "charge": rule}
    with pytest.raises(ConfigError) as caught:
        check_system(spec, "config/systems/mysite.yaml: key")
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert "config/systems/mysite.yaml" in str(caught.value)
