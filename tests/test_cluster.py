import json

import pytest

from shared.contract.cluster import cluster_env, master_port

HOSTS = ["sl-j-a1-n0", "sl-j-a1-n1", "sl-j-a1-n2"]


def test_pytorch_gets_the_env_rendezvous() -> None:
    env = cluster_env("pytorch", HOSTS, 1, 29500)
    assert {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")} == {
        "MASTER_ADDR": "sl-j-a1-n0",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "3",
        "RANK": "1",
    }
    assert (env["LOCAL_RANK"], env["NODE_RANK"]) == ("0", "1")


def test_tensorflow_gets_tf_config() -> None:
    config = json.loads(cluster_env("tensorflow", HOSTS, 2, 29500)["TF_CONFIG"])
    assert config["cluster"]["worker"] == [
        "sl-j-a1-n0:29500",
        "sl-j-a1-n1:29501",
        "sl-j-a1-n2:29502",
    ]
    assert config["task"] == {"type": "worker", "index": 2}


def test_xgboost_and_jax_get_theirs() -> None:
    xgb = cluster_env("xgboost", HOSTS, 0, 9999)
    assert (xgb["WORKER_ADDRS"], xgb["WORKER_PORT"]) == ("sl-j-a1-n1,sl-j-a1-n2", "9999")
    jax = cluster_env("jax", HOSTS, 2, 1234)
    assert (jax["JAX_COORDINATOR_ADDRESS"], jax["JAX_NUM_PROCESSES"], jax["JAX_PROCESS_ID"]) == (
        "sl-j-a1-n0:1234",
        "3",
        "2",
    )


def test_ranks_outside_the_cluster_are_refused() -> None:
    with pytest.raises(ValueError, match="rank 3"):
        cluster_env("pytorch", HOSTS, 3, 1)


def test_ports_differ_per_attempt() -> None:
    assert master_port("j", 1) != master_port("j", 2)
    assert 20000 <= master_port("j", 1) < 32000
