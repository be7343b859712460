import itertools
import json

import pytest

from spotline.shared.contract.cluster import PORT_SPAN, cluster_env, gang_port, master_port

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


def test_jax_also_gets_the_seed_jax_operator_names() -> None:
    env = cluster_env("jax", HOSTS, 1, 1234)
    assert {k: env[k] for k in env if k.startswith("JAXOPERATOR_")} == {
        "JAXOPERATOR_COORDINATOR_ADDRESS": "sl-j-a1-n0:1234",
        "JAXOPERATOR_NUM_PROCESSES": "3",
        "JAXOPERATOR_PROCESS_ID": "1",
    }


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "xgboost", "jax", "ray", "command"])
def test_every_framework_gets_the_nodes_list_a_script_finds_its_rank_in(framework: str) -> None:
    # A script may find its rank as nodes = os.environ['NODES'].split();
    # node_rank = nodes.index(socket.gethostname()), the hostname being the VM name.
    names = ["sl-j-a1-n0", "sl-j-a1-n1", "sl-j-a1-n2"]
    env = cluster_env(framework, ["10.0.0.5", "10.0.0.6", "10.0.0.7"], 2, 7777, nodes=names)
    assert env["NODES"].split().index("sl-j-a1-n2") == 2
    assert env["NODES"] == "sl-j-a1-n0 sl-j-a1-n1 sl-j-a1-n2"
    assert cluster_env(framework, HOSTS, 0, 7777)["NODES"] == " ".join(HOSTS)


def test_node_names_must_match_the_hosts() -> None:
    with pytest.raises(ValueError, match="2 node names for 3 hosts"):
        cluster_env("pytorch", HOSTS, 0, 1, nodes=["a", "b"])


def test_ray_gets_the_head_address() -> None:
    env = cluster_env("ray", HOSTS, 2, 6379)
    assert (env["RAY_ADDRESS"], env["RAY_SERVER"]) == ("sl-j-a1-n0:6379", "sl-j-a1-n0:6379")
    assert "RAY_ADDRESS" not in cluster_env("pytorch", HOSTS, 2, 6379)


def test_a_regrouped_gangs_ports_never_overlap_the_generation_before() -> None:
    """Each generation of a regrouped gang rendezvouses on ports of its own:
    a node of the generation before that has not died yet (its ranks, a Ray
    head's three ports, an XGBoost tracker) holds none of them."""
    near = []
    for job in range(3000):
        ports = [gang_port(f"j{job}", 1, generation) for generation in range(4)]
        for before, after in itertools.pairwise(ports):
            assert 20000 <= after < 32000
            if abs(after - before) < PORT_SPAN:
                near.append((f"j{job}", before, after))
    assert near == []
